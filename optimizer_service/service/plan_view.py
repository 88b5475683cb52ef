"""A plan as operators read it: per comm-op its motifs and their predicted cost,
and what changed against another plan (the dashboard's plan page and its API).

Costs are the project's motif cost model (:mod:`optimizer_service.syndicate.motif_cost`,
Syndicate §4.2's physical plan priced by the P² simulator) on the job's
topology: a motif alone on its channel, and an op alone — the critical path
through its motifs' dependencies (``Seq`` stages wait, ``Par`` parts do not,
:meth:`OpPlan.dependencies`). In the running iteration motifs of several ops
share links, so these are lower bounds of what the Gantt shows.
"""

from __future__ import annotations

import dataclasses

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan import Plan
from optimizer_service.plan.op_plan import OpPlan

MAX_MOTIFS = 5_000          # motifs a view lists (a plan may hold far more; the rest are counted)


def _cost_model(topology_yaml: str):
    """The motif cost model on the job's topology (written back by
    :func:`~optimizer_service.service.planning.resolve_topology`, so it reads
    within the YAML loader's bounds); None when it does not: the plan is shown unpriced."""
    from optimizer_service.hardware.topology import Topology
    from optimizer_service.syndicate.motif_cost import MotifCostModel

    try:
        return MotifCostModel(Topology.from_yaml(topology_yaml, source="the job's topology"))
    except InvalidInputError:
        return None


def _segment(motif) -> str:
    return " ".join(f"[{a}:{b}]" for a, b in motif.ranges)


def op_view(op: OpPlan, model, listed: int) -> tuple[dict, int]:
    """One op's rows (at most ``MAX_MOTIFS - listed`` motifs) and how many it listed."""
    group = op.key.group
    seconds: list[float | None] = []
    rows = []
    for index, (motif, order) in enumerate(zip(op.motifs, op.order)):
        cost = None
        if model is not None:
            try:
                cost = model.seconds(dataclasses.replace(motif, ranks=tuple(group[r] for r in motif.ranks)))
            except InvalidInputError:
                cost = None         # a plan for another topology: no price, still listed
        seconds.append(cost)
        if listed + len(rows) < MAX_MOTIFS:
            rows.append({"index": index, "kind": str(motif.kind), "ranks": [group[r] for r in motif.ranks],
                         "segment": _segment(motif), "channel": motif.channel, "order": order,
                         "predicted_seconds": cost, "text": str(motif)})
    predicted = None
    if seconds and all(s is not None for s in seconds):
        finish: list[float] = []
        for index, deps in enumerate(op.dependencies()):
            finish.append(seconds[index] + max((finish[d] for d in deps), default=0.0))
        predicted = max(finish)
    view = {"seq": op.key.seq, "kind": op.key.kind, "bytes": op.key.nbytes, "group": list(group),
            "root": op.key.root, "key": str(op.key), "motif_count": len(op.motifs), "motifs": rows,
            "predicted_seconds": predicted, "channels": sorted({m.channel for m in op.motifs})}
    return view, len(rows)


def plan_view(plan: Plan, topology_yaml: str = "") -> dict:
    """The plan's ops with their motifs and predicted costs (none without a topology)."""
    model = _cost_model(topology_yaml) if topology_yaml else None
    ops, listed = [], 0
    for op in plan.ops:
        view, count = op_view(op, model, listed)
        listed += count
        ops.append(view)
    total = sum(len(op.motifs) for op in plan.ops)
    return {"version": plan.version, "world_size": plan.world_size,
            "channels": {str(c): plan.channels[c] for c in plan.channel_ids()}, "topology": plan.topology,
            "predicted_iteration_seconds": plan.predicted_iteration_seconds,
            "bound_iteration_seconds": plan.bound_iteration_seconds, "op_count": len(plan.ops),
            "motif_count": total, "motifs_listed": listed, "ops": ops, "priced": model is not None}


def _entry(op: OpPlan) -> tuple:
    return (op.key.kind, op.key.nbytes, op.key.root, str(op.plan), op.order)


def plan_diff(old: Plan | None, new: Plan) -> dict:
    """What ``new`` changes against ``old`` (None: passthrough, no ops), per op
    (keyed by group and sequence number): added, removed, changed, same."""
    before = {(op.key.group, op.key.seq): op for op in (old.ops if old is not None else ())}
    after = {(op.key.group, op.key.seq): op for op in new.ops}
    rows = []
    for key in sorted(set(before) | set(after), key=lambda k: (k[1], k[0])):
        a, b = before.get(key), after.get(key)
        if a is None:
            status = "added"
        elif b is None:
            status = "removed"
        else:
            status = "same" if _entry(a) == _entry(b) else "changed"
        rows.append({"status": status, "seq": key[1], "group": list(key[0]), "kind": (b or a).key.kind,
                     "before": None if a is None else str(a.plan), "after": None if b is None else str(b.plan),
                     "before_channels": None if a is None else sorted({m.channel for m in a.motifs}),
                     "after_channels": None if b is None else sorted({m.channel for m in b.motifs})})
    counts = {status: sum(1 for r in rows if r["status"] == status) for status in ("added", "removed", "changed",
                                                                                    "same")}
    channels_changed = (old.channels if old is not None else {0: None}) != new.channels
    return {"from_version": old.version if old is not None else 0, "to_version": new.version, "counts": counts,
            "channels_changed": channels_changed, "ops": rows}
