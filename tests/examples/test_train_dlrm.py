"""The DLRM-like example: its exchanges are differentiated right, and it trains alike on every backend.

* Gradients (2 gloo ranks, :func:`deploy.local_world.run_world`): one step of
  the sharded model equals a single-process reference on the concatenated
  global batch, the MLP's DDP gradients and every owner's table gradients
  (which arrive through the backward all-to-all) included.
* Training (4 ranks, each a ``python examples/train_dlrm.py`` process with
  env:// rendezvous, as in ``test_training_examples.py``): the defaults' losses
  fall and are equal on gloo and ``p2enforcer``; the JSON holds the documented
  sizes; the enforcer's trace shows the documented ops every iteration; and a
  plan made from that trace (all-to-alls and all-reduces) gives gloo's losses.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from deploy.local_world import run_world
from tests.examples.test_training_examples import EXAMPLES, ROOT, run_job, unavailable

SCRIPT = "train_dlrm.py"
WORLD_SIZE = 4
STEPS = 8
REL_TOLERANCE = 1e-5
# A small model for the gradient check: 4 tables on 2 ranks, so each owner holds 2.
SMALL = {"tables": 4, "rows": 50, "dim": 8, "dense": 6, "batch": 5, "bag": 3, "bottom": (16,), "top": (12,)}
# The documented defaults, per rank and step.
DEFAULT_MODEL = {"tables": 16, "rows": 20_000, "dim": 64, "dense": 64, "batch": 128, "bag": 8,
                 "bottom": [512, 256], "top": [512, 256], "embedding_parameters": 20_480_000,
                 "mlp_parameters": 415_553, "all_to_all_index_bytes": 131_072, "all_to_all_forward_bytes": 524_288,
                 "all_to_all_backward_bytes": 524_288, "all_to_all_bytes": 1_179_648,
                 "all_reduce_gradient_bytes": 1_662_212, "all_reduce_bytes": 1_662_216}
# What every iteration issues from step 3 on: indices out, pooled vectors back, DDP's three
# gradient buckets (the bottom MLP's gradients come before the pooled vectors' in the
# backward pass), the pooled vectors' gradients back to their owners, the loss average.
STEADY_OPS = [("all_to_all_single", "int64", 131_072), ("all_to_all_single", "float32", 524_288),
              ("all_reduce", "float32", 526_340), ("all_reduce", "float32", 1_002_752),
              ("all_reduce", "float32", 133_120), ("all_to_all_single", "float32", 524_288),
              ("all_reduce", "float32", 4)]


def import_example():
    """``examples/train_dlrm.py`` as a module (it imports its siblings from ``examples/``)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import train_dlrm

    return train_dlrm


def one_step(sizes: dict) -> dict:
    """On each rank: one forward/backward of the sharded model; its loss and gradients, and a bare exchange's."""
    import torch.distributed as dist

    train_dlrm = import_example()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shape = train_dlrm.DLRMShape(**sizes)
    torch.manual_seed(train_dlrm.training.MODEL_SEED)
    dense_arch = torch.nn.parallel.DistributedDataParallel(train_dlrm.DenseArch(shape))
    embeddings = train_dlrm.ShardedEmbeddingBags(shape, rank, world_size)
    dense, indices, clicks = next(train_dlrm.synthetic_batches(shape, rank))
    loss = torch.nn.functional.binary_cross_entropy_with_logits(dense_arch(dense, embeddings(indices)), clicks)
    loss.backward()
    embeddings.average_gradients()

    # The bare exchange: block j of rank i holds 10 i + j; the output's gradient is its
    # own position, so the input's gradient shows where every block went. The output is
    # used transposed, as the model uses it, so its gradient arrives non-contiguous.
    blocks = (10.0 * rank + torch.arange(world_size, dtype=torch.float32)).repeat_interleave(3).view(world_size, 3)
    blocks.requires_grad_()
    exchanged = train_dlrm.AllToAll.apply(blocks)
    positions = (100.0 * rank + torch.arange(world_size, dtype=torch.float32)).repeat(3, 1)
    exchanged.t().backward(positions)
    return {"loss": loss.item(),
            "mlp": {name: p.grad.tolist() for name, p in dense_arch.module.named_parameters()},
            "tables": {table: bag.weight.grad.to_dense().tolist() for table, bag in zip(embeddings.owned, embeddings.bags)},
            "exchanged": exchanged[:, 0].tolist(), "exchange_grad": blocks.grad[:, 0].tolist()}


def reference_step(sizes: dict, world_size: int) -> tuple[list[float], dict, dict]:
    """One step of the same model in one process on every rank's batch: per-rank losses, MLP and table gradients."""
    train_dlrm = import_example()
    shape = train_dlrm.DLRMShape(**sizes)
    torch.manual_seed(train_dlrm.training.MODEL_SEED)
    dense_arch = train_dlrm.DenseArch(shape)
    bags = [torch.nn.EmbeddingBag(shape.rows, shape.dim, mode="sum", sparse=True) for _ in range(shape.tables)]
    bound = 1 / math.sqrt(shape.dim)
    with torch.no_grad():
        for table, bag in enumerate(bags):
            bag.weight.uniform_(-bound, bound, generator=torch.Generator().manual_seed(
                train_dlrm.training.MODEL_SEED + 100 + table))
    batches = [next(train_dlrm.synthetic_batches(shape, rank)) for rank in range(world_size)]
    dense, indices, clicks = (torch.cat(parts, dim=dim) for parts, dim in zip(zip(*batches), (0, 1, 0)))
    pooled = torch.stack([bag(indices[table]) for table, bag in enumerate(bags)], dim=1)
    per_sample = torch.nn.functional.binary_cross_entropy_with_logits(dense_arch(dense, pooled), clicks,
                                                                      reduction="none")
    per_sample.mean().backward()
    losses = [part.mean().item() for part in per_sample.detach().split(shape.batch)]
    return (losses, {name: p.grad for name, p in dense_arch.named_parameters()},
            {table: bag.weight.grad.to_dense() for table, bag in enumerate(bags)})


@pytest.mark.multiproc
def test_sharded_step_has_the_gradients_of_one_process_on_the_global_batch():
    world_size = 2
    ranks = run_world(world_size, one_step, SMALL)
    losses, mlp, tables = reference_step(SMALL, world_size)
    assert [rank["loss"] for rank in ranks] == pytest.approx(losses, rel=1e-6)
    for rank in ranks:
        assert rank["mlp"].keys() == mlp.keys()
        for name, grad in mlp.items():
            torch.testing.assert_close(torch.tensor(rank["mlp"][name]), grad, rtol=1e-5, atol=1e-7, msg=name)
    owned = [table for rank in ranks for table in rank["tables"]]
    assert owned == list(range(SMALL["tables"]))        # table-wise: 0 and 1 on rank 0, 2 and 3 on rank 1
    for rank in ranks:
        for table, grad in rank["tables"].items():
            assert tables[table].abs().sum() > 0
            torch.testing.assert_close(torch.tensor(grad), tables[table], rtol=1e-5, atol=1e-7, msg=f"table {table}")
    # Block j of rank i went to block i of rank j; its gradient came back from there.
    assert [rank["exchanged"] for rank in ranks] == [[0.0, 10.0], [1.0, 11.0]]
    assert [rank["exchange_grad"] for rank in ranks] == [[0.0, 100.0], [1.0, 101.0]]


def test_help_describes_the_flags():
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    for text in ("--backend", "--steps", "--json", "--tables", "--rows", "--dim", "--dense", "--batch", "--bag",
                 "--bottom", "--top", "P2_EXAMPLE_BACKEND", "torchrun", "p2 cluster run", "131,072 B"):
        assert text in result.stdout


@pytest.mark.parametrize("flags,world_size,message", [
    (["--backend", "no-such-backend"], "4", "torch.distributed backend 'no-such-backend' is not registered (known: "),
    (["--backend", "gloo", "--tables", "6"], "4", "--tables 6 is not a multiple of the world size 4"),
])
def test_a_bad_flag_is_one_line_and_exit_code_2_before_rendezvous(flags, world_size, message):
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), *flags], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "WORLD_SIZE": world_size}, check=False)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"{SCRIPT}: error: {message}")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """A gloo run and a traced ``p2enforcer`` run of the defaults on 4 ranks, each once per module."""
    done: dict[str, tuple] = {}

    def get(backend: str) -> tuple[dict, list[str], Path | None]:
        reason = unavailable(backend)
        if reason:
            pytest.skip(reason)
        if backend not in done:
            folder = tmp_path_factory.mktemp(f"dlrm-{backend}")
            traced = {"P2_TRACE_FILE": str(folder / "trace.json")} if backend == "p2enforcer" else {}
            result, logs = run_job(SCRIPT, backend, WORLD_SIZE, STEPS, folder, traced)
            done[backend] = result, logs, folder / "trace.rank0.json" if traced else None
        return done[backend]

    return get


def mismatches(reference: list[float], losses: list[float]) -> list[tuple[int, float, float]]:
    assert len(reference) == len(losses) == STEPS
    return [(step, want, got) for step, (want, got) in enumerate(zip(reference, losses), 1)
            if not math.isclose(got, want, rel_tol=REL_TOLERANCE)]


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["gloo", "p2enforcer"])
def test_training_reduces_the_loss_and_reports_the_sizes(jobs, backend):
    result, logs, _ = jobs(backend)
    assert {k: result[k] for k in ("backend", "world_size", "steps")} == {
        "backend": backend, "world_size": WORLD_SIZE, "steps": STEPS}
    assert result["model"] == DEFAULT_MODEL
    losses = result["losses"]
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < losses[0] and min(losses[:2]) > max(losses[-2:]), losses
    assert result["seconds"] > 0
    printed = re.findall(r"^step (\d+) loss (\S+)$", logs[0], flags=re.MULTILINE)
    assert [int(step) for step, _ in printed] == list(range(1, STEPS + 1))
    assert [float(loss) for _, loss in printed] == pytest.approx(losses, abs=1e-6)
    assert logs[0].count("per rank and step: all_to_all 1,179,648 B") == 1
    assert all("step 1 loss" not in log and "all_to_all" not in log for log in logs[1:])


@pytest.mark.multiproc
@pytest.mark.slow
def test_losses_on_p2enforcer_equal_gloo(jobs):
    reference, _, _ = jobs("gloo")
    result, _, _ = jobs("p2enforcer")
    assert mismatches(reference["losses"], result["losses"]) == [], "(step, gloo, p2enforcer) where they differ"


@pytest.mark.multiproc
@pytest.mark.slow
def test_trace_shows_the_all_to_alls_and_all_reduces_of_every_iteration(jobs):
    _, _, trace_path = jobs("p2enforcer")
    trace = json.loads(trace_path.read_text())
    iterations = {index: [(op["kind"], op["dtype"], op["bytes"]) for op in ops]
                  for index, ops in itertools.groupby(trace["ops"], key=lambda op: op["iteration"])}
    assert sorted(iterations) == list(range(STEPS))
    # Step 1: DDP's construction (1 all_gather, 2 broadcasts) and all gradients in one bucket;
    # step 2: 2 broadcasts as DDP rebuilds its buckets in gradient order.
    assert [op for op in iterations[0] if op[0] == "all_to_all_single"] == [
        op for op in STEADY_OPS if op[0] == "all_to_all_single"]
    assert ("all_reduce", "float32", DEFAULT_MODEL["all_reduce_gradient_bytes"]) in iterations[0]
    assert [op for op in iterations[1] if op[0] != "broadcast"] == STEADY_OPS
    for index in range(2, STEPS):
        assert iterations[index] == STEADY_OPS, f"iteration {index}"


@pytest.mark.multiproc
@pytest.mark.slow
def test_losses_under_a_plan_from_the_trace_equal_gloo(jobs, tmp_path):
    """Plan every op of the traced run's last iteration by rule (segmented, two channels; the
    all-to-alls splined), run again with P2_PLAN_FILE: the plan runs, and the losses are gloo's."""
    from optimizer_service.plan.op_plan import PLAN_KIND
    from optimizer_service.plan.plan import Plan

    reference, _, _ = jobs("gloo")
    _, _, trace_path = jobs("p2enforcer")
    made = subprocess.run([sys.executable, "-m", "optimizer_service.cli", "rule-plan", str(trace_path),
                           str(tmp_path / "plan.json"), "--segments", "2", "--channels", "2"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert made.returncode == 0, made.stderr
    plan = Plan.parse((tmp_path / "plan.json").read_text())
    assert sorted(op.key.kind for op in plan.ops) == ["all_reduce"] * 4 + ["all_to_all"] * 3
    result, _ = run_job(SCRIPT, "p2enforcer", WORLD_SIZE, STEPS, tmp_path / "planned",
                        {"P2_PLAN_FILE": str(tmp_path / "plan.json"),
                         "P2_TRACE_FILE": str(tmp_path / "planned" / "trace.json")})
    planned = json.loads((tmp_path / "planned" / "trace.rank0.json").read_text())
    enforced = [op for op in planned["ops"] if op["enforced"]]
    assert {PLAN_KIND[op["kind"]] for op in enforced} == {"all_reduce", "all_to_all"}
    assert len(enforced) >= len(plan.ops) * (STEPS // 2)
    assert mismatches(reference["losses"], result["losses"]) == [], "(step, gloo, planned) where they differ"
