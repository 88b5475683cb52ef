"""Multiproc (loopback): FSDP2 in bf16 mixed precision through ``p2enforcer``, on the C++ backend and the Python group.

``examples/train_fsdp.py --mixed-precision bf16`` all-gathers the parameters
in bf16 and reduce-scatters the gradients in fp32 (``--reduce-dtype fp32``,
the default) or bf16. Each case is a real 4-rank job (``run_job`` of
``test_training_examples.py``: one process per rank, env:// rendezvous).

* Passthrough: every op goes to gloo as it came, so the losses equal plain
  gloo's bit for bit; the trace records FSDP2's all-gathers as
  ``all_gather_into_tensor`` in ``bfloat16`` and its reduce-scatters as
  ``reduce_scatter_tensor`` in the reduce dtype, with the bytes the script
  computes for its model (``--json``'s ``model``).
* Under a plan (``p2 rule-plan`` of that trace: every op cut in two segments
  over two channels) every op runs enforced, and the losses equal gloo's
  within the rounding of another summation order. The bound, per reduce
  dtype: the all-gathers move bits, so only the reductions can differ.
  In fp32 a reordered sum of 4 terms differs by a few units of 2^-24, and
  8 SGD steps leave the loss within ``REL_TOLERANCE`` (1e-5, the other
  examples' bound; measured: 1.1e-7). In bf16 (unit roundoff u = 2^-8) each
  reduced gradient element may differ by up to 2(p-1)·u of the sum of its
  terms' magnitudes; such differences, of the same size as the bf16 rounding
  every gradient already has, move the loss by far less than one bf16
  rounding of it: the bound is u relative (3.9e-3; measured: at most
  5.6e-4 over the 8 steps). That bound is a stated reading, not a worst case:
  errors that all pointed one way over 8 steps could reach about 0.1.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.enforcer.impls import IMPLS, impl_env
from tests.examples.test_training_examples import EXAMPLES, REL_TOLERANCE, ROOT, JobRuns, run_job

SCRIPT = "train_fsdp.py"
WORLD = 4
STEPS = 8
REDUCE_DTYPES = ["fp32", "bf16"]
TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}
# Loss tolerance (relative) of a planned run against gloo, per reduce dtype (the module docstring).
PLANNED_TOLERANCE = {"fp32": REL_TOLERANCE, "bf16": 2.0 ** -8}


def flags(reduce_dtype: str) -> list[str]:
    return ["--mixed-precision", "bf16", "--reduce-dtype", reduce_dtype]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Runs each (backend, impl, reduce dtype, plan file) once per module; a failure is remembered.

    ``impl`` is ``""`` for gloo. p2enforcer runs write their traces next to their logs.
    """
    runs = JobRuns()

    def get(backend: str, impl: str, reduce_dtype: str, plan: Path | None = None) -> tuple[dict, Path]:
        def run() -> tuple[dict, Path]:
            folder = tmp_path_factory.mktemp(f"fsdp-{backend}-{impl or 'plain'}-{reduce_dtype}"
                                             f"-{'planned' if plan else 'passthrough'}")
            env = {}
            if backend == "p2enforcer":
                env = {**impl_env(impl), "P2_TRACE_FILE": str(folder / "trace.json")}
                if plan is not None:
                    env["P2_PLAN_FILE"] = str(plan)
            result, _ = run_job(SCRIPT, backend, WORLD, STEPS, folder, env, flags(reduce_dtype))
            return result, folder

        return runs.get((backend, impl, reduce_dtype, plan), backend, run)

    return get


def rank0_trace(folder: Path) -> dict:
    return json.loads((folder / "trace.rank0.json").read_text())


def differences(reference: dict, result: dict, tolerance: float) -> list[tuple[int, float, float]]:
    """``(step, gloo, ours)`` where the losses differ by more than ``tolerance`` (relative)."""
    assert len(result["losses"]) == len(reference["losses"]) == STEPS
    return [(step, want, got) for step, (want, got) in enumerate(zip(reference["losses"], result["losses"]), 1)
            if not math.isclose(got, want, rel_tol=tolerance, abs_tol=0.0)]


def test_help_names_the_precision_and_size_flags():
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for flag in ("--mixed-precision", "--reduce-dtype", "--width", "--hidden", "--blocks", "MixedPrecisionPolicy"):
        assert flag in result.stdout


def test_an_unknown_precision_is_exit_code_2():
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), "--mixed-precision", "fp8"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    # argparse's usage, then its one line (the choices' quoting varies with the Python version).
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{SCRIPT}: error: argument --mixed-precision: invalid choice: 'fp8' (choose from ")
    assert "bf16" in last and "fp32" in last


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("reduce_dtype", REDUCE_DTYPES)
@pytest.mark.parametrize("impl", IMPLS)
def test_passthrough_equals_gloo_bit_for_bit_and_traces_the_bf16_collectives(jobs, impl, reduce_dtype):
    reference, _ = jobs("gloo", "", reduce_dtype)
    result, folder = jobs("p2enforcer", impl, reduce_dtype)
    assert result["losses"] == reference["losses"]
    assert result["losses"][-1] < result["losses"][0]
    model = result["model"]
    assert (model["mixed_precision"], model["reduce_dtype"]) == ("bf16", reduce_dtype)

    trace = rank0_trace(folder)
    assert trace["bypassed"] == {}
    iteration = [op for op in trace["ops"] if op["iteration"] == STEPS // 2]
    assert not any(op["enforced"] for op in trace["ops"])
    signature = {(op["kind"], op["dtype"]) for op in iteration}
    assert signature == {("all_gather_into_tensor", "bfloat16"),
                         ("reduce_scatter_tensor", TORCH_DTYPE[reduce_dtype]), ("all_reduce", "float32")}
    gathers = [op["bytes"] for op in iteration if op["kind"] == "all_gather_into_tensor"]
    scatters = [op["bytes"] for op in iteration if op["kind"] == "reduce_scatter_tensor"]
    blocks = model["blocks"]
    # Forward: every unit once; backward: the blocks again (the root stays gathered). One reduce-scatter per unit.
    assert (len(gathers), len(scatters)) == (2 * blocks + 1, blocks + 1)
    assert sum(gathers) == model["all_gather_forward_bytes"] + model["all_gather_backward_bytes"]
    assert sum(scatters) == model["reduce_scatter_bytes"]
    assert [op["bytes"] for op in iteration if op["kind"] == "all_reduce"] == [model["all_reduce_bytes"]]


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("reduce_dtype", REDUCE_DTYPES)
@pytest.mark.parametrize("impl", IMPLS)
def test_under_a_plan_every_op_is_enforced_and_the_losses_equal_gloo_within_the_bound(
        jobs, tmp_path, impl, reduce_dtype):
    reference, _ = jobs("gloo", "", reduce_dtype)
    _, traced = jobs("p2enforcer", impl, reduce_dtype)
    plan = tmp_path / "plan.json"
    made = subprocess.run([sys.executable, "-m", "optimizer_service.cli", "rule-plan", str(traced / "trace.rank0.json"),
                           str(plan), "--segments", "2", "--channels", "2"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    planned_dtypes = {op["dtype"] for op in json.loads(plan.read_text())["ops"]}
    assert planned_dtypes == {"bfloat16", "float32"}

    result, folder = jobs("p2enforcer", impl, reduce_dtype, plan)
    trace = rank0_trace(folder)
    assert trace["bypassed"] == {}
    assert all(op["enforced"] for op in trace["ops"])
    assert {(op["kind"], op["dtype"]) for op in trace["ops"]} >= {
        ("all_gather_into_tensor", "bfloat16"), ("reduce_scatter_tensor", TORCH_DTYPE[reduce_dtype])}
    assert differences(reference, result, PLANNED_TOLERANCE[reduce_dtype]) == [], "(step, gloo, planned)"
