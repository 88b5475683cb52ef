"""The training DAG of a recorded job, read from its enforcer traces (pure).

Syndicate's optimizer takes as input the training DAG of one iteration and
unrolls it over two (Syndicate, NSDI'23, §4.3). :func:`dag_from_traces` builds that DAG from the
per-rank traces the enforcer records (:mod:`optimizer_service.plan.trace`, format
``p2enforcer-trace``), for one complete iteration; :func:`trace_iteration_seconds`
gives the measured time of the same iteration, to compare with the schedule.

Our readings of a trace (its ops in program order ``o_0 .. o_{K-1}``):

* **Comm-ops.** all_reduce → AllReduce, broadcast → Broadcast (the group
  rotated so its ``root`` group position comes first; the node keeps ``root``
  for the plan's key), reduce → Reduce,
  all_gather(_into_tensor) → AllGather, reduce_scatter(_tensor) →
  ReduceScatter, all_to_all(_single) → AllToAll, on the group's global ranks.
  Elements are the op's own (issue 32, "every dtype"): ``bytes / s`` of the
  op's buffer for its dtype's element size ``s``
  (:mod:`optimizer_service.plan.op_plan` "Buffer model": the whole buffer
  ``D`` of gathers and reduce-scatters), and for AllToAll ``bytes / s / N``
  per destination block; the node keeps the dtype and its motifs count
  ``s``-byte elements, so the search prices every piece with its real bytes
  and the plan's ranges are ranges of the buffer the enforcer sees. Kinds the
  backend never hands to a plan (``reduce``, the list forms ``all_gather``,
  ``reduce_scatter`` and ``all_to_all``), a dtype no plan names, and a buffer
  that is not whole elements (all-to-all: ``N`` equal blocks of them) are
  priced by their bytes (in ``s``-byte or, for an unknown dtype, 4-byte
  units, rounded up) and pass through: the node's ``passthrough`` says why
  (:func:`optimizer_service.plan.trace.passthrough_reason`), as the inner
  backend runs them (:func:`~optimizer_service.syndicate.library_ops.library_op`:
  on gloo a ReduceScatter is an AllReduce of its input), and the search offers
  each no option but that one (:func:`~optimizer_service.syndicate.options.library_option`).
* **Other ops** (barrier, send/recv, gather, scatter, coalesced ops, ...)
  cannot be decomposed: each is a compute node ``kind#k`` whose time is its
  measured duration (``completed - issued``, 0 if it never completed), in its
  program position. It occupies the compute stream, so an overlapped one is
  serialised with compute (pessimistic).
* **Blocking.** ``o_k`` is blocking when ``o_{k+1}`` was issued after ``o_k``
  completed (``gap >= -TIE_SECONDS``) on some rank. ``compute#{k+1}`` then
  depends on ``o_k``; otherwise on ``compute#k`` only (one compute stream,
  program order). Ops that are not blocking, ops that never completed, and
  the last op are waited for at the iteration's end by a zero-second compute
  node ``step``, which also follows the last compute.
* **Ties.** An op's ``completed`` is stamped when the enforcer sees it
  complete (a future's callback); the program, woken by the same completion,
  may issue its next op a few hundred microseconds *before* that stamp
  (measured on the emulated 2 × 4 cluster: DDP's loss all-reduce follows its
  last bucket by -0.7 .. +1.9 ms, either sign). So a completion up to
  :data:`TIE_SECONDS` after an issue still counts as before it. Without this,
  the one rank where the race went the other way read the whole bucket
  all-reduce time as compute (150 ms of a 180 ms DDP step).
* **Compute seconds.** ``compute#k`` takes, per rank, the time from the
  latest of ``o_{k-1}``'s issue and the completions (at most
  ``TIE_SECONDS`` after ``o_k``'s issue) of the ops it depends on, to
  ``o_k``'s issue. So replaying the measured op times gives back the measured
  issue times: a compute that waited for an op is not also charged the wait.
  (Where the program computed all along while an earlier op finished in the
  background, this reads part of the compute as waiting; the plan then may
  end that op earlier and the model shortens the step by at most that part.)
* **Completed earlier.** More generally, every op ``o_j`` that completed
  before a later ``o_m`` was issued (on some rank) precedes ``compute#m`` (the
  first such ``m``; the compute chain carries it on). The program may have
  waited for ``o_j`` by a route the enforcer does not see — DDP's reducer waits
  on its buckets' futures in C++ before the loss all-reduce is issued — so a
  plan must never order ``o_m``'s motifs before ``o_j``'s: the dispatcher
  would wait for ``o_m`` while the program waits for ``o_j`` (found live, as a
  deadlock of the DLRM job). It costs reordering freedom only where the trace
  shows the program was already past ``o_j``.
* **First compute.** ``compute#0`` is the first op's ``gap`` (the time since the
  previous iteration's last op completed; 0 when unknown or negative) and
  depends on the previous iteration's ``step`` (``after_previous``).
* **Several ranks.** The slowest rank paces collectives: every node's seconds
  is the maximum over ranks (each rank's compute read by its own blocking).
  All ranks must record the same ops (kind, bytes, group size, broadcast root)
  in the same order.
* **Subgroups.** At one position the ranks may record one collective on
  different groups (``new_group`` subgroups: ranks 0 and 1 all-reduce on
  ``[0, 1]`` while ranks 2 and 3 do on ``[2, 3]``); those groups must be equal
  or disjoint. Each group's copy is a comm node of its own,
  ``kind#k[ranks]`` (``all_reduce#3[0,2]``), so the search prices the parallel
  groups' traffic together and plans every group's op; they share the
  position's compute. A non-collective op at such a position stays one compute
  node.
* **Iteration.** By default the last complete one: the one before the last,
  as :func:`optimizer_service.plan.trace.last_iteration` picks (the earliest such over
  ranks). A chosen iteration must be followed by another one or have every op
  completed, on every rank.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES, element_bytes
from optimizer_service.plan.trace import COMM_KINDS, TRACE_FORMAT, passthrough_reason
from optimizer_service.syndicate.dag import Node, TrainingDAG, comm, compute
from optimizer_service.syndicate.library_ops import library_op, reduce_scatter_by_all_reduce

#: How much later than an op's issue an earlier op's recorded completion may be
#: and still count as before it (the module doc's "Ties").
TIE_SECONDS = 0.002


def _checked(function: Callable) -> Callable:
    """``function``, with a trace that lacks a field reported in one line."""
    @functools.wraps(function)
    def checked(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except KeyError as error:
            raise InvalidInputError(f"a trace or trace op has no field {error}; pass traces that "
                                    f"enforcer.export_trace wrote (format {TRACE_FORMAT!r})") from None
    return checked


@_checked
def dag_from_traces(traces: Sequence[Mapping], iteration: int | None = None, name: str = "trace") -> TrainingDAG:
    """The training DAG of one iteration of ``traces`` (one parsed trace per rank)."""
    chosen, per_rank = iteration_ops(traces, iteration)
    ops = per_rank[0][1]
    groups = [parallel_groups(per_rank, k, chosen) for k in range(len(ops))]
    names = [node_names(op["kind"], k, found) for k, (op, found) in enumerate(zip(ops, groups))]
    nodes: list[Node] = []
    waited: list[str] = []
    total = 0.0
    earlier = _completed_before(per_rank, len(ops))
    for k in range(len(ops)):
        extra = [before for j in earlier.get(k, ()) for before in names[j]]
        if k == 0:
            seconds = max(max(0.0, _number(o[0].get("gap"))) for _, o in per_rank)
            nodes.append(compute("compute#0", seconds, previous=["step"]))
        else:
            blocking = any(_blocking(o[k - 1], o[k]) for _, o in per_rank)
            depends = ([k - 1] if blocking else []) + earlier.get(k, [])
            seconds = max(_compute_before(o, k, depends) for _, o in per_rank)
            if blocking:
                nodes.append(compute(f"compute#{k}", seconds, *names[k - 1], *extra))
            else:
                nodes.append(compute(f"compute#{k}", seconds, f"compute#{k - 1}", *extra))
                waited.extend(names[k - 1])
        total += seconds
        if ops[k]["kind"] in COMM_KINDS:
            for node_name, group in zip(names[k], groups[k]):
                copies = [(r, o[k]) for r, o in per_rank if tuple(o[k]["group"]) == group]
                nodes.append(_op_node(k, node_name, copies, chosen))
        else:
            nodes.append(_op_node(k, names[k][0], [(r, o[k]) for r, o in per_rank], chosen))
    nodes.append(compute("step", 0.0, f"compute#{len(ops) - 1}", *waited, *names[-1]))
    by_all_reduce = reduce_scatter_by_all_reduce(traces)
    nodes = [replace(node, comm=library_op(node.comm, by_all_reduce)) if node.is_comm and node.passthrough else node
             for node in nodes]
    other = [names[k][0] for k, op in enumerate(ops) if op["kind"] not in COMM_KINDS]
    parallel = sum(1 for k, op in enumerate(ops) if op["kind"] in COMM_KINDS and len(groups[k]) > 1)
    description = (f"trace of {len(traces)} rank(s) (world size {traces[0]['world_size']}), iteration {chosen}, "
                   f"{len(ops)} ops ({len(ops) - len(other)} optimizable), {total:.6g} s of compute"
                   + (f"; {parallel} on parallel subgroups" if parallel else "")
                   + (f"; not optimizable, timed as compute: {', '.join(other)}" if other else ""))
    return TrainingDAG(name, tuple(nodes), description)


def node_names(kind: str, k: int, groups: Sequence[tuple[int, ...]]) -> list[str]:
    """The DAG nodes of op ``k``: ``kind#k``, or one ``kind#k[ranks]`` per group
    when the ranks ran the collective on parallel subgroups."""
    if kind not in COMM_KINDS or len(groups) == 1:
        return [f"{kind}#{k}"]
    return [f"{kind}#{k}[{','.join(map(str, group))}]" for group in groups]


def parallel_groups(per_rank: Sequence[tuple[int, Sequence[Mapping]]], k: int, iteration: int) -> list[tuple[int, ...]]:
    """The groups the ranks ran op ``k`` on, sorted: one for a group every rank
    is in, several for parallel subgroups (which must not overlap)."""
    first: dict[tuple[int, ...], tuple[int, Mapping]] = {}
    for rank, ops in per_rank:
        group = tuple(int(g) for g in ops[k]["group"])
        if group in first:
            continue
        clash = next((g for g in first if set(g) & set(group)), None)
        if clash is not None:
            other_rank, other = first[clash]
            raise InvalidInputError(f"iteration {iteration}, op {k}: rank {rank} has {_describe(ops[k])} but rank "
                                    f"{other_rank} has {_describe(other)}; the groups of one op must be the same "
                                    f"or disjoint (traces of one run)")
        first[group] = (rank, ops[k])
    return sorted(first)


@_checked
def trace_iteration_seconds(traces: Sequence[Mapping], iteration: int | None = None) -> float:
    """Measured wall time of the iteration :func:`dag_from_traces` reads: the
    maximum over ranks from its first op's issue to the next iteration's first
    issue (to its last completion when no iteration follows)."""
    chosen, per_rank = iteration_ops(traces, iteration)
    spans = []
    for (_, ops), trace in zip(per_rank, traces):
        later = [op["issued"] for op in trace["ops"] if op["iteration"] > chosen]
        spans.append((min(later) if later else max(op["completed"] for op in ops)) - ops[0]["issued"])
    return max(spans)


def _op_node(k: int, name: str, copies: list[tuple[int, Mapping]], iteration: int) -> Node:
    rank, op = copies[0]
    kind, nbytes, group = op["kind"], int(op["bytes"]), [int(g) for g in op["group"]]
    motif_kind = COMM_KINDS.get(kind)
    if motif_kind is None:
        duration = max(0.0 if o["completed"] is None else max(0.0, o["completed"] - o["issued"]) for _, o in copies)
        return compute(name, duration, f"compute#{k}")
    where = f"rank {rank}, iteration {iteration}, op {name} ({kind} of {nbytes} bytes on group {group})"
    if not group or len(set(group)) != len(group):
        raise InvalidInputError(f"{where}: the group must list distinct global ranks; re-record the trace")
    root = 0
    if motif_kind is Collective.BROADCAST:
        root = int(op.get("root", 0))
        if not 0 <= root < len(group):
            raise InvalidInputError(f"{where}: root {root} is not a group position 0..{len(group) - 1}")
        group = group[root:] + group[:root]
    dtype = str(op.get("dtype", "float32"))
    reason = passthrough_reason(kind, dtype)
    known = dtype if dtype in DTYPE_BYTES else ""
    blocks = len(group) if motif_kind is Collective.ALL_TO_ALL else 1
    per = element_bytes(known) * blocks
    if nbytes % per and not reason:
        reason = (f"{nbytes} bytes are not {blocks} equal block(s) of whole {dtype} elements "
                  f"({element_bytes(known)} bytes each)")
    node = comm(name, motif_kind, group, -(-nbytes // per), f"compute#{k}", dtype=known)
    return replace(node, passthrough=reason, root=root)


def iteration_ops(traces: Sequence[Mapping], iteration: int | None) -> tuple[int, list[tuple[int, list]]]:
    """The chosen iteration (None: the last complete one) and every rank's ops in
    it as ``(rank, ops)``, checked to agree (their groups: :func:`parallel_groups`)."""
    if not traces:
        raise InvalidInputError("no traces given; pass the parsed trace JSON of at least one rank")
    seen: dict[int, int] = {}
    indices = []
    for position, trace in enumerate(traces):
        found = f"format {trace.get('format')!r}" if isinstance(trace, Mapping) else f"a {type(trace).__name__}"
        if not isinstance(trace, Mapping) or trace.get("format") != TRACE_FORMAT:
            raise InvalidInputError(f"trace {position} is not a {TRACE_FORMAT!r} trace ({found}); "
                                    f"pass the parsed JSON that P2_TRACE_FILE / enforcer.export_trace wrote")
        rank = trace.get("rank", position)
        if trace.get("world_size") != traces[0].get("world_size"):
            raise InvalidInputError(f"rank {rank} has world size {trace.get('world_size')} but rank "
                                    f"{traces[0].get('rank', 0)} has {traces[0].get('world_size')}; "
                                    f"pass traces of one run")
        if rank in seen:
            raise InvalidInputError(f"two traces of rank {rank} (positions {seen[rank]} and {position}); "
                                    f"pass one trace per rank")
        seen[rank] = position
        try:
            indices.append(sorted({int(op["iteration"]) for op in trace["ops"] if op["iteration"] >= 0}))
        except (KeyError, TypeError) as error:
            raise InvalidInputError(f"rank {rank}: malformed trace ops ({error!r}); re-export the trace") from None
    ranks = [t.get("rank", p) for p, t in enumerate(traces)]
    if iteration is None:
        short = next((r for r, i in zip(ranks, indices) if len(i) < 2), None)
        if short is not None:
            raise InvalidInputError(f"the trace of rank {short} holds fewer than two iterations; record more steps "
                                    f"(call enforcer.step() once per iteration) so one complete iteration exists")
        iteration = min(i[-2] for i in indices)
    per_rank = []
    for rank, trace, held in zip(ranks, traces, indices):
        ops = [op for op in trace["ops"] if op["iteration"] == iteration]
        if not ops:
            raise InvalidInputError(f"rank {rank} has no ops in iteration {iteration} (it holds iterations "
                                    f"{held}); pick one of those")
        if held[-1] == iteration and any(op["completed"] is None for op in ops):
            raise InvalidInputError(f"iteration {iteration} of rank {rank} is still running (an op never "
                                    f"completed); pick an earlier iteration or record more steps")
        per_rank.append((rank, ops))
    first_rank, first = per_rank[0]
    for rank, ops in per_rank[1:]:
        for k in range(max(len(ops), len(first))):
            mine, theirs = (ops[k] if k < len(ops) else None), (first[k] if k < len(first) else None)
            if mine is None or theirs is None or _signature(mine) != _signature(theirs):
                raise InvalidInputError(f"iteration {iteration}, op {k}: rank {rank} has {_describe(mine)} but "
                                        f"rank {first_rank} has {_describe(theirs)}; every rank must record "
                                        f"the same ops (traces of one run)")
    return iteration, per_rank


def _completed_before(per_rank: list[tuple[int, list]], count: int) -> dict[int, list[int]]:
    """For each op ``m``, the ops ``j < m - 1`` not blocking ``o_{j+1}`` that
    completed before ``m`` was issued on some rank: ``o_j → compute#m`` (the
    earliest such ``m``; later ones follow through the compute chain)."""
    edges: dict[int, list[int]] = {}
    for j in range(count - 2):
        if any(_blocking(ops[j], ops[j + 1]) for _, ops in per_rank):
            continue            # o_j → compute#{j+1} already, and the compute chain carries it on
        first = None
        for _, ops in per_rank:
            m = next((m for m in range(j + 2, count) if _done_by(ops[j]["completed"], ops[m]["issued"])), None)
            if m is not None and (first is None or m < first):
                first = m
        if first is not None:
            edges.setdefault(first, []).append(j)
    return edges


def _signature(op: Mapping) -> tuple:
    """What ranks must agree on about an op (its group may be a parallel subgroup: :func:`parallel_groups`)."""
    return op["kind"], op["bytes"], len(op["group"]), op.get("root", 0) if op["kind"] == "broadcast" else 0


def _describe(op: Mapping | None) -> str:
    if op is None:
        return "no op"
    root = f" from group position {op.get('root', 0)}" if op["kind"] == "broadcast" else ""
    return f"{op['kind']} of {op['bytes']} bytes on group {list(op['group'])}{root}"


def _compute_before(ops: Sequence[Mapping], k: int, depends: Sequence[int]) -> float:
    """One rank's compute before ``ops[k]``: from the latest of ``ops[k-1]``'s
    issue and the completions of the ops ``depends`` names that came before
    ``ops[k]``'s issue on this rank (ties included), to that issue."""
    issued = ops[k]["issued"]
    start = ops[k - 1]["issued"]
    for j in depends:
        if _done_by(ops[j]["completed"], issued):
            start = max(start, ops[j]["completed"])
    return max(0.0, issued - start)


def _blocking(op: Mapping, following: Mapping) -> bool:
    return _done_by(op["completed"], following["issued"])


def _done_by(completed: float | None, issued: float) -> bool:
    """An op that completed at ``completed`` did so before an issue at ``issued`` (ties included)."""
    return completed is not None and completed <= issued + TIE_SECONDS


def _number(value: float | None) -> float:
    return 0.0 if value is None else float(value)

