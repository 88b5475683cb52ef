"""The load-balance-and-schedule problem at host level (Zhuang et al., MLSys
2023, §3.2, Eq. 1–3) and how a solution is timed.

*What* (:class:`ScheduleProblem`): unit tasks ``i`` with candidate sender
hosts ``n_i`` (each with the task's duration ``T_i`` from that host) and
receiver hosts ``m_i``. *How* (:class:`Schedule`): a sender host
``n_i* ∈ n_i`` per task (Eq. 2) and one global order of the tasks. Timing
(:func:`evaluate`, §3.2 "DFS"): a task starts when every task before it in the
order that shares its sender host or one of its receiver hosts has finished,
which satisfies Eq. 3; the objective (Eq. 1) is the last finish. A global
order induces consistent per-host orders, and every per-host order the paper's
search considers is induced by some global order (sort by start time).

Reading of Eq. 3: "tasks that share the same sender or receiver" — a host
sending one task and receiving another does not conflict (links are full
duplex, §3), so a host has a sending resource and a receiving resource.

The solvers (:mod:`optimizer_service.resharding.solvers`,
:mod:`optimizer_service.resharding.dfs`) share :class:`SearchBudget` (a node
count for determinism, and a time budget read from an injected clock) and
return a :class:`SolveResult`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError, PlanError


@dataclass(frozen=True)
class ScheduleProblem:
    """Eq. 1–3's inputs: per task, the candidate sender hosts with the task's
    duration from each, the receiver hosts, and its device count (the greedy
    search's weight)."""

    sender_hosts: tuple[tuple[int, ...], ...]
    durations: tuple[tuple[float, ...], ...]
    receiver_hosts: tuple[tuple[int, ...], ...]
    devices: tuple[int, ...]

    def __post_init__(self) -> None:
        n = len(self.sender_hosts)
        if not (len(self.durations) == len(self.receiver_hosts) == len(self.devices) == n):
            raise InvalidInputError("a schedule problem needs senders, durations, receivers and devices per task")
        for i in range(n):
            hosts, times = self.sender_hosts[i], self.durations[i]
            if not hosts or len(hosts) != len(times) or len(set(hosts)) != len(hosts):
                raise InvalidInputError(f"task {i}: needs distinct candidate sender hosts, one duration each")
            if any(not math.isfinite(t) or t < 0 for t in times):
                raise InvalidInputError(f"task {i}: durations {times} must be finite and >= 0")
            if not self.receiver_hosts[i]:
                raise InvalidInputError(f"task {i}: needs at least one receiver host")

    @property
    def size(self) -> int:
        return len(self.sender_hosts)

    def duration(self, task: int, host: int) -> float:
        try:
            return self.durations[task][self.sender_hosts[task].index(host)]
        except ValueError:
            raise PlanError(f"task {task}: host {host} does not hold its slice "
                            f"(candidates {list(self.sender_hosts[task])})") from None

    def min_duration(self, task: int) -> float:
        return min(self.durations[task])

    @property
    def all_sender_hosts(self) -> tuple[int, ...]:
        return tuple(sorted({h for hosts in self.sender_hosts for h in hosts}))

    @property
    def all_receiver_hosts(self) -> tuple[int, ...]:
        return tuple(sorted({h for hosts in self.receiver_hosts for h in hosts}))


@dataclass(frozen=True)
class Schedule:
    """A sender host per task and a global order (a permutation of the tasks)."""

    senders: tuple[int, ...]
    order: tuple[int, ...]

    def __str__(self) -> str:
        return f"order {','.join(map(str, self.order))} senders {','.join(f'h{h}' for h in self.senders)}"

    @classmethod
    def parse(cls, text: str) -> Schedule:
        match = re.fullmatch(r"\s*order\s+([\d,]*)\s+senders\s+([h\d,]*)\s*", text)
        if not match:
            raise InvalidInputError(f"schedule {text!r} is not 'order 0,1,... senders h0,h1,...'")
        order = tuple(int(v) for v in match.group(1).split(",") if v)
        senders = []
        for part in (p for p in match.group(2).split(",") if p):
            if not re.fullmatch(r"h\d+", part):
                raise InvalidInputError(f"schedule {text!r}: sender {part!r} is not hHOST")
            senders.append(int(part[1:]))
        return cls(tuple(senders), order)


@dataclass(frozen=True)
class Timeline:
    """Start and finish of every task (indexed by task) and the makespan (Eq. 1)."""

    starts: tuple[float, ...]
    finishes: tuple[float, ...]

    @property
    def makespan(self) -> float:
        return max(self.finishes, default=0.0)


def check_schedule(problem: ScheduleProblem, schedule: Schedule) -> None:
    """Raise :class:`PlanError` unless ``schedule`` is a valid solution (Eq. 2, a permutation)."""
    if sorted(schedule.order) != list(range(problem.size)):
        raise PlanError(f"schedule order {list(schedule.order)} is not a permutation of {problem.size} tasks")
    if len(schedule.senders) != problem.size:
        raise PlanError(f"schedule has {len(schedule.senders)} senders for {problem.size} tasks")
    for task, host in enumerate(schedule.senders):
        problem.duration(task, host)


def evaluate(problem: ScheduleProblem, schedule: Schedule) -> Timeline:
    """Time ``schedule`` by the start rule of the module docstring."""
    check_schedule(problem, schedule)
    send_free: dict[int, float] = {}
    recv_free: dict[int, float] = {}
    starts = [0.0] * problem.size
    finishes = [0.0] * problem.size
    for task in schedule.order:
        host = schedule.senders[task]
        start = max([send_free.get(host, 0.0), *(recv_free.get(r, 0.0) for r in problem.receiver_hosts[task])])
        finish = start + problem.duration(task, host)
        send_free[host] = finish
        for r in problem.receiver_hosts[task]:
            recv_free[r] = finish
        starts[task], finishes[task] = start, finish
    return Timeline(tuple(starts), tuple(finishes))


def makespan(problem: ScheduleProblem, schedule: Schedule) -> float:
    return evaluate(problem, schedule).makespan


@dataclass(frozen=True)
class SearchBudget:
    """How long a search may run: ``max_nodes`` search steps (deterministic) and,
    when a ``clock`` is given, ``seconds`` of it (the time is read only from the
    clock, so tests inject one)."""

    seconds: float = 1.0
    max_nodes: int = 100_000
    clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if not self.seconds > 0 or self.max_nodes < 1:
            raise InvalidInputError(f"search budget needs seconds > 0 and max_nodes >= 1, got {self.seconds} s "
                                    f"and {self.max_nodes} nodes")

    def split(self, share: float) -> SearchBudget:
        """A budget with ``share`` of this one's time and nodes."""
        return SearchBudget(self.seconds * share, max(1, int(self.max_nodes * share)), self.clock)

    def meter(self) -> Meter:
        return Meter(self)


class Meter:
    """Counts a search's nodes against its budget (reads the clock every 256 nodes)."""

    def __init__(self, budget: SearchBudget) -> None:
        self.budget = budget
        self.nodes = 0
        self.stopped_by = ""
        self._began = budget.clock() if budget.clock else 0.0

    def tick(self) -> bool:
        """Count one node; ``False`` once the budget is spent."""
        if self.stopped_by:
            return False
        self.nodes += 1
        if self.nodes >= self.budget.max_nodes:
            self.stopped_by = "nodes"
        elif self.budget.clock is not None and self.nodes % 256 == 0 \
                and self.budget.clock() - self._began >= self.budget.seconds:
            self.stopped_by = "time"
        return not self.stopped_by


@dataclass(frozen=True)
class SolveResult:
    """A solver's answer: the schedule, its makespan, the nodes it searched,
    whether the search proved it optimal, and what stopped it ("done",
    "nodes", "time")."""

    schedule: Schedule
    makespan: float
    nodes: int = 0
    optimal: bool = False
    stopped_by: str = "done"


def result_of(problem: ScheduleProblem, schedule: Schedule, *, nodes: int = 0, optimal: bool = False,
              stopped_by: str = "done") -> SolveResult:
    return SolveResult(schedule, makespan(problem, schedule), nodes, optimal, stopped_by)


def better(results: Sequence[SolveResult]) -> SolveResult:
    """The result with the smallest makespan (the first among equals)."""
    return min(results, key=lambda r: r.makespan)
