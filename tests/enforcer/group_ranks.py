"""Ranks of the tests of plans on several groups and of sequence numbers (imported by spawned ranks)."""

from __future__ import annotations

import torch
import torch.distributed as dist

import enforcer
from enforcer.runtime import plan_groups
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op, rewrite
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.transforms import segment, spline_ring
from tests.enforcer.plan_ranks import values

ELEMENTS = 1001


def all_reduce_plan(group: tuple[int, ...], seq: int = 0) -> OpPlan:
    """A segmented ring all-reduce of ELEMENTS float32 on ``group``, as its ``seq``-th collective."""
    motifs = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(len(group)), ELEMENTS), 300), spline_ring)
    return OpPlan.of(OpKey(seq, "all_reduce", ELEMENTS * 4, group), motifs)


def counted_collectives(iterations: int = 3) -> dict:
    """A plan for the world's all-reduce as its collective number 2: before it the program
    runs a barrier (not a collective: no number), a reduce and a list all_gather (collectives
    no plan carries: numbers 0 and 1). The all-reduce runs under the plan every iteration."""
    world, rank = dist.get_world_size(), dist.get_rank()
    enforcer.install_plan(Plan(1, world, {0: None}, (all_reduce_plan(tuple(range(world)), seq=2),)).to_json())
    plain = dist.new_group(backend="gloo")
    mismatches = []
    for iteration in range(iterations):
        results = []
        for group in (None, plain):
            dist.barrier(group=group)
            reduced = values(rank, 17, iteration)
            dist.reduce(reduced, dst=0, group=group)
            gathered = [torch.empty(5) for _ in range(world)]
            dist.all_gather(gathered, values(rank, 5, iteration + 1), group=group)
            summed = values(rank, ELEMENTS, iteration + 2)
            dist.all_reduce(summed, group=group)
            results.append([reduced, *gathered, summed])
        mismatches += [(iteration, k) for k, (got, want) in enumerate(zip(*results)) if not torch.equal(got, want)]
        enforcer.step()
    enforced = [(op["kind"], op["iteration"]) for op in enforcer.trace()["ops"] if op["enforced"]]
    return {"mismatches": mismatches, "enforced": enforced}


def subgroup_plans(iterations: int = 3) -> dict:
    """4 ranks: a service-style plan on the world and on ``new_group`` subgroups ([0,1]/[2,3]
    and [0,2]/[1,3]) built and installed together (:mod:`enforcer.runtime.plan_groups`), ops compared
    with plain gloo; then a plan for the world only sends the subgroups back to passthrough."""
    rank = dist.get_rank()
    replicas, peers = [dist.new_group(r) for r in ([0, 1], [2, 3])], [dist.new_group(r) for r in ([0, 2], [1, 3])]
    plain_replicas = [dist.new_group(r, backend="gloo") for r in ([0, 1], [2, 3])]
    plain_peers = [dist.new_group(r, backend="gloo") for r in ([0, 2], [1, 3])]
    replica, peer = replicas[rank // 2], peers[rank % 2]
    pairs = [(replica, plain_replicas[rank // 2]), (peer, plain_peers[rank % 2]),
             (dist.group.WORLD, dist.new_group(backend="gloo"))]
    world = enforcer.group_of()
    groups = [(0, 1), (2, 3), (0, 2), (1, 3), (0, 1, 2, 3)]
    plan = Plan(7, 4, {0: None, 1: None}, tuple(all_reduce_plan(g) for g in groups))
    runtimes = plan_groups.build(world, plan, dist.PrefixStore("p2svc/v7/", world.store))
    built = sorted(tuple(group.ranks) for group in runtimes.runtimes)
    runtimes.install()
    mismatches = []
    for iteration in range(iterations):
        for index, (group, plain) in enumerate(pairs):
            got, want = values(rank, ELEMENTS, 10 * iteration + index), values(rank, ELEMENTS, 10 * iteration + index)
            dist.all_reduce(got, group=group)
            dist.all_reduce(want, group=plain)
            if not torch.equal(got, want):
                mismatches.append((iteration, index))
        enforcer.step()
    enforced = sorted({tuple(op["group"]) for op in enforcer.trace()["ops"] if op["enforced"]})
    world_only = Plan(8, 4, {0: None}, (all_reduce_plan(groups[-1]),))
    plan_groups.build(world, world_only, dist.PrefixStore("p2svc/v8/", world.store)).install()
    return {"built": built, "mismatches": mismatches, "enforced": enforced,
            "after": [enforcer.group_of(group).runtime is None for group in (replica, peer)] + [enforcer.plan_version()]}
