"""The part of a plan one group runs: its ops, and whether an op's plan fits a buffer."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from optimizer_service.plan import OpPlan, Plan, PlanError

log = logging.getLogger("enforcer")


def group_ops(plan: Plan, ranks: Sequence[int]) -> list[OpPlan]:
    """``plan``'s ops keyed by the group of global ``ranks`` (in group order), in plan order."""
    mine = tuple(ranks)
    return [op for op in plan.ops if tuple(op.key.group) == mine]


def valid(op: OpPlan, elements: int) -> bool:
    """Whether ``op``'s plan computes it on a buffer of ``elements`` (:meth:`OpPlan.validate`); why not is logged."""
    try:
        op.validate(elements)
    except PlanError as error:
        log.error("p2enforcer: %s; passing the op through", error)
        return False
    return True
