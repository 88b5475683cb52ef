"""Planning one cross-mesh resharding end to end (Zhuang et al., MLSys 2023,
§2.2 and §3): decompose into unit tasks (App. B.2), price each under the
strategy from every candidate sender host (§3.1), solve load balance and
schedule at host level (§3.2), pick sender devices, and lower the result to
the :class:`ReshardProgram` the enforcer runs.

Lowering: tasks are renumbered ``0..`` in the order of their planned start
(ties by the solver's order), which every rank follows; receivers are grouped
by host in host order (a broadcast's chain order); a broadcast keeps its
``K``; every task's ``after`` names the tasks it follows on its hosts — the
latest earlier one sending from its sender host and, per receiver host, the
latest earlier one received there (the start rule of
:func:`~optimizer_service.resharding.schedule.evaluate`, Eq. 3) — so the
enforcer keeps the host-level schedule rather than only each device's order.
Sender devices: the naive algorithm takes a host's lowest-ranked
holder (the paper's baseline); the others, in start order, the holder on the
chosen host with the fewest bytes assigned so far (ties: lowest rank), which
spreads a host's sending over its devices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.resharding import ReshardProgram, ReshardTask, Strategy
from optimizer_service.resharding.bounds import LowerBound, lower_bound
from optimizer_service.resharding.mesh import MeshOrShape
from optimizer_service.resharding.request import ReshardRequest, build_request
from optimizer_service.resharding.schedule import ScheduleProblem, SearchBudget, SolveResult, evaluate
from optimizer_service.resharding.solvers import SOLVERS, solve
from optimizer_service.resharding.spec import ShardingSpec
from optimizer_service.resharding.strategies import UnitTaskPricer
from optimizer_service.resharding.unit_tasks import UnitTask, decompose

#: The load-balance algorithms, weakest first (§3.2, §5.2; "ensemble" is AlpaComm).
ALGORITHMS = tuple(SOLVERS)


@dataclass(frozen=True)
class PreparedResharding:
    """Everything the algorithms share: unit tasks, their prices per candidate
    sender host (seconds and broadcast partitions), the schedule problem and
    the NIC lower bound."""

    request: ReshardRequest
    topology: str
    unit_tasks: tuple[UnitTask, ...]
    partitions: tuple[tuple[int, ...], ...]
    problem: ScheduleProblem
    bound: LowerBound


def prepare(request: ReshardRequest, topology: Topology) -> PreparedResharding:
    """Decompose and price ``request`` on ``topology``."""
    per_host = topology.devices_per_instance(0)
    outside = [r for r in (*request.src_mesh.ranks, *request.dst_mesh.ranks) if r >= topology.device_count]
    if outside:
        raise InvalidInputError(f"rank {outside[0]} is outside topology {topology.name!r} "
                                f"({topology.device_count} devices)")
    tasks = decompose(request.shape, request.src_spec, request.src_mesh, request.dst_spec, request.dst_mesh,
                      devices_per_host=per_host, element_bytes=request.element_bytes)
    pricer = UnitTaskPricer(CostModel(topology), request.strategy)
    durations, partitions = [], []
    for task in tasks:
        prices = [pricer.price(group[0], task.destination_groups, task.nbytes) for group in task.source_groups]
        durations.append(tuple(p.seconds for p in prices))
        partitions.append(tuple(p.partitions for p in prices))
    problem = ScheduleProblem(tuple(t.source_hosts for t in tasks), tuple(durations),
                              tuple(t.destination_hosts for t in tasks),
                              tuple(1 + len(t.destinations) for t in tasks))
    return PreparedResharding(request, topology.name, tasks, tuple(partitions), problem,
                              lower_bound(tasks, topology))


@dataclass(frozen=True)
class Lane:
    """One bar of a Gantt chart: a task occupying a host's sending or receiving side."""

    host: int
    role: str            # "send" or "recv"
    task: int            # unit task index
    start: float
    finish: float


@dataclass(frozen=True)
class ReshardPlan:
    """A planned resharding: per unit task (indexed as ``unit_tasks``) the
    sender host and rank, partitions, start and finish; ``order`` lists unit
    task indices in the program's order; ``program`` is the lowered value."""

    request: ReshardRequest
    topology: str
    algorithm: str
    unit_tasks: tuple[UnitTask, ...]
    sender_hosts: tuple[int, ...]
    senders: tuple[int, ...]
    partitions: tuple[int, ...]
    starts: tuple[float, ...]
    finishes: tuple[float, ...]
    order: tuple[int, ...]
    predicted_seconds: float
    bound: LowerBound
    search: SolveResult
    program: ReshardProgram

    @property
    def lower_bound_seconds(self) -> float:
        return self.bound.seconds

    @property
    def ratio_to_lower_bound(self) -> float | None:
        """Predicted over the NIC lower bound (``None`` when nothing crosses a host)."""
        return self.predicted_seconds / self.bound.seconds if self.bound.seconds > 0 else None

    def lanes(self) -> list[Lane]:
        bars = []
        for i in self.order:
            bars.append(Lane(self.sender_hosts[i], "send", i, self.starts[i], self.finishes[i]))
            bars += [Lane(h, "recv", i, self.starts[i], self.finishes[i])
                     for h in self.unit_tasks[i].destination_hosts]
        return bars

    def __str__(self) -> str:
        ratio = self.ratio_to_lower_bound
        return (f"{self.algorithm}: {len(self.unit_tasks)} unit tasks, predicted {self.predicted_seconds:.6g} s"
                + (f" ({ratio:.3f}x the lower bound)" if ratio is not None else ""))


def _sender_devices(prepared: PreparedResharding, hosts: Sequence[int], order: Sequence[int],
                    spread: bool) -> tuple[int, ...]:
    assigned: dict[int, int] = {}
    senders = [0] * len(hosts)
    for i in order:
        task = prepared.unit_tasks[i]
        holders = task.sources_on(hosts[i])
        rank = min(holders, key=lambda r: (assigned.get(r, 0), r)) if spread else holders[0]
        assigned[rank] = assigned.get(rank, 0) + task.nbytes
        senders[i] = rank
    return tuple(senders)


def host_predecessors(problem: ScheduleProblem, hosts: Sequence[int],
                      order: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Per program position ``k`` (task ``order[k]`` sent from host ``hosts[order[k]]``), the
    positions of the tasks it follows on its hosts: the latest earlier one with the same sender
    host and, per receiver host, the latest earlier one receiving there (§3.2, Eq. 3: a host has
    a sending and a receiving side)."""
    last: dict[tuple[str, int], int] = {}
    after = []
    for k, i in enumerate(order):
        sides = [("send", hosts[i]), *(("recv", h) for h in problem.receiver_hosts[i])]
        after.append(tuple(sorted({last[side] for side in sides if side in last})))
        last.update((side, k) for side in sides)
    return tuple(after)


def lower(prepared: PreparedResharding, senders: Sequence[int], partitions: Sequence[int], order: Sequence[int],
          algorithm: str, predicted: float, after: Sequence[tuple[int, ...]] | None = None) -> ReshardProgram:
    """The program the enforcer runs (module docstring); ``after`` per program position
    (:func:`host_predecessors`; ``None``: none)."""
    request = prepared.request
    strategy = request.strategy
    tasks = tuple(ReshardTask(k, prepared.unit_tasks[i].box, strategy, senders[i],
                              prepared.unit_tasks[i].destination_groups,
                              partitions[i] if strategy is Strategy.BROADCAST else 1,
                              tuple(after[k]) if after is not None else ())
                  for k, i in enumerate(order))
    return ReshardProgram(request.shape, request.src_spec.boxes(request.shape, request.src_mesh),
                          request.dst_spec.boxes(request.shape, request.dst_mesh), tasks, request.element_bytes,
                          algorithm, predicted)


def plan_prepared(prepared: PreparedResharding, algorithm: str = "ensemble", *, budget: SearchBudget | None = None,
                  seed: int = 0) -> ReshardPlan:
    """Solve one algorithm on a prepared resharding and lower the result."""
    result = solve(algorithm, prepared.problem, budget=budget or SearchBudget(), seed=seed)
    timeline = evaluate(prepared.problem, result.schedule)
    position = {task: k for k, task in enumerate(result.schedule.order)}
    order = tuple(sorted(range(prepared.problem.size), key=lambda i: (timeline.starts[i], position[i])))
    hosts = result.schedule.senders
    senders = _sender_devices(prepared, hosts, order, spread=algorithm != "naive")
    partitions = tuple(prepared.partitions[i][prepared.unit_tasks[i].source_hosts.index(hosts[i])]
                       for i in range(len(hosts)))
    predicted = timeline.makespan
    after = host_predecessors(prepared.problem, hosts, order)
    program = lower(prepared, senders, partitions, order, algorithm, predicted, after)
    return ReshardPlan(prepared.request, prepared.topology, algorithm, prepared.unit_tasks, hosts, senders,
                       partitions, timeline.starts, timeline.finishes, order, predicted, prepared.bound, result,
                       program)


def plan_request(request: ReshardRequest, topology: Topology, algorithms: Sequence[str] = ALGORITHMS, *,
                 budget_seconds: float = 1.0, max_nodes: int = 100_000, seed: int = 0,
                 clock: Callable[[], float] | None = None) -> tuple[ReshardPlan, ...]:
    """Plans of ``request`` by each of ``algorithms`` (decomposed and priced once).
    Without a ``clock`` only ``max_nodes`` bounds the searches (deterministic)."""
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown or not algorithms:
        raise InvalidInputError(f"unknown load-balance algorithm {unknown[0] if unknown else '(none)'!r}; use "
                                f"{', '.join(ALGORITHMS)}")
    prepared = prepare(request, topology)
    budget = SearchBudget(budget_seconds, max_nodes, clock)
    return tuple(plan_prepared(prepared, name, budget=budget, seed=seed) for name in algorithms)


def plan_resharding(shape: tuple[int, ...], src_spec: ShardingSpec | str, src_mesh: MeshOrShape | str,
                    dst_spec: ShardingSpec | str, dst_mesh: MeshOrShape | str, topology: Topology, *,
                    algorithm: str = "ensemble", strategy: Strategy | str = Strategy.BROADCAST,
                    element_bytes: int = 4, budget_seconds: float = 1.0, max_nodes: int = 100_000, seed: int = 0,
                    clock: Callable[[], float] | None = None) -> ReshardPlan:
    """Plan one resharding with one algorithm. Meshes are explicit
    (:class:`Mesh` or ``[[0,1],[2,3]]``) or shapes (``(2, 4)`` or ``"2x4"``)
    placed on ``topology``; without a ``clock`` the search is bounded by
    ``max_nodes`` only (deterministic), with one also by ``budget_seconds``."""
    request = build_request(shape, src_spec, src_mesh, dst_spec, dst_mesh, topology, element_bytes=element_bytes,
                            strategy=strategy)
    return plan_request(request, topology, (algorithm,), budget_seconds=budget_seconds, max_nodes=max_nodes,
                        seed=seed, clock=clock)[0]
