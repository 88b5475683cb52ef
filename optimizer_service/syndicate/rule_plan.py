"""A plan for a recorded job, made by rule from its trace (pure; no search).

The optimizer's search (Syndicate, :mod:`optimizer_service.syndicate.mcmc`) chooses
each op's decomposition and the global order. This module is the simple,
fixed-rule planner the enforcer is tested and demonstrated with: for the last
complete iteration of a rank's trace it gives every plannable op

* all_reduce — ``segments`` segments, each ring-splined (ReduceScatter →
  AllGather), App. A.1;
* all_gather_into_tensor / reduce_scatter_tensor — ``segments`` segments;
* broadcast — the receivers split in two halves (Figure 9);
* all_to_all_single — splined into windows of ``max(1, N // 2)`` destinations
  (§4.2.1);

op ``k`` on channel ``k mod channels``, and dispatch numbers in submission
order; every op in its own elements, keyed with its dtype (the motifs count
elements of its size, as the search's do: issue 32). Ops of other kinds, of a
dtype no plan names (:func:`~optimizer_service.plan.trace.passthrough_reason`),
or whose buffer is not whole elements (all-to-all: equal blocks of them) stay
unplanned (they pass through).

    p2 rule-plan TRACE.json PLAN.json [--segments 2] [--channels 1]
"""

from __future__ import annotations

from optimizer_service.errors import PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES, DTYPE_BYTES
from optimizer_service.plan.motif import Composition, Motif, comm_op, on_channel, rewrite
from optimizer_service.plan.op_plan import PLAN_KIND, OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.trace import last_iteration, passthrough_reason
from optimizer_service.syndicate.transforms import segment, spline_all_to_all, spline_broadcast, spline_ring


def decomposition(kind: str, p: int, elements: int, segments: int, root: int = 0,
                  element_bytes: int = DEFAULT_ELEMENT_BYTES) -> Composition:
    """The fixed-rule motifs of one op (group positions ``0..p-1``) on
    ``elements`` of ``element_bytes`` bytes."""
    ranks = range(p)
    piece = max(1, -(-elements // segments))
    if kind == "all_reduce":
        return rewrite(segment(comm_op(Collective.ALL_REDUCE, ranks, elements, element_bytes), piece), spline_ring)
    if kind in ("all_gather", "reduce_scatter"):
        motif_kind = Collective.ALL_GATHER if kind == "all_gather" else Collective.REDUCE_SCATTER
        return segment(comm_op(motif_kind, ranks, elements * p, element_bytes), piece)
    if kind == "broadcast":
        order = (root, *[r for r in ranks if r != root])
        return spline_broadcast(Motif(Collective.BROADCAST, order, ((0, elements),), element_bytes=element_bytes))
    whole = comm_op(Collective.ALL_TO_ALL, ranks, elements // p, element_bytes)
    return spline_all_to_all(whole, max(1, p // 2))


def plan_from_trace(trace: dict, segments: int = 2, channels: int = 1, version: int = 1) -> Plan:
    if segments < 1 or channels < 1:
        raise PlanError("segments and channels must be at least 1")
    ops = []
    base = 0
    for op in last_iteration(trace):
        dtype, group = op["dtype"], tuple(op["group"])
        if passthrough_reason(op["kind"], dtype):
            continue
        kind, size = PLAN_KIND[op["kind"]], DTYPE_BYTES[dtype]
        buffer = op["bytes"] // size
        p = len(group)
        elements = buffer // p if kind in ("all_gather", "reduce_scatter") else buffer
        if op["bytes"] % size or (kind == "all_to_all" and buffer % p):
            continue
        root = op.get("root", 0) if kind == "broadcast" else 0
        plan = on_channel(decomposition(kind, p, elements, segments, root, size), len(ops) % channels)
        entry = OpPlan.of(OpKey(op["group_seq"], kind, op["bytes"], group, root, dtype), plan, base=base)
        base = max(entry.order, default=base - 1) + 1
        ops.append(entry)
    return Plan(version=version, world_size=trace["world_size"], channels={c: None for c in range(channels)},
                ops=tuple(ops))
