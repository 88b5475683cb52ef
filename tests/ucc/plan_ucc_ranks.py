"""Ranks of the plan-channel tests: a plan whose motifs alternate between channel 0 (gloo) and
channel 1 (UCC, ``P2_CHANNEL_BACKENDS=gloo,ucc``) on int64 data, against plain gloo (imported by
spawned ranks).

The ops and their decompositions are those of :mod:`tests.enforcer.plan_ranks` (ring all-reduce,
splined all-to-all, segmented all-gather and reduce-scatter, splined broadcast, tree all-reduce)
with every tensor int64; within each op consecutive motifs go to alternating channels, so every
motif kind runs on UCC and data crosses between the channels inside one op.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import count

import torch
import torch.distributed as dist

import enforcer
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.lowered import LoweredProgram
from optimizer_service.plan.motif import Motif, comm_op, rewrite
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.program_motifs import program_motifs
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)
from tests.enforcer.plan_ranks import N_A2A, N_AG, N_AR, N_BC, N_RS, N_SMALL, values

ITEM = 8        # int64


def _alternating(plan, first: int):
    turn = count(first)
    return rewrite(plan, lambda m: replace(m, channel=next(turn) % 2))


def build_plan(world: int, first_channel: int) -> str:
    p, group = world, tuple(range(world))
    entries = [
        ("all_reduce", N_AR, 0, rewrite(segment(comm_op(Collective.ALL_REDUCE, range(p), N_AR), 1500), spline_ring)),
        ("all_to_all", N_A2A * p, 0, spline_all_to_all(comm_op(Collective.ALL_TO_ALL, range(p), N_A2A), 2)),
        ("all_gather", N_AG * p, 0, segment(comm_op(Collective.ALL_GATHER, range(p), N_AG * p), 10)),
        ("reduce_scatter", N_RS * p, 0, segment(comm_op(Collective.REDUCE_SCATTER, range(p), N_RS * p), 4)),
        ("broadcast", N_BC, 1,
         spline_broadcast(Motif(Collective.BROADCAST, (1, *[r for r in range(p) if r != 1]), ((0, N_BC),)))),
        ("all_reduce", N_SMALL, 0, spline_tree(comm_op(Collective.ALL_REDUCE, range(p), N_SMALL), 2)),
    ]
    ops, base = [], 0
    for seq, (kind, elements, root, composition) in enumerate(entries):
        op = OpPlan.of(OpKey(seq, kind, elements * ITEM, group, root), _alternating(composition, first_channel + seq),
                       base=base)
        base = max(op.order) + 1
        ops.append(op)
    return Plan(version=1, world_size=world, channels={0: None, 1: None}, ops=tuple(ops)).to_json()


def run_ops(group) -> list[torch.Tensor]:
    rank, p = dist.get_rank(), dist.get_world_size()
    i64 = torch.int64
    a = values(rank, N_AR, 1, i64)
    a2a = torch.empty(N_A2A * p, dtype=i64)
    ag = torch.empty(N_AG * p, dtype=i64)
    rs = torch.empty(N_RS, dtype=i64)
    bc = values(rank, N_BC, 5, i64)
    small = values(rank, N_SMALL, 6, i64)
    works = [dist.all_reduce(a, group=group, async_op=True),
             dist.all_to_all_single(a2a, values(rank, N_A2A * p, 2, i64), group=group, async_op=True),
             dist.all_gather_into_tensor(ag, values(rank, N_AG, 3, i64), group=group, async_op=True),
             dist.reduce_scatter_tensor(rs, values(rank, N_RS * p, 4, i64), group=group, async_op=True),
             dist.broadcast(bc, src=1, group=group, async_op=True),
             dist.all_reduce(small, group=group, async_op=True)]
    for work in works:
        work.wait()
    return [a, a2a, ag, rs, bc, small]


def channel_backends() -> dict[int, list[str]]:
    runtime = enforcer.group_of().runtime
    return {c: sorted({peers.backend.name() for peers in runtime.channels[c].peers.values()})
            for c in runtime.channels}


def ucc_collectives() -> int:
    runtime = enforcer.group_of().runtime
    return sum(peers.backend.collectives for c in runtime.channels
               for peers in runtime.channels[c].peers.values() if peers.backend.name() == "ucc")


def under_plan(first_channel: int, iterations: int = 3) -> dict:
    """The six int64 ops under the alternating plan and on plain gloo; what differs, and what ran where."""
    plain = dist.new_group(backend="gloo")
    enforcer.install_plan(build_plan(dist.get_world_size(), first_channel))
    backends = channel_backends()
    mismatches = []
    for iteration in range(iterations):
        got, want = run_ops(None), run_ops(plain)
        mismatches += [f"iteration {iteration} op {i}" for i, (g, w) in enumerate(zip(got, want))
                       if not torch.equal(g, w)]
        enforcer.step()
    collectives = ucc_collectives()
    enforcer.remove_plan()
    enforced = sum(1 for op in enforcer.trace()["ops"] if op["enforced"])
    return {"mismatches": mismatches, "backends": backends, "ucc_collectives": collectives, "enforced": enforced}


def program_under_plan(program_text: str, elements: int) -> dict:
    """A P² program (ReduceScatter/AllGather over ranges, Reduce, Broadcast) as an int64 all_reduce plan,
    every motif on channel 1, against plain gloo."""
    world, rank = dist.get_world_size(), dist.get_rank()
    motifs = rewrite(program_motifs(LoweredProgram.parse(program_text), world, elements),
                     lambda m: replace(m, channel=1))
    op = OpPlan.of(OpKey(0, "all_reduce", elements * ITEM, tuple(range(world))), motifs)
    enforcer.install_plan(Plan(version=1, world_size=world, channels={0: None, 1: None}, ops=(op,)).to_json())
    backends = channel_backends()
    plain = dist.new_group(backend="gloo")
    got, want = values(rank, elements, 9, torch.int64), values(rank, elements, 9, torch.int64)
    dist.all_reduce(got)
    dist.all_reduce(want, group=plain)
    collectives = ucc_collectives()
    return {"equal": torch.equal(got, want), "backends": backends, "ucc_collectives": collectives,
            "enforced": any(op["enforced"] for op in enforcer.trace()["ops"])}
