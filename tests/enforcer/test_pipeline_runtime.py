"""The pipeline-parallel runtime (Zhuang et al. §4): :mod:`enforcer.pipeline.runtime`.

Pure tests: the checks that run before anything is built (bad schedules,
deadlocks, meshes and programs that do not fit), the stage compute (``B``
against ``I`` + ``W`` against one autograd pass) and the records' text form.
Multiproc tests run GPipe, 1F1B, eager-1F1B and eager-1F1B with backward
weight delaying on real gloo ranks, with the stage-boundary resharding planned
by the resharding planner: the losses and every weight gradient equal a
single process's on the whole model and batch (float64), and all schedules
give bit-identical gradients (the same accumulation order).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from deploy.emulated.model import cluster_topology
from enforcer.pipeline.check import check_pipeline
from enforcer.pipeline.records import ActionTime, IterationRecord, TransferTime
from enforcer.pipeline.stage import StageCompute
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.pipeline import Action, PipelineSchedule
from optimizer_service.plan.pipeline_validate import ScheduleError, check_schedule
from optimizer_service.plan.resharding import ReshardProgram
from optimizer_service.resharding.mesh import Mesh
from optimizer_service.resharding.pipeline_schedules import build_schedule
from optimizer_service.resharding.planner import plan_resharding
from tests.enforcer import pipeline_ranks
from tests.enforcer.pipeline_ranks import HIDDEN, reference
from tests.support.multiproc import run_world

SCHEDULES = ("gpipe", "1f1b", "eager-1f1b", "eager-1f1b-wd")


def programs(meshes: list[list[int]], rows: int, per_node: int = 2) -> tuple[list[str], list[str]]:
    """Forward and backward resharding programs of an ``S^0R`` (rows, HIDDEN) activation at every boundary."""
    nodes = -(-(max(r for mesh in meshes for r in mesh) + 1) // per_node)
    name = f"emulated-{nodes}x{per_node}"
    topology = Topology.from_yaml(cluster_topology(name, nodes, per_node, 25e6, None, 1e9), source=name)
    forward, backward = [], []
    for a, b in itertools.pairwise(meshes):
        for out, src, dst in ((forward, a, b), (backward, b, a)):
            plan = plan_resharding((rows, HIDDEN), "S^0R", Mesh.grid(src), "S^0R", Mesh.grid(dst), topology,
                                   element_bytes=8)
            out.append(str(plan.program))
    return forward, backward


def schedule_texts(stages: int, microbatches: int, names=SCHEDULES) -> list[str]:
    return [str(build_schedule(name, stages, microbatches, delays=1 if name == "eager-1f1b-wd" else None))
            for name in names]


# ---- pure: checks ----------------------------------------------------------------------------------------------

def two_stage_programs() -> tuple[list[ReshardProgram], list[ReshardProgram]]:
    forward, backward = programs([[0, 1], [2, 3]], 4)
    return [ReshardProgram.parse(t) for t in forward], [ReshardProgram.parse(t) for t in backward]


def parse_schedule(*lines: str, microbatches: int = 2) -> PipelineSchedule:
    return PipelineSchedule.parse(f"custom stages={len(lines)} microbatches={microbatches}\n"
                                  + "\n".join(f"{s}: {line}" for s, line in enumerate(lines)))


@pytest.mark.parametrize("lines, expected", [
    (("0F0 0F1 0B0 0B1", "1F0 1B0 1F1"), ("stage 1 never runs the backward of micro-batch 1 \\(1B1 or 1I1 \\+ 1W1\\); "
                                         "every stage runs each of the 2 micro-batches forward and backward")),
    (("0F0 0F1 0B0 0B1", "1F0 1B1 1F1 1B0"), "runs 1B1 before 1F1"),
    (("0F0 0F1 0B0 0B1", "1F0 1F0 1B0 1F1 1B1"), "runs 1F0 twice"),
    (("0F0 0F1 0B0 0B1", "1F0 1I0 1W0 1F1 1B1 1I1 1W1"),
     "mixes a whole backward B with I/W for micro-batch 1; use B, or I then W"),
    (("0F0 0F1 0B0 0B1", "1F0 1W0 1I0 1F1 1B1"), "runs 1W0 before 1I0"),
    (("0F0 0F1 0B0 0B1", "1F0 1I0 1F1 1B1"), "never runs 1W0"),
    (("0F0 0B0 0F1 0B1", "1F1 1F0 1B1 1B0"), ("deadlocks at step 1: 0B0 waits for the backward of "
                                              "micro-batch 0 on stage 1, 1F1 waits for 0F1; reorder")),
])
def test_malformed_schedules_are_refused_in_one_line(lines, expected) -> None:
    forward, backward = two_stage_programs()
    with pytest.raises(InvalidInputError, match=expected) as caught:
        check_pipeline(parse_schedule(*lines), [[0, 1], [2, 3]], forward, backward, 4)
    assert "\n" not in str(caught.value)
    # the runtime refuses what the planner's validator refuses, in its words
    with pytest.raises(ScheduleError) as planner:
        check_schedule(parse_schedule(*lines))
    assert str(caught.value) == str(planner.value)


def test_every_planned_schedule_passes_and_reports_its_steps() -> None:
    forward, backward = two_stage_programs()
    for text in schedule_texts(2, 4):
        assert check_pipeline(PipelineSchedule.parse(text), [[0, 1], [2, 3]], forward, backward, 4) >= 8


def test_meshes_and_programs_that_do_not_fit_are_refused() -> None:
    forward, backward = two_stage_programs()
    good = PipelineSchedule.parse(schedule_texts(2, 2, ("1f1b",))[0])
    cases = [
        ({"meshes": [[0, 1], [2, 3], [4]]}, "the schedule has 2 stages but 3 stage meshes"),
        ({"meshes": [[0, 1], [1, 3]]}, "rank 1 is in the meshes of stages 0 and 1"),
        ({"meshes": [[0, 1], []]}, "stage 1's mesh is empty"),
        ({"world": 3}, "names rank 3, outside the world of 3 ranks"),
        ({"forward": []}, "but 0 forward resharding programs"),
        ({"forward": backward, "backward": forward}, "boundary 0's forward program has source ranks \\[2, 3\\]"),
        ({"meshes": [[0, 1], [2, 4]], "world": 5}, "stage 1's mesh is \\[2, 4\\]"),
    ]
    for change, expected in cases:
        args = {"meshes": [[0, 1], [2, 3]], "forward": forward, "backward": backward, "world": 4} | change
        with pytest.raises(InvalidInputError, match=expected):
            check_pipeline(good, args["meshes"], args["forward"], args["backward"], args["world"])
    other = [ReshardProgram.parse(t) for t in programs([[0, 1], [2, 3]], 6)[1]]
    with pytest.raises(InvalidInputError, match="the gradient has its shape"):
        check_pipeline(good, [[0, 1], [2, 3]], forward, other, 4)


# ---- pure: stage compute and records ---------------------------------------------------------------------------

@pytest.mark.parametrize("first, last", [(True, False), (False, False), (False, True), (True, True)])
def test_split_backward_equals_whole_backward_and_autograd(first: bool, last: bool) -> None:
    """``B`` and ``I`` + ``W`` give the same input and weight gradients, bit for
    bit, and both equal one autograd pass through the unsplit module."""
    module = pipeline_ranks.stage_modules(2)[1 if last else 0]
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(5, HIDDEN, generator=gen, dtype=torch.float64)
    out_dim = pipeline_ranks.OUTPUTS if last else HIDDEN
    target = torch.randn(5, out_dim, generator=gen, dtype=torch.float64)
    grad_out = None if last else torch.randn(5, out_dim, generator=gen, dtype=torch.float64)
    loss = pipeline_ranks.loss_function(target.numel())
    results = []
    for split in (False, True):
        module.zero_grad(set_to_none=True)
        stage = StageCompute(module, first=first, last=last, loss_fn=loss)
        stage.forward(0, x, target if last else None)
        if split:
            grad_in = stage.backward_input(0, grad_out)
            assert stage.held_microbatches == 1
            stage.backward_weight(0)
        else:
            grad_in = stage.backward(0, grad_out)
        assert stage.held_microbatches == 0
        results.append((grad_in, [p.grad.clone() for p in module.parameters()]))
    (whole_in, whole), (split_in, split) = results
    assert all(torch.equal(a, b) for a, b in zip(whole, split))
    assert (whole_in is None) == (split_in is None) == first
    if not first:
        assert torch.equal(whole_in, split_in)
    module.zero_grad(set_to_none=True)
    leaf = x.clone().requires_grad_(not first)
    y = module(leaf)
    (loss(y, target) if last else (y * grad_out).sum()).backward()
    assert all(torch.allclose(p.grad, g, rtol=1e-12, atol=1e-14) for p, g in zip(module.parameters(), whole))
    if not first:
        assert torch.allclose(leaf.grad, whole_in, rtol=1e-12, atol=1e-14)


def test_stage_compute_refuses_misuse() -> None:
    module = pipeline_ranks.stage_modules(1)[0]
    with pytest.raises(InvalidInputError, match="needs loss_fn"):
        StageCompute(module, first=True, last=True)
    stage = StageCompute(nn.Sequential(nn.Linear(2, 2)).double(), first=False, last=False)
    with pytest.raises(InvalidInputError, match="before its forward"):
        stage.backward(0, torch.zeros(1, 2, dtype=torch.float64))
    stage.forward(0, torch.zeros(1, 2, dtype=torch.float64))
    with pytest.raises(InvalidInputError, match="I before W"):
        stage.backward_weight(0)


def test_records_round_trip() -> None:
    record = IterationRecord(3, 1, 0.25, (ActionTime(Action.parse("1F0"), 0.0, 1e-05),
                                          ActionTime(Action.parse("1B0"), 0.125, 0.2)),
                             (TransferTime("recv", "F", 0, 1, 0, 0.0, 2.5e-06),
                              TransferTime("send", "B", 1, 0, 0, 0.2, 0.25)), (0.5, 1 / 3))
    assert IterationRecord.parse(str(record)) == record
    assert str(record).splitlines()[1] == "action 1F0 0.0..1e-05"
    assert record.busy_seconds == pytest.approx(0.075 + 1e-05)
    idle = IterationRecord(7, None, 0.0)
    assert IterationRecord.parse(str(idle)) == idle
    with pytest.raises(InvalidInputError, match="START..END"):
        ActionTime.parse("1F0 0.1-0.2")


# ---- multiproc: real ranks -------------------------------------------------------------------------------------

CONFIGS = {
    # name: meshes, rows per micro-batch, micro-batches
    "2x2": ([[0, 1], [2, 3]], 4, 4),
    "4x1": ([[0], [1], [2], [3]], 3, 6),
    "2-1-1": ([[0, 1], [2], [3]], 5, 5),     # uneven: 5 rows over 2 ranks, then 2 ranks to 1
}


def _assert_matches_reference(meshes, rows, count, results) -> None:
    stages = len(meshes)
    loss, grads = reference(stages, count, rows)
    by_schedule: dict[str, list[list[torch.Tensor]]] = {}
    for rank, per_schedule in enumerate(results):
        for name, got in per_schedule.items():
            stage = got["stage"]
            assert stage == next(s for s, mesh in enumerate(meshes) if rank in mesh)
            assert got["held"] == 0, f"{name}: rank {rank} still holds activations"
            assert IterationRecord.parse(got["record"]).stage == stage
            got["grads"] = [torch.tensor(g, dtype=torch.float64) for g in got["grads"]]
            for mine, want in zip(got["grads"], grads[stage]):
                assert torch.allclose(mine, want, rtol=1e-10, atol=1e-13), (name, rank)
            by_schedule.setdefault(name, [None] * len(results))[rank] = got["grads"]
            if stage == stages - 1:
                assert len(got["losses"]) == count
    for name in by_schedule:
        total = sum(sum(results[r][name]["losses"]) for r in meshes[-1])
        assert total == pytest.approx(loss, rel=1e-12)
        for rank in range(len(results)):
            assert all(torch.equal(a, b) for a, b in zip(by_schedule[name][rank], by_schedule["1f1b"][rank])), \
                f"{name} and 1f1b differ on rank {rank}"


@pytest.mark.multiproc
@pytest.mark.slow
def test_every_schedule_matches_a_single_process_on_four_ranks() -> None:
    """One world of 4 gloo ranks runs three mesh layouts × four schedules, after
    two refused constructions and a refused ``run`` (the world keeps working)."""
    jobs = []
    for meshes, rows, count in CONFIGS.values():
        forward, backward = programs(meshes, rows)
        jobs.append((meshes, rows, count, schedule_texts(len(meshes), count), forward, backward))
    forward, backward = programs([[0, 1], [2, 3]], 4)
    refusal = ([[0, 1], [2, 3]], schedule_texts(3, 2, ("1f1b",))[0], forward, backward)
    no_loss = ([[0, 1], [2, 3]], schedule_texts(2, 2, ("1f1b",))[0], forward, backward)
    results = run_world(4, pipeline_ranks.four_rank_job, jobs, refusal, no_loss)
    for rank in range(4):
        assert results[rank]["refused"].startswith("the schedule has 3 stages but 2 stage meshes")
        assert results[rank]["no_loss"] == ("the last pipeline stage needs loss_fn(output, target) -> scalar loss"
                                            if rank >= 2 else "rank 2 could not join the pipeline (see its error); "
                                                              "nothing was run")
        assert results[rank]["bad_call"] == (f"stage 0 (rank {rank}) needs 2 micro-batch inputs, got none"
                                             if rank < 2 else "rank 0 could not start the iteration (see its "
                                                              "error); nothing was run")
    for index, (meshes, rows, count, *_) in enumerate(jobs):
        _assert_matches_reference(meshes, rows, count, [r["runs"][index] for r in results])

