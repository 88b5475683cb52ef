"""Depth-first search over sender assignments and orders with lower-bound
pruning (Zhuang et al., MLSys 2023, §3.2 "DFS with pruning"), and the
exhaustive search it is tested against.

The search tree appends one (task, sender host) at a time to a global order;
a task's start is fixed when it is appended (the start rule of
:mod:`optimizer_service.resharding.schedule`), so a leaf is a complete
schedule timed exactly as :func:`evaluate` times it. Children are tried
earliest start first, then longest task, so the first dive is a list schedule.

**Pruning.** A node is cut when its lower bound reaches the best makespan
found. The bound (Eq. 4's "sum of task durations on a single device",
extended) is the largest of: the makespan so far; for every receiver host,
when it is free plus the durations of the unscheduled tasks it receives; for
every sender host, when it is free plus the unscheduled tasks only it can
send; the sender hosts' average (their free times plus every unscheduled
task's shortest duration, over the number of sender hosts); and, for every
unscheduled task, its earliest possible finish. Durations of a task are the
shortest over its candidate hosts, so each term is a valid bound.

**Symmetry.** Tasks identical in hosts, durations and devices are
interchangeable: only the lowest-indexed unscheduled member of such a class is
branched on, which removes orderings that give the same schedule.

**Budget.** :class:`SearchBudget`: nodes (deterministic) and, with a clock,
seconds. The result says whether the search finished (then the schedule is
optimal) or what stopped it. The tree is walked with an explicit stack, so
thousands of tasks need no deep recursion.
"""

from __future__ import annotations

import itertools
import math

from optimizer_service.errors import SearchBoundError
from optimizer_service.resharding.schedule import (
    ScheduleProblem,
    Schedule,
    SearchBudget,
    SolveResult,
    makespan,
)

_EPS = 1e-12


def task_classes(problem: ScheduleProblem) -> list[list[int]]:
    """Tasks grouped by identity (hosts, durations, devices), each class in index order."""
    classes: dict[tuple, list[int]] = {}
    for task in range(problem.size):
        key = (problem.sender_hosts[task], problem.durations[task], problem.receiver_hosts[task],
               problem.devices[task])
        classes.setdefault(key, []).append(task)
    return list(classes.values())


def schedule_lower_bound(problem: ScheduleProblem) -> float:
    """A lower bound on every schedule's makespan under the problem's durations."""
    recv: dict[int, float] = {}
    forced: dict[int, float] = {}
    for task in range(problem.size):
        shortest = problem.min_duration(task)
        for r in problem.receiver_hosts[task]:
            recv[r] = recv.get(r, 0.0) + shortest
        if len(problem.sender_hosts[task]) == 1:
            host = problem.sender_hosts[task][0]
            forced[host] = forced.get(host, 0.0) + shortest
    total = sum(problem.min_duration(t) for t in range(problem.size))
    terms = [0.0, *recv.values(), *forced.values(), total / max(1, len(problem.all_sender_hosts)),
             *(problem.min_duration(t) for t in range(problem.size))]
    return max(terms)


class _Search:
    def __init__(self, problem: ScheduleProblem) -> None:
        self.problem = problem
        self.classes = task_classes(problem)
        self.taken = [0] * len(self.classes)
        self.send_hosts = problem.all_sender_hosts
        self.send_free = {h: 0.0 for h in self.send_hosts}
        self.recv_free = {h: 0.0 for h in problem.all_receiver_hosts}
        self.rem_recv = {h: 0.0 for h in problem.all_receiver_hosts}
        self.rem_forced = {h: 0.0 for h in self.send_hosts}
        self.rem_total = 0.0
        for members in self.classes:
            task = members[0]
            shortest = problem.min_duration(task) * len(members)
            for r in problem.receiver_hosts[task]:
                self.rem_recv[r] += shortest
            if len(problem.sender_hosts[task]) == 1:
                self.rem_forced[problem.sender_hosts[task][0]] += shortest
            self.rem_total += shortest
        self.makespan = 0.0
        self.order: list[int] = []
        self.senders: dict[int, int] = {}

    def children(self) -> tuple[list[tuple[float, float, int, int, float]], float]:
        """Moves ``(start, -duration, class, host, finish)`` sorted, and the node's lower bound."""
        p = self.problem
        bound = max(self.makespan, *(self.recv_free[r] + self.rem_recv[r] for r in self.recv_free),
                    *(self.send_free[h] + self.rem_forced[h] for h in self.send_hosts),
                    (sum(self.send_free.values()) + self.rem_total) / len(self.send_hosts))
        moves = []
        for c, members in enumerate(self.classes):
            if self.taken[c] == len(members):
                continue
            task = members[self.taken[c]]
            ready = max(self.recv_free[r] for r in p.receiver_hosts[task])
            earliest = math.inf
            for host, duration in zip(p.sender_hosts[task], p.durations[task]):
                start = max(ready, self.send_free[host])
                moves.append((start, -duration, c, host, start + duration))
                earliest = min(earliest, start + duration)
            bound = max(bound, earliest)
        moves.sort()
        return moves, bound

    def apply(self, c: int, host: int, finish: float) -> tuple:
        p = self.problem
        task = self.classes[c][self.taken[c]]
        receivers = p.receiver_hosts[task]
        undo = (c, host, self.send_free[host], tuple(self.recv_free[r] for r in receivers), self.makespan, task)
        shortest = p.min_duration(task)
        self.taken[c] += 1
        self.send_free[host] = finish
        for r in receivers:
            self.recv_free[r] = finish
            self.rem_recv[r] -= shortest
        if len(p.sender_hosts[task]) == 1:
            self.rem_forced[host] -= shortest
        self.rem_total -= shortest
        self.makespan = max(self.makespan, finish)
        self.order.append(task)
        self.senders[task] = host
        return undo

    def revert(self, undo: tuple) -> None:
        c, host, send_free, recv_free, makespan_before, task = undo
        p = self.problem
        shortest = p.min_duration(task)
        self.taken[c] -= 1
        self.send_free[host] = send_free
        for r, free in zip(p.receiver_hosts[task], recv_free):
            self.recv_free[r] = free
            self.rem_recv[r] += shortest
        if len(p.sender_hosts[task]) == 1:
            self.rem_forced[host] += shortest
        self.rem_total += shortest
        self.makespan = makespan_before
        self.order.pop()
        del self.senders[task]


def dfs(problem: ScheduleProblem, *, budget: SearchBudget | None = None, seed: int = 0,
        incumbent: SolveResult | None = None) -> SolveResult:
    """The best schedule found by the pruned DFS (module docstring); never worse
    than ``incumbent`` when one is given. ``seed`` is unused (the search is
    deterministic) and accepted for the common solver signature."""
    meter = (budget or SearchBudget()).meter()
    best_schedule = incumbent.schedule if incumbent else None
    best = incumbent.makespan if incumbent else math.inf
    if problem.size == 0:
        return SolveResult(Schedule((), ()), 0.0, 0, True, "done")
    if best <= schedule_lower_bound(problem) * (1 + _EPS):
        return SolveResult(best_schedule, best, 0, True, "done")
    search = _Search(problem)
    moves, bound = search.children()
    if best <= bound * (1 + _EPS):
        return SolveResult(best_schedule, best, 0, True, "done")
    stack = [(moves, 0, None)]           # (moves of a node, next move to try, undo of the move that led here)
    while stack:
        moves, at, undo = stack[-1]
        if at == len(moves) or bound_cut(moves, at, best):
            stack.pop()
            if undo is not None:
                search.revert(undo)
            continue
        stack[-1] = (moves, at + 1, undo)
        start, _, c, host, finish = moves[at]
        if finish >= best * (1 - _EPS):
            continue
        if not meter.tick():
            break
        child_undo = search.apply(c, host, finish)
        if len(search.order) == problem.size:
            best = search.makespan
            best_schedule = Schedule(tuple(search.senders[t] for t in range(problem.size)), tuple(search.order))
            search.revert(child_undo)
            continue
        child_moves, child_bound = search.children()
        if child_bound >= best * (1 - _EPS):
            search.revert(child_undo)
            continue
        stack.append((child_moves, 0, child_undo))
    finished = not meter.stopped_by
    if best_schedule is None:              # the budget ended before the first leaf
        best_schedule = _dive(problem)
        best = makespan(problem, best_schedule)
    return SolveResult(best_schedule, best, meter.nodes, finished, meter.stopped_by or "done")


def _dive(problem: ScheduleProblem) -> Schedule:
    """The first leaf of the search: always the earliest-starting move (a list schedule)."""
    search = _Search(problem)
    while len(search.order) < problem.size:
        moves, _ = search.children()
        _, _, c, host, finish = moves[0]
        search.apply(c, host, finish)
    return Schedule(tuple(search.senders[t] for t in range(problem.size)), tuple(search.order))


def bound_cut(moves: list, at: int, best: float) -> bool:
    """The moves are sorted by start; none can finish sooner than ``best`` once
    every remaining start is past it."""
    return moves[at][0] >= best * (1 - _EPS)


def exhaustive(problem: ScheduleProblem, *, max_tasks: int = 7) -> tuple[Schedule, float]:
    """The optimal schedule by trying every order and sender assignment (tests' oracle)."""
    if problem.size > max_tasks:
        raise SearchBoundError(f"exhaustive search of {problem.size} tasks; at most {max_tasks}")
    best, best_schedule = math.inf, None
    for senders in itertools.product(*problem.sender_hosts):
        for order in itertools.permutations(range(problem.size)):
            schedule = Schedule(tuple(senders), order)
            value = makespan(problem, schedule)
            if value < best:
                best, best_schedule = value, schedule
    return best_schedule, best
