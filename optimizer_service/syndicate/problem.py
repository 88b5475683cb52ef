"""Pricing a joint plan: a training DAG, one execution-plan option per comm-op,
a scheduling policy → iteration time (the cost the MCMC search minimises,
Syndicate Pseudocode 1 line 6).

:class:`Problem` does the expensive part once: it enumerates every comm-op's
options (:mod:`optimizer_service.syndicate.options`), prices their motifs on the
topology (:mod:`optimizer_service.syndicate.motif_cost`) and lowers each to a
:class:`Template` — its tasks, their channels, the dependencies inside the op
(``Seq`` parts in order, ``Par`` parts independent), and its time alone. A
``Par`` of motifs of one kind on one channel over disjoint ranks is one task
priced as one step (the blocks of a tree, the groups of a P² step), since
they run as one collective phase; parallel motifs on the same ranks (the
segments of an op) are separate tasks that share their channel.

:meth:`Problem.evaluate` then only concatenates templates over the DAG
unrolled across ``iterations`` (each iteration uses the same option for the
same op: one plan is installed for every iteration) and runs the scheduler.
``framework_order`` keeps the training loop's program-order edges
(``issued_after``); Syndicate's own scheduler drops them (cross-iteration
moves, :mod:`optimizer_service.syndicate.dag`). A compute node runs on its
compute stream and a comm-op's motifs on its lane of their channels
(:func:`~optimizer_service.syndicate.scheduler.stream_channel`,
:func:`~optimizer_service.syndicate.scheduler.lane_channel`); a lane of a
channel slows compute as the channel does.

:meth:`Problem.cost_of` — the search's inner loop — runs in C++ when the
extension ``optimizer_service.syndicate._schedule_cpp`` is built
(:mod:`optimizer_service.syndicate.native_scheduler`, bit-identical results), else as
:meth:`Problem.python_cost_of`; ``native=False`` (the shell's ``P2_PURE_PYTHON=1``)
forces the Python path.
:meth:`Problem.evaluate` (every task's start and end) is always Python.

The reported **iteration time** is the unrolled makespan divided by the
number of iterations. The first iteration's ops cannot be moved before it
starts, so a plan that prefetches gains only from the second on: the figure
is conservative for Syndicate. It is what the search minimises (Pseudocode 1
prices the two-iteration DAG).

The **steady-state iteration time** (:meth:`Problem.steady_seconds`) is what a
training job sees once it runs: the same plan and policy on the DAG unrolled
over :data:`STEADY_UNROLL` iterations, minus the first :data:`STEADY_WARMUP`,
per iteration — ``(M₆ − M₂)/4`` for makespans ``Mₖ``. Syndicate reports
steady-state times: its enforcer's data-prep prefetch "increases the training
iteration time only for the first iteration but significantly improves the
training iteration time for all the subsequent iterations" (§6.5).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.motif import Composition, Motif
from optimizer_service.syndicate import native_scheduler
from optimizer_service.syndicate.dag import TrainingDAG, lower_composition
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.options import Option, library_option, options_for, p2_programs
from optimizer_service.syndicate.scheduler import LANE_STRIDE, Graph, Policy, lane_channel, stream_channel

#: Iterations unrolled, and how many of them are warm-up, for the steady state.
STEADY_UNROLL = 6
STEADY_WARMUP = 2


@dataclass(frozen=True)
class Template:
    """One option of one comm-op lowered to scheduler tasks (local indices)."""

    seconds: tuple[float, ...]
    channel: tuple[int, ...]
    after: tuple[tuple[int, ...], ...]
    exits: tuple[int, ...]                   # tasks nothing inside the op waits for
    motifs: tuple[tuple[Motif, ...], ...]    # the motifs each task runs
    isolated: float                          # the op's time when it runs alone

    @property
    def entries(self) -> tuple[int, ...]:
        """Tasks with no predecessor inside the op (they wait for the op's predecessors)."""
        return tuple(i for i, before in enumerate(self.after) if not before)


def template_of(plan: Composition, price: Callable[[tuple[Motif, ...]], float]) -> Template:
    seconds: list[float] = []
    channel: list[int] = []
    after: list[tuple[int, ...]] = []
    groups: list[tuple[Motif, ...]] = []

    def add(group: tuple[Motif, ...], before: tuple[int, ...]) -> int:
        seconds.append(price(group))
        channel.append(group[0].channel)
        after.append(before)
        groups.append(group)
        return len(seconds) - 1

    exits = lower_composition(plan, (), add, merge_phases=True)
    _, end, _ = Graph(channel, after, list(range(len(seconds))), ordered=True).run(seconds)
    return Template(tuple(seconds), tuple(channel), tuple(after), tuple(exits), tuple(groups), max(end, default=0.0))


@dataclass
class Evaluation:
    seconds: float                 # iteration time (makespan / iterations)
    makespan: float
    compute_idle_fraction: float
    start: list[float]
    end: list[float]
    order: list[int]
    task_node: list[int]           # unrolled node index of every task
    task_motifs: list[tuple[Motif, ...]]
    channel: list[int]
    graph: Graph


class Problem:
    """A DAG, its options, and everything needed to price a choice of options."""

    def __init__(self, dag: TrainingDAG, cost: MotifCostModel, channels: Sequence[int] | None = None,
                 iterations: int = 2, with_programs: bool = True, native: bool = True) -> None:
        self.dag = dag
        self.native = native and native_scheduler.native is not None
        self.cost = cost
        self.comm_nodes = [i for i, node in enumerate(dag.nodes) if node.is_comm]
        self.options: list[list[Option]] = []
        self.templates: list[list[Template]] = []
        built: dict[tuple, tuple[list[Option], list[Template]]] = {}
        for i in self.comm_nodes:
            op, passed = dag.nodes[i].comm, bool(dag.nodes[i].passthrough)
            key = (op, tuple(channels) if channels is not None else None, passed)
            if key not in built:
                if passed:
                    # The export leaves the op to the inner backend (:mod:`.plan_export`): any other
                    # option would price the plan below what runs.
                    options = [library_option(op, cost.topology)]
                else:
                    programs = p2_programs(op, cost.topology) if with_programs else []
                    options = options_for(op, cost.topology, channels, programs)
                built[key] = (options, [template_of(o.plan, cost.step_seconds) for o in options])
            self.options.append(built[key][0])
            self.templates.append(built[key][1])
        self.slot = {node: k for k, node in enumerate(self.comm_nodes)}
        #: channel -> how much longer compute takes while one of its motifs runs (scheduler "Interference")
        self.slowdown = cost.topology.compute_slowdowns()
        if not self.comm_nodes:
            raise InvalidInputError(f"workload {dag.name!r} has no comm-ops to plan")
        lanes = sorted({dag.nodes[i].lane for i in self.comm_nodes})
        if lanes != [0] and max(cost.topology.channels) >= LANE_STRIDE:
            raise InvalidInputError(f"workload {dag.name!r} names lanes, which need the topology's channels below "
                                    f"{LANE_STRIDE}; topology {cost.topology.name!r} has {max(cost.topology.channels)}")
        #: the same per scheduler channel: every lane of a channel slows compute as the channel does
        self.lane_slowdown = {lane_channel(c, lane): s for c, s in self.slowdown.items() for lane in lanes}
        self._unroll(iterations)
        self._unrolled_over: dict[int, Problem] = {iterations: self}

    def _unroll(self, iterations: int) -> None:
        self.iterations = iterations
        self.unrolled = self.dag.unroll(iterations)
        per_iteration = len(self.dag.nodes)
        self._base = [k % per_iteration for k in range(len(self.unrolled.nodes))]
        self._data_after = [[self.unrolled.index[b] for b in node.after] for node in self.unrolled.nodes]
        self._issue_after = [[self.unrolled.index[b] for b in node.issued_after] for node in self.unrolled.nodes]
        self._stream = [stream_channel(node.stream) for node in self.unrolled.nodes]   # a compute node's channel
        self._lane = [lane_channel(0, node.lane) for node in self.unrolled.nodes]       # a comm-op's channel offset
        self.compiled = self._compile() if self.native else None

    def _compile(self) -> native_scheduler.CompiledProblem:
        """This problem as the plain lists the C++ twin takes."""
        sets: list[list[native_scheduler.TemplateRow]] = []
        set_of: dict[int, int] = {}          # option lists are shared by the ops of one key
        slot_set: list[int] = []
        for templates in self.templates:
            if id(templates) not in set_of:
                set_of[id(templates)] = len(sets)
                sets.append([(t.seconds, t.channel, t.after, t.exits) for t in templates])
            slot_set.append(set_of[id(templates)])
        nodes = self.unrolled.nodes
        return native_scheduler.CompiledProblem(
            self.unrolled.order, [n.is_comm for n in nodes], [n.seconds for n in nodes],
            [self.slot[self._base[i]] if n.is_comm else -1 for i, n in enumerate(nodes)],
            self._data_after, self._issue_after, sets, slot_set, self.iterations, self.slowdown,
            [n.stream for n in nodes], [n.lane for n in nodes])

    def unrolled_over(self, iterations: int) -> Problem:
        """This problem with the DAG unrolled over ``iterations`` (the options and
        their prices are shared, not rebuilt)."""
        if iterations not in self._unrolled_over:
            other = copy.copy(self)
            other._unroll(iterations)
            self._unrolled_over[iterations] = other
        return self._unrolled_over[iterations]

    def steady_seconds(self, choice: Sequence[int], policy: Policy = Policy.CRITICAL_PATH,
                       framework_order: bool = False) -> float:
        """Steady-state iteration time of ``choice`` (module docstring)."""
        makespan = {k: self.unrolled_over(k).cost_of(choice, policy, framework_order) * k
                    for k in (STEADY_WARMUP, STEADY_UNROLL)}
        return (makespan[STEADY_UNROLL] - makespan[STEADY_WARMUP]) / (STEADY_UNROLL - STEADY_WARMUP)

    def steady_seconds_priced(self, cost: MotifCostModel, choice: Sequence[int],
                              policy: Policy = Policy.CRITICAL_PATH, framework_order: bool = False) -> float:
        """:meth:`steady_seconds` of ``choice`` with its options priced by ``cost``
        instead (the same DAG and options; the other options are not priced): what
        a prediction would be under another model (a fitted parameter left out)."""
        other = copy.copy(self)
        other.cost = cost
        other.templates = [list(templates) for templates in self.templates]
        for slot, k in enumerate(choice):
            other.templates[slot][k] = template_of(self.options[slot][k].plan, cost.step_seconds)
        other._unroll(self.iterations)
        other._unrolled_over = {self.iterations: other}
        return other.steady_seconds(choice, policy, framework_order)

    # ------------------------------------------------------------------ choices
    def greedy(self, allowed: Callable[[Option], bool] = lambda o: True) -> list[int]:
        """Per op, the allowed option that is fastest alone (ties: the earlier one)."""
        choice = []
        for options, templates in zip(self.options, self.templates):
            best = min((t.isolated, k) for k, (o, t) in enumerate(zip(options, templates)) if allowed(o))
            choice.append(best[1])
        return choice

    def default(self) -> list[int]:
        return [0] * len(self.comm_nodes)

    # --------------------------------------------------------------- evaluation
    def graph(self, choice: Sequence[int], framework_order: bool) -> tuple[Graph, list[float], list[int],
                                                                             list[tuple[Motif, ...]]]:
        seconds: list[float] = []
        channel: list[int] = []
        after: list[list[int]] = []
        program: list[int] = []
        task_node: list[int] = []
        task_motifs: list[tuple[Motif, ...]] = []
        tails: dict[int, list[int]] = {}
        nodes = self.unrolled.nodes
        for index in self.unrolled.order:
            node = nodes[index]
            before = [t for b in self._data_after[index] for t in tails[b]]
            if framework_order:
                before += [t for b in self._issue_after[index] for t in tails[b]]
            if not node.is_comm:
                tails[index] = [len(seconds)]
                seconds.append(node.seconds)
                channel.append(self._stream[index])
                after.append(before)
                program.append(index)
                task_node.append(index)
                task_motifs.append(())
                continue
            template = self.templates[self.slot[self._base[index]]][choice[self.slot[self._base[index]]]]
            offset = len(seconds)
            seconds.extend(template.seconds)
            lane = self._lane[index]
            channel.extend([c + lane for c in template.channel] if lane else template.channel)
            for local, inner in enumerate(template.after):
                after.append([offset + b for b in inner] if inner else before)
            program.extend([index] * len(template.seconds))
            task_node.extend([index] * len(template.seconds))
            task_motifs.extend(template.motifs)
            tails[index] = [offset + e for e in template.exits]
        return Graph(channel, after, program, ordered=True), seconds, task_node, task_motifs

    def evaluate(self, choice: Sequence[int], policy: Policy = Policy.CRITICAL_PATH,
                 framework_order: bool = False) -> Evaluation:
        graph, seconds, task_node, task_motifs = self.graph(choice, framework_order)
        start, end, order = graph.run(seconds, 1, policy, self.lane_slowdown)
        makespan = max(end, default=0.0)
        busy = sum(end[i] - start[i] for i, c in enumerate(graph.channel) if c < 0)
        streams = len(graph.streams)         # the share idle over every compute stream
        idle = 1.0 - busy / (makespan * streams) if makespan > 0 else 0.0
        return Evaluation(makespan / self.iterations, makespan, idle, start, end, order, task_node, task_motifs,
                          graph.channel, graph)

    def cost_of(self, choice: Sequence[int], policy: Policy = Policy.CRITICAL_PATH,
                framework_order: bool = False) -> float:
        """Iteration time of ``choice``: in C++ when compiled, else :meth:`python_cost_of` (same float)."""
        if self.compiled is not None:
            return self.compiled.cost(choice, policy, framework_order)
        return self.python_cost_of(choice, policy, framework_order)

    def python_cost_of(self, choice: Sequence[int], policy: Policy = Policy.CRITICAL_PATH,
                       framework_order: bool = False) -> float:
        """Iteration time of ``choice``: the unrolled makespan over the iterations."""
        graph, seconds, _, _ = self.graph(choice, framework_order)
        _, end, _ = graph.run(seconds, 1, policy, self.lane_slowdown)
        return max(end, default=0.0) / self.iterations
