"""The trace schema: what an enforcer records and the optimizer reads (pure).

One definition for both sides: :class:`enforcer.trace.Tracer` writes these
records, :mod:`optimizer_service.syndicate.trace_dag` and
:mod:`optimizer_service.syndicate.rule_plan` read them. A trace document is
JSON with ``format`` :data:`TRACE_FORMAT`, ``version`` :data:`TRACE_VERSION`,
``rank``, ``world_size``, ``started_unix``, ``boundaries`` (``step``,
``detected`` or ``none``), ``iterations`` (``index``, ``ops``, ``start``,
``end``), ``ops`` (the fields of :class:`OpRecord` plus ``gap``),
``dropped_ops``, ``waits`` (the fields of :class:`Wait`), ``motifs`` (the
fields of :class:`MotifRecord`: every planned motif this rank ran), ``op_counts``,
``bypassed``, ``switches`` (``iteration``, ``version``, ``at``: the service
plans this rank switched to), ``host`` (``id``, ``cores``) and ``cpu``
(``iteration``, ``wall``, ``process_cpu``, ``step_thread_cpu``: what each
iteration took of the host's cores; traces written before these carry
neither); the field meanings are in :mod:`enforcer.trace` and
:mod:`enforcer.host_cpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.errors import PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES, PLANNED_DTYPES
from optimizer_service.plan.op_plan import PLAN_KIND

TRACE_FORMAT = "p2enforcer-trace"
TRACE_VERSION = 1


@dataclass(slots=True)
class OpRecord:
    """One comm-op as the enforcer saw it (field meanings: :mod:`enforcer.trace`)."""

    iteration: int
    seq: int
    group_seq: int
    kind: str
    dtype: str
    bytes: int
    group: tuple[int, ...]
    group_name: str
    issued: float
    completed: float | None = None
    enforced: bool = False
    root: int = 0           # broadcast: the source's group rank


@dataclass(frozen=True)
class MotifRecord:
    """One motif of a planned op as a rank ran it: the dispatcher's wait for its
    turn (Syndicate Pseudocode 2) and its run on its channel, in seconds since
    the trace started (``start``) and long (``seconds``)."""

    iteration: int
    op_seq: int         # the op's ``seq`` in its iteration
    order: int          # the motif's plan sequence number
    channel: int
    waited: float
    start: float
    seconds: float


@dataclass(frozen=True)
class Wait:
    """One dispatcher wait for the next motif in plan order (Syndicate Pseudocode 2)."""

    iteration: int
    order: int          # the plan sequence number waited for
    seconds: float


#: The collective of each trace op kind that can be decomposed into motifs.
COMM_KINDS = {"all_reduce": Collective.ALL_REDUCE, "broadcast": Collective.BROADCAST, "reduce": Collective.REDUCE,
              "all_gather": Collective.ALL_GATHER, "all_gather_into_tensor": Collective.ALL_GATHER,
              "reduce_scatter": Collective.REDUCE_SCATTER, "reduce_scatter_tensor": Collective.REDUCE_SCATTER,
              "all_to_all": Collective.ALL_TO_ALL, "all_to_all_single": Collective.ALL_TO_ALL}


def passthrough_reason(kind: str, dtype: str) -> str:
    """Why the enforcer runs a traced op of ``kind`` and ``dtype`` as the inner
    backend does whatever a plan says ("" when a plan can carry it): the search
    decomposes only :data:`COMM_KINDS` (others are timed as compute), the
    backend hands only :data:`~optimizer_service.plan.op_plan.PLAN_KIND` kinds to a plan, and
    a plan's motifs count elements of a dtype of :data:`DTYPE_BYTES` (every
    one of them: a plan carries an op in its own elements) that the enforcer
    hands to a plan (:data:`~optimizer_service.plan.dtypes.PLANNED_DTYPES`:
    not int16, which gloo has no collective for)."""
    if kind not in COMM_KINDS:
        return "not a collective the search decomposes (timed as compute)"
    if kind not in PLAN_KIND:
        return f"{kind} is not one the enforcer plans ({', '.join(PLAN_KIND)})"
    if dtype not in DTYPE_BYTES:
        return f"dtype {dtype!r} is not one a plan carries ({', '.join(DTYPE_BYTES)})"
    if dtype not in PLANNED_DTYPES:
        return f"the inner backend has no {dtype} collective, so the enforcer runs it as traced"
    return ""


def last_iteration(trace: dict) -> list[dict]:
    """The ops of the last iteration that is followed by another one (so it is complete)."""
    indices = sorted({op["iteration"] for op in trace["ops"] if op["iteration"] >= 0})
    if len(indices) < 2:
        raise PlanError("the trace holds fewer than two iterations; run more steps (and call enforcer.step())")
    chosen = indices[-2]
    return [op for op in trace["ops"] if op["iteration"] == chosen]
