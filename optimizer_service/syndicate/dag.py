"""The training DAG the joint optimizer schedules (Syndicate §4.3).

Nodes are compute tasks (seconds on a compute stream) and comm-ops (a
collective over ranks with a payload, turned into motifs by the execution plan
chosen for it). Edges say what must finish before what. One iteration is
described once; :meth:`TrainingDAG.unroll` repeats it ``iterations`` times
(Syndicate unrolls two "to enable cross-iteration optimizations") and wires
each node's ``after_previous`` dependencies to the previous iteration's nodes,
so a move across the iteration boundary — the next batch's data-prep
all-to-all issued during this iteration's backward pass, as in Syndicate's
Figure 13 — is just a different ``after``/``after_previous`` split.

``after`` and ``after_previous`` are data dependencies: the node needs their
results. ``issued_after`` and ``issued_after_previous`` are the training
loop's program order only: the framework *submits* the op after those nodes
(e.g. the data-prep all-to-all of batch k+1 once step k's optimizer update is
done) although it does not need them. Schedulers of today's stack (FIFO, BS+,
HO) keep them; Syndicate's scheduler drops them, which is how it moves an op
across the iteration boundary (§6.5 "Data Prefetch"; the enforcer holds the
op's motifs until the application submits it).

A compute node runs on compute stream ``stream``: 0, the one stream of
Syndicate's data-parallel rank, unless the job computes on several device
groups at once — a pipeline's stages
(:mod:`optimizer_service.syndicate.pipeline_dag`) — each then with a stream
of its own, which runs beside the others
(:func:`~optimizer_service.syndicate.scheduler.stream_channel`). A comm-op
likewise may name a lane: its motifs then share their channel only with the
motifs of its lane (:func:`~optimizer_service.syndicate.scheduler.lane_channel`;
lane 0, every comm-op of a rank sharing its communicators, unless they travel
disjoint paths, as a pipeline's directed edges do).

Node order is program order: the order in which one iteration submits its
nodes (Figure 13's numbering), which FIFO and LIFO follow.

:func:`to_tasks` lowers a DAG plus one plan per comm-op to the scheduler's
task list (:mod:`optimizer_service.syndicate.scheduler`): a comm-op's motifs keep the
plan's ``Seq``/``Par`` structure as dependencies, its first motifs wait for
the op's predecessors and its successors wait for its last motifs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES, element_bytes
from optimizer_service.plan.motif import Composition, Motif, Par, Seq, comm_op
from optimizer_service.syndicate.scheduler import LANE_STRIDE, Task, lane_channel, stream_channel
from optimizer_service.syndicate.toposort import topological_order


@dataclass(frozen=True)
class Node:
    name: str
    seconds: float = 0.0                       # compute time (0 for comm-ops)
    comm: Motif | None = None                  # the comm-op, as one whole motif
    after: tuple[str, ...] = ()                # same-iteration predecessors
    after_previous: tuple[str, ...] = ()       # predecessors in the previous iteration
    issued_after: tuple[str, ...] = ()         # program order only (same iteration)
    issued_after_previous: tuple[str, ...] = ()  # program order only (previous iteration)
    dtype: str = ""                            # a comm-op's dtype (a DTYPE_BYTES name); "": unnamed, fp32 elements
    passthrough: str = ""                      # why the enforcer cannot run a plan for it ("" if it can)
    root: int = 0                              # a traced broadcast's source: its position in the traced group
    stream: int = 0                            # a compute node's compute stream (comm-ops: 0)
    lane: int = 0                              # a comm-op's lane of its motifs' channels (compute: 0)

    @property
    def is_comm(self) -> bool:
        return self.comm is not None


@dataclass(frozen=True)
class TrainingDAG:
    name: str
    nodes: tuple[Node, ...]
    description: str = ""
    index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    order: list[int] = field(default_factory=list, compare=False, repr=False)  # a topological order

    def __post_init__(self) -> None:
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise InvalidInputError(f"DAG {self.name!r}: node name {twice!r} appears twice")
        self.index.update({n: i for i, n in enumerate(names)})
        for node in self.nodes:
            for before in node.after + node.after_previous + node.issued_after + node.issued_after_previous:
                if before not in self.index:
                    raise InvalidInputError(f"DAG {self.name!r}: node {node.name!r} waits for unknown node {before!r}")
            if node.seconds < 0:
                raise InvalidInputError(f"DAG {self.name!r}: node {node.name!r} has negative time {node.seconds}")
            for what, value in (("compute stream", node.stream), ("lane", node.lane)):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise InvalidInputError(f"DAG {self.name!r}: node {node.name!r} has {what} {value!r}; "
                                            "it must be a whole number >= 0")
            if node.lane >= LANE_STRIDE:
                raise InvalidInputError(f"DAG {self.name!r}: comm-op {node.name!r} has lane {node.lane}; "
                                        f"lanes are below {LANE_STRIDE}")
            if node.stream and node.is_comm:
                raise InvalidInputError(f"DAG {self.name!r}: comm-op {node.name!r} names compute stream "
                                        f"{node.stream}; only compute nodes run on a stream (give 0)")
            if node.lane and not node.is_comm:
                raise InvalidInputError(f"DAG {self.name!r}: compute node {node.name!r} names lane {node.lane}; "
                                        "only comm-ops have lanes (give 0)")
        self.order.extend(_topological(self))

    @property
    def comm_ops(self) -> list[Node]:
        return [n for n in self.nodes if n.is_comm]

    def unroll(self, iterations: int = 2) -> TrainingDAG:
        """``iterations`` copies, node ``x`` of iteration ``k`` named ``x@k``."""
        if iterations < 1:
            raise InvalidInputError(f"cannot unroll {iterations} iterations")
        nodes = []
        for k in range(iterations):
            for node in self.nodes:
                after = tuple(f"{b}@{k}" for b in node.after)
                issued = tuple(f"{b}@{k}" for b in node.issued_after)
                if k > 0:
                    after += tuple(f"{b}@{k - 1}" for b in node.after_previous)
                    issued += tuple(f"{b}@{k - 1}" for b in node.issued_after_previous)
                nodes.append(Node(f"{node.name}@{k}", node.seconds, node.comm, after, (), issued,
                                  stream=node.stream, lane=node.lane))
        return TrainingDAG(f"{self.name} x{iterations}", tuple(nodes), self.description)


def compute(name: str, seconds: float, *after: str, previous: Sequence[str] = (),
            issued_after: Sequence[str] = (), issued_after_previous: Sequence[str] = (), stream: int = 0) -> Node:
    return Node(name, seconds, None, tuple(after), tuple(previous), tuple(issued_after), tuple(issued_after_previous),
                stream=stream)


def comm(name: str, kind: Collective, ranks: Sequence[int], elements: int, *after: str,
         previous: Sequence[str] = (), issued_after: Sequence[str] = (),
         issued_after_previous: Sequence[str] = (), lane: int = 0, dtype: str = "") -> Node:
    """A comm-op of ``elements`` of ``dtype`` per rank (per block for AllToAll);
    its motifs count elements of the dtype's size (4 bytes when ``dtype`` is "")."""
    if dtype and dtype not in DTYPE_BYTES:
        raise InvalidInputError(f"comm-op {name!r} has dtype {dtype!r}; expected one of {', '.join(DTYPE_BYTES)} "
                                "or none (fp32)")
    return Node(name, 0.0, comm_op(kind, ranks, elements, element_bytes(dtype)), tuple(after), tuple(previous),
                tuple(issued_after), tuple(issued_after_previous), dtype=dtype, lane=lane)


def to_tasks(dag: TrainingDAG, plans: Mapping[str, Composition], seconds: Callable[[Motif], float]
             ) -> tuple[list[Task], dict[str, list[int]]]:
    """Scheduler tasks for ``dag`` with ``plans[name]`` for each comm-op (the
    whole op as one motif when absent); also each node's task indices."""
    tasks: list[Task] = []
    tails: dict[str, list[int]] = {}
    owned: dict[str, list[int]] = {}
    for node in (dag.nodes[i] for i in dag.order):
        before = tuple(t for b in node.after for t in tails[b])
        if not node.is_comm:
            tasks.append(Task(node.name, node.seconds, stream_channel(node.stream), before))
            tails[node.name] = owned[node.name] = [len(tasks) - 1]
            continue
        start = len(tasks)

        def add(group: tuple[Motif, ...], after: tuple[int, ...], name: str = node.name, lane: int = node.lane) -> int:
            motif, = group
            tasks.append(Task(f"{name}:{motif}", seconds(motif), lane_channel(motif.channel, lane), after))
            return len(tasks) - 1

        ends = lower_composition(plans.get(node.name, node.comm), before, add)
        tails[node.name] = ends or list(before)
        owned[node.name] = list(range(start, len(tasks)))
    return tasks, owned


def lower_composition(plan: Composition, before: tuple[int, ...],
                      add: Callable[[tuple[Motif, ...], tuple[int, ...]], int], merge_phases: bool = False) -> list[int]:
    """Walk ``plan``'s structure after the tasks ``before``: ``Seq`` parts in
    order, ``Par`` parts independently; ``add(motifs, after)`` appends one task
    and returns its index. Returns the tasks that end the plan. With
    ``merge_phases`` a ``Par`` of motifs of one kind on one channel over
    disjoint ranks is one task (:func:`one_phase`)."""
    if isinstance(plan, Motif):
        return [add((plan,), before)]
    if isinstance(plan, Seq):
        ends = list(before)
        for part in plan.parts:
            ends = lower_composition(part, tuple(ends), add, merge_phases)
        return ends
    assert isinstance(plan, Par)
    if merge_phases and one_phase(plan):
        return [add(plan.parts, before)]
    return [t for part in plan.parts for t in lower_composition(part, before, add, merge_phases)]


def one_phase(par: Par) -> bool:
    """Whether ``par`` is motifs of one kind on one channel over pairwise disjoint
    ranks — one collective phase (a tree's blocks, the groups of a P² step)."""
    parts = par.parts
    if len(parts) < 2 or not all(isinstance(p, Motif) for p in parts):
        return False
    first = parts[0]
    seen: set[int] = set()
    for m in parts:
        if m.kind is not first.kind or m.channel != first.channel or seen.intersection(m.ranks):
            return False
        seen.update(m.ranks)
    return True


def _topological(dag: TrainingDAG) -> list[int]:
    successors: list[list[int]] = [[] for _ in dag.nodes]
    for i, node in enumerate(dag.nodes):
        for before in set(node.after + node.issued_after):
            successors[dag.index[before]].append(i)
    order, stuck = topological_order(successors)
    if stuck is not None:
        raise InvalidInputError(f"DAG {dag.name!r} has a cycle through {dag.nodes[stuck].name!r}")
    return order
