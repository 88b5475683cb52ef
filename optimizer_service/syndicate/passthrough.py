"""The ops of a traced iteration that a plan leaves to the inner backend, and why (pure).

Issue 16: "ops the enforcer cannot plan pass through and are shown as such".
Under a plan the enforcer runs the ops the plan names; every other op of the
iteration goes to the inner backend as in passthrough. :func:`passed_through`
lists those, for the iteration the search planned
(:func:`optimizer_service.syndicate.trace_dag.iteration_ops`), with the reason
(:func:`optimizer_service.plan.trace.passthrough_reason`):

* not a collective the search decomposes — barriers, point-to-point, gather,
  scatter, coalesced ops (the DAG times them as compute);
* a collective the backend never hands to a plan — ``reduce`` and the list
  forms ``all_gather``, ``reduce_scatter``, ``all_to_all``;
* a dtype no plan names (not one of :data:`~optimizer_service.plan.dtypes.DTYPE_BYTES`);
* otherwise, when the plan has no entry for the op's key (its group, its
  position among the group's collectives, kind, bytes, broadcast root):
  :data:`NOT_IN_PLAN`.

An op the ranks ran on parallel subgroups is listed once per group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optimizer_service.plan.op_plan import PLAN_KIND
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.trace import COMM_KINDS, passthrough_reason
from optimizer_service.syndicate.trace_dag import iteration_ops, parallel_groups

NOT_IN_PLAN = "the plan has no entry for it"


@dataclass(frozen=True)
class PassedThrough:
    """One op of the iteration a plan does not run: ``seq`` is its position in
    the iteration (its DAG node is ``kind#seq``)."""

    seq: int
    kind: str
    dtype: str
    nbytes: int
    group: tuple[int, ...]
    reason: str

    def __str__(self) -> str:
        return describe(self.to_dict())

    def to_dict(self) -> dict:
        return {"seq": self.seq, "kind": self.kind, "dtype": self.dtype, "bytes": self.nbytes,
                "group": list(self.group), "reason": self.reason}


def passed_through(traces: Sequence[Mapping], plan: Plan, iteration: int | None = None) -> list[PassedThrough]:
    """The ops of the traced ``iteration`` (default: the last complete one) that ``plan`` leaves to the inner backend."""
    chosen, per_rank = iteration_ops(traces, iteration)
    collectives: dict[tuple[int, ...], int] = {}         # per group: its collectives so far (a plan key's seq)
    found = []
    for k, op in enumerate(per_rank[0][1]):
        kind, dtype, nbytes = op["kind"], str(op.get("dtype", "float32")), int(op["bytes"])
        reason = passthrough_reason(kind, dtype)
        if kind not in COMM_KINDS:
            found.append(PassedThrough(k, kind, dtype, nbytes, tuple(int(g) for g in op["group"]), reason))
            continue
        root = int(op.get("root", 0)) if kind == "broadcast" else 0
        for group in parallel_groups(per_rank, k, chosen):
            seq = collectives.get(group, 0)
            collectives[group] = seq + 1
            if reason or plan.lookup(group, seq, PLAN_KIND[kind], nbytes, root) is None:
                found.append(PassedThrough(k, kind, dtype, nbytes, group, reason or NOT_IN_PLAN))
    return found


def describe(entry: Mapping) -> str:
    """One passed-through op (a :meth:`PassedThrough.to_dict`) in a line:
    ``reduce#2 on [0,1] (4,096 B float32): reduce is not one the enforcer plans (...)``."""
    what = f"{entry['bytes']:,} B" + (f" {entry['dtype']}" if entry["dtype"] else "")
    return f"{entry['kind']}#{entry['seq']} on [{','.join(map(str, entry['group']))}] ({what}): {entry['reason']}"


def summary(entries: Sequence[Mapping], limit: int = 4) -> str:
    """The passed-through ops for a sentence: the first ``limit`` described, and how many more."""
    if not entries:
        return "no op passes through"
    shown = "; ".join(describe(entry) for entry in entries[:limit])
    more = f"; and {len(entries) - limit} more" if len(entries) > limit else ""
    return f"{len(entries)} op(s) pass through: {shown}{more}"
