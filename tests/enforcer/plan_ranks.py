"""Ranks of the plan-runtime tests: the same ops under a plan and on plain gloo (imported by spawned ranks)."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist

import enforcer
from optimizer_service.errors import PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif, comm_op, rewrite
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)

ALL_REDUCE, ALL_TO_ALL, ALL_GATHER, REDUCE_SCATTER, BROADCAST, SMALL = range(6)
N_AR, N_A2A, N_AG, N_RS, N_BC, N_SMALL = 4099, 5 * 4, 37, 9, 1001, 3


def values(rank: int, numel: int, salt: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(31 * rank + salt * 1009 + numel)
    return torch.randint(-50, 50, (numel,), generator=gen).to(dtype)


def build_plan(world: int, reverse: bool, channels: int, bad_world: bool = False) -> str:
    """Every planned op kind with a non-trivial decomposition, motifs spread over the channels."""
    p, group = world, tuple(range(world))
    ring = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(p), N_AR), 1500), spline_ring)
    entries = [
        (ALL_REDUCE, "all_reduce", N_AR * 4, 0, ring),
        (ALL_TO_ALL, "all_to_all", N_A2A * p * 4, 0,
         spline_all_to_all(segment(comm_op(Collective.ALL_TO_ALL, range(p), N_A2A // 1), 7)
                                  if False else comm_op(Collective.ALL_TO_ALL, range(p), N_A2A), 2)),
        (ALL_GATHER, "all_gather", N_AG * p * 8, 0, segment(comm_op(Collective.ALL_GATHER, range(p), N_AG * p), 10)),
        (REDUCE_SCATTER, "reduce_scatter", N_RS * p * 4, 0,
         segment(comm_op(Collective.REDUCE_SCATTER, range(p), N_RS * p), 4)),
        (BROADCAST, "broadcast", N_BC * 4, 1,
         spline_broadcast(Motif(Collective.BROADCAST, (1, *[r for r in range(p) if r != 1]), ((0, N_BC),)))),
        (SMALL, "all_reduce", N_SMALL * 8, 0, spline_tree(comm_op(Collective.ALL_REDUCE, range(p), N_SMALL), 2)),
    ]
    ops = []
    base = 0
    for seq, kind, nbytes, root, plan in (reversed(entries) if reverse else entries):
        on = rewrite(plan, lambda m, s=seq: replace(m, channel=(s % channels)))
        op = OpPlan.of(OpKey(seq, kind, nbytes, group, root), on, base=base)
        base = max(op.order) + 1
        ops.append(op)
    plan = Plan(version=2, world_size=world + (1 if bad_world else 0),
                channels={c: None for c in range(channels)}, ops=tuple(ops))
    return plan.to_json()


def run_ops(group, async_all: bool) -> list[torch.Tensor]:
    """The six ops of :func:`build_plan` on ``group``, in seq order."""
    rank, p = dist.get_rank(), dist.get_world_size()
    a = values(rank, N_AR, 1)
    a2a_out = torch.empty(N_A2A * p)
    ag_out = torch.empty(N_AG * p, dtype=torch.float64)
    rs_out = torch.empty(N_RS)
    bc = values(rank, N_BC, 5)
    small = values(rank, N_SMALL, 6, torch.float64)
    works = [dist.all_reduce(a, group=group, async_op=True)]
    if not async_all:
        works.pop().wait()      # the program waits before it submits the rest
    works.append(dist.all_to_all_single(a2a_out, values(rank, N_A2A * p, 2), group=group, async_op=True))
    works.append(dist.all_gather_into_tensor(ag_out, values(rank, N_AG, 3, torch.float64), group=group,
                                             async_op=True))
    works.append(dist.reduce_scatter_tensor(rs_out, values(rank, N_RS * p, 4), group=group, async_op=True))
    works.append(dist.broadcast(bc, src=1, group=group, async_op=True))
    works.append(dist.all_reduce(small, group=group, async_op=True))
    for work in works:
        work.wait()
    return [a, a2a_out, ag_out, rs_out, bc, small]


def under_plan(reverse: bool, channels: int, async_all: bool, iterations: int = 3) -> dict:
    plain = dist.new_group(backend="gloo")
    enforcer.install_plan(build_plan(dist.get_world_size(), reverse, channels))
    mismatches = []
    for _ in range(iterations):
        got = run_ops(None, async_all)
        want = run_ops(plain, True)
        mismatches += [i for i, (g, w) in enumerate(zip(got, want)) if not torch.equal(g, w)]
        enforcer.step()
    enforcer.remove_plan()                  # back to passthrough: nothing more is enforced
    got, want = run_ops(None, async_all), run_ops(plain, True)
    mismatches += [10 + i for i, (g, w) in enumerate(zip(got, want)) if not torch.equal(g, w)]
    trace = enforcer.trace()
    enforced = sum(1 for op in trace["ops"] if op["enforced"])
    return {"mismatches": mismatches, "enforced": enforced, "waits": len(trace["waits"]),
            "impl": enforcer.implementation(), "motifs": len(trace["motifs"]),
            "channel_orders": channel_orders(trace["motifs"])}


def channel_orders(motifs: list[dict]) -> list[list[int]]:
    """Per (iteration, channel), the plan order numbers of its motifs in the order they started."""
    runs: dict[tuple[int, int], list[dict]] = {}
    for motif in motifs:
        runs.setdefault((motif["iteration"], motif["channel"]), []).append(motif)
    return [[m["order"] for m in sorted(run, key=lambda m: m["start"])] for _, run in sorted(runs.items())]


def mismatched_plan() -> dict:
    error = None
    try:
        enforcer.install_plan(build_plan(dist.get_world_size(), False, 2, bad_world=True))
    except PlanError as caught:
        error = str(caught)
    got = run_ops(None, True)
    plain = dist.new_group(backend="gloo")
    want = run_ops(plain, True)
    return {"error": error, "equal": all(torch.equal(g, w) for g, w in zip(got, want)),
            "enforced": sum(1 for op in enforcer.trace()["ops"] if op["enforced"])}


def plan_from_environment() -> dict:
    """P2_PLAN_FILE was installed when the world was made (or refused)."""
    plain = dist.new_group(backend="gloo")
    got = run_ops(None, True)
    want = run_ops(plain, True)
    return {"equal": all(torch.equal(g, w) for g, w in zip(got, want)),
            "enforced": sum(1 for op in enforcer.trace()["ops"] if op["enforced"])}


def program_under_plan(program_text: str, elements: int) -> bool:
    """A P² program as an all_reduce plan equals plain gloo's all_reduce."""
    from optimizer_service.plan.lowered import LoweredProgram
    from optimizer_service.syndicate.program_motifs import program_motifs

    world, rank = dist.get_world_size(), dist.get_rank()
    op = OpPlan.of(OpKey(0, "all_reduce", elements * 4, tuple(range(world))),
                   program_motifs(LoweredProgram.parse(program_text), world, elements))
    enforcer.install_plan(Plan(version=1, world_size=world, channels={0: None}, ops=(op,)).to_json())
    plain = dist.new_group(backend="gloo")
    got, want = values(rank, elements, 9), values(rank, elements, 9)
    dist.all_reduce(got)
    dist.all_reduce(want, group=plain)
    return torch.equal(got, want) and any(op["enforced"] for op in enforcer.trace()["ops"])
