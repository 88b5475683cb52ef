"""A plan given as a value, JSON text or a file, installed on a group (``install_plan``, ``P2_PLAN_FILE``)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch.distributed as dist

from enforcer.runtime.protocol import RuntimeHost
from optimizer_service.plan import Plan, PlanError

log = logging.getLogger("enforcer")


def load(plan: Plan | str | Path) -> Plan:
    """``plan`` itself, or the plan parsed from JSON text or from the file it names."""
    if isinstance(plan, Plan):
        return plan
    text = str(plan)
    if not text.lstrip().startswith("{"):
        path = Path(text)
        try:
            text = path.read_text()
        except OSError as error:
            raise PlanError(f"cannot read the plan file {path}: {error.strerror}") from None
    return Plan.parse(text)


def install(group: RuntimeHost, plan: Plan | str | Path) -> None:
    """Enforce ``plan`` on ``group`` from its next op on (collective); PlanError if it does not fit."""
    plan = load(plan)
    plan.check_world(group.size() if group.is_default else dist.get_world_size())
    runtime = group.new_runtime(plan)
    runtime.start()
    group.replace_runtime(runtime)
    log.info("p2enforcer: plan version %d installed on group %s (%d ops, channels %s)", plan.version,
             list(group.ranks), len(runtime.ops), sorted(runtime.channels))
