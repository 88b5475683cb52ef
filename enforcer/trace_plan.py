"""A plan for a recorded job, made by rule from its trace (pure; no search).

The optimizer's search (Syndicate, :mod:`optimizer_service` issue 5) chooses
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
order. Ops of other kinds, or whose dtype size does not divide their bytes,
stay unplanned (they pass through).

    python -m enforcer.trace_plan TRACE.json PLAN.json [--segments 2] [--channels 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from optimizer_service.plan_file import PLAN_KIND, OpKey, OpPlan, Plan, PlanError
from optimizer_service import motifs
from optimizer_service.motifs import Kind

ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
                 "int8": 1, "uint8": 1, "bool": 1}


def last_iteration(trace: dict) -> list[dict]:
    """The ops of the last iteration that is followed by another one (so it is complete)."""
    indices = sorted({op["iteration"] for op in trace["ops"] if op["iteration"] >= 0})
    if len(indices) < 2:
        raise PlanError("the trace holds fewer than two iterations; run more steps (and call enforcer.step())")
    chosen = indices[-2]
    return [op for op in trace["ops"] if op["iteration"] == chosen]


def decomposition(kind: str, p: int, elements: int, segments: int, root: int = 0) -> motifs.Plan:
    """The fixed-rule motifs of one op (group positions ``0..p-1``)."""
    ranks = range(p)
    piece = max(1, -(-elements // segments))
    if kind == "all_reduce":
        return motifs.rewrite(motifs.segment(motifs.comm_op(Kind.ALL_REDUCE, ranks, elements), piece),
                              motifs.spline_ring)
    if kind in ("all_gather", "reduce_scatter"):
        motif_kind = Kind.ALL_GATHER if kind == "all_gather" else Kind.REDUCE_SCATTER
        return motifs.segment(motifs.comm_op(motif_kind, ranks, elements * p), piece)
    if kind == "broadcast":
        order = (root, *[r for r in ranks if r != root])
        return motifs.spline_broadcast(motifs.Motif(Kind.BROADCAST, order, ((0, elements),)))
    whole = motifs.comm_op(Kind.ALL_TO_ALL, ranks, elements // p)
    return motifs.spline_all_to_all(whole, max(1, p // 2))


def plan_from_trace(trace: dict, segments: int = 2, channels: int = 1, version: int = 1) -> Plan:
    if segments < 1 or channels < 1:
        raise PlanError("segments and channels must be at least 1")
    ops = []
    base = 0
    for op in last_iteration(trace):
        kind = PLAN_KIND.get(op["kind"])
        size = ELEMENT_BYTES.get(op["dtype"])
        group = tuple(op["group"])
        if kind is None or size is None or op["bytes"] % size:
            continue
        buffer = op["bytes"] // size
        p = len(group)
        elements = buffer // p if kind in ("all_gather", "reduce_scatter") else buffer
        if kind == "all_to_all" and buffer % p:
            continue
        root = op.get("root", 0) if kind == "broadcast" else 0
        plan = motifs.on_channel(decomposition(kind, p, elements, segments, root), len(ops) % channels)
        entry = OpPlan.of(OpKey(op["group_seq"], kind, op["bytes"], group, root), plan, base=base)
        base = max(entry.order, default=base - 1) + 1
        ops.append(entry)
    return Plan(version=version, world_size=trace["world_size"], channels={c: None for c in range(channels)},
                ops=tuple(ops))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m enforcer.trace_plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("plan", type=Path)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--channels", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        trace = json.loads(args.trace.read_text())
        plan = plan_from_trace(trace, args.segments, args.channels)
    except (OSError, ValueError, KeyError) as error:
        print(f"trace_plan: {args.trace}: {error}", file=sys.stderr)
        return 2
    args.plan.write_text(plan.to_json())
    print(f"{len(plan.ops)} ops planned -> {args.plan}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
