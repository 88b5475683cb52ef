"""A plan from the optimizer service on every process group of the rank it names.

A plan keys ops by their group's global ranks (:mod:`optimizer_service.plan.op_plan`),
and the service plans ``new_group`` subgroups too
(:mod:`optimizer_service.syndicate.trace_dag`, "Subgroups"). Each ``p2enforcer``
group has its own runtime (:class:`~enforcer.runtime.plan_runtime.PlanRuntime`: its own
sequence numbers, dispatcher and channel backends), so a plan becomes one
runtime per group of this rank that it names — the default group's always
(its version is the one the rank runs, even with no ops) — built together
(:func:`build`) while the plan is prepared, and swapped in together at the
switch boundary (:meth:`PlanRuntimes.install`).

**Build order.** Making a channel backend is a rendezvous of its members. Every
rank makes its runtimes' backends in one global order — the default group's
first, then the subgroups by their ranks, each group's by (channel, members) —
skipping those it is not a member of, so no two ranks wait for each other in
opposite orders.

**Which groups.** This rank's live ``p2enforcer`` subgroups whose ranks some
plan op names. Two live groups with the same ranks (or a subgroup with the
world's ranks) cannot be told apart by a plan's keys: their ops pass through
(logged once per plan). Every member of a group has the same groups with its
ranks (``new_group`` is collective), so the members decide alike.
"""

from __future__ import annotations

import logging
from collections import Counter

import torch.distributed as dist
from enforcer import groups

from enforcer.runtime.protocol import Runtime, RuntimeHost
from optimizer_service.plan import Plan

log = logging.getLogger("enforcer")


def subgroups_of(default: RuntimeHost, plan: Plan) -> list[RuntimeHost]:
    """This rank's live subgroups that ``plan`` names and that its keys tell apart, in build order."""
    live = [group for group in groups.live().values() if group is not default]
    copies = Counter(tuple(group.ranks) for group in live)
    named = {tuple(op.key.group) for op in plan.ops}
    chosen = []
    for group in live:
        ranks = tuple(group.ranks)
        if ranks not in named:
            continue
        if copies[ranks] > 1 or ranks == tuple(default.ranks):
            log.warning("p2enforcer: plan v%d names group %s, but this rank has %s; its ops pass through",
                        plan.version, list(ranks),
                        "the world's ranks in it" if ranks == tuple(default.ranks) else "two groups of those ranks")
            continue
        chosen.append(group)
    return sorted(chosen, key=lambda group: tuple(group.ranks))


def store_prefix(group: RuntimeHost) -> str:
    """Where a subgroup's channel backends meet, inside the plan's store prefix (the default group's: "")."""
    return "" if group.is_default else f"g{'-'.join(map(str, group.ranks))}/"


class PlanRuntimes:
    """One plan's runtimes on this rank: the default group's, then each subgroup's."""

    def __init__(self, version: int, runtimes: dict[RuntimeHost, Runtime]) -> None:
        self.version = version
        self.runtimes = runtimes                     # group -> its runtime, in build order

    @property
    def ops(self) -> int:
        return sum(len(runtime.ops) for runtime in self.runtimes.values())

    @property
    def channels(self) -> list[int]:
        return sorted({c for runtime in self.runtimes.values() for c in runtime.channels})

    def install(self) -> None:
        """Start every runtime and run it on its group from the group's next op on; a
        subgroup that ran an earlier service plan this one does not name goes back to passthrough."""
        for group, runtime in self.runtimes.items():
            runtime.start()
            group.replace_runtime(runtime)
        for group in groups.live().values():
            if group not in self.runtimes and getattr(group.runtime, "from_service", False):
                group.replace_runtime(None)

    def close(self) -> None:
        """Free every runtime (not installed, or being discarded)."""
        for runtime in self.runtimes.values():
            runtime.close()


def build(default: RuntimeHost, plan: Plan, store: dist.Store) -> PlanRuntimes:
    """``plan``'s runtimes on the default group and the subgroups it names
    (collective among each channel backend's members; PlanError passes, with
    what was built closed). ``default``: the default ``p2enforcer`` group (either
    implementation; each group makes its own runtime, ``new_runtime``)."""
    runtimes: dict[RuntimeHost, Runtime] = {}
    try:
        for group in [default, *subgroups_of(default, plan)]:
            runtime = group.new_runtime(plan, store_prefix=store_prefix(group), store=store)
            runtime.from_service = True
            runtimes[group] = runtime
    except BaseException:
        PlanRuntimes(plan.version, runtimes).close()
        raise
    return PlanRuntimes(plan.version, runtimes)
