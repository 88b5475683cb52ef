"""optSched: Syndicate's greedy critical-path list scheduler (Pseudocode 1, §4.3.1).

Input: a DAG of tasks. A task is compute (it runs on the one compute stream)
or a communication motif (it runs on its channel; a channel runs at most
``capacity`` motifs at a time), with a duration and predecessors. Output: when
every task starts and ends, the iteration time (the last end), and the
scheduling order the enforcer installs (sequence numbers).

Pseudocode 1 alternates between dequeuing compute tasks FIFO while the compute
stream is behind and dequeuing communication motifs by critical path while
communication is behind. Our reading, as an event-driven list scheduler that
does exactly that without the text's garbled loop structure:

* a task is *ready* when all its predecessors are scheduled; its earliest
  start is the latest end among them;
* the compute stream takes ready compute tasks in FIFO order (the order in
  which they became ready, then their index), each when the stream is free;
* each channel takes, among its ready motifs, the one with the longest
  critical path to the end of the DAG (its duration plus the longest chain of
  successors, the "bottom level"), each in its earliest free slot;
* of all the resources, the one that can start a task earliest goes first
  (compute before communication on ties, as the pseudocode runs compute first).

Sequence numbers follow start times; motifs that start at the same instant on
different channels share a number — they are meant to overlap (§4.4, "two or
more motifs can be assigned the same priority").
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from optimizer_service.errors import InvalidInputError
from optimizer_service.graph import topological_order

COMPUTE = -1  # the channel value of compute tasks


@dataclass(frozen=True)
class Task:
    name: str
    seconds: float
    channel: int = COMPUTE          # COMPUTE, or the motif's channel
    after: tuple[int, ...] = ()     # indices of predecessor tasks

    @property
    def is_compute(self) -> bool:
        return self.channel == COMPUTE


@dataclass(frozen=True)
class Schedule:
    start: tuple[float, ...]
    end: tuple[float, ...]
    order: tuple[int, ...]            # task indices in the order they were scheduled
    sequence: dict[int, int] = field(default_factory=dict)  # motif index -> sequence number

    @property
    def seconds(self) -> float:
        return max(self.end, default=0.0)

    def compute_idle_fraction(self, tasks: Sequence[Task]) -> float:
        busy = sum(t.seconds for t in tasks if t.is_compute)
        return 1.0 - busy / self.seconds if self.seconds > 0 else 0.0


def bottom_levels(tasks: Sequence[Task]) -> list[float]:
    """Each task's duration plus the longest chain of successors after it."""
    return _bottom_levels(tasks, _successors(tasks))


def _bottom_levels(tasks: Sequence[Task], successors: list[list[int]]) -> list[float]:
    level = [0.0] * len(tasks)
    for index in reversed(_topological(tasks, successors)):
        level[index] = tasks[index].seconds + max((level[s] for s in successors[index]), default=0.0)
    return level


def _successors(tasks: Sequence[Task]) -> list[list[int]]:
    successors: list[list[int]] = [[] for _ in tasks]
    for index, task in enumerate(tasks):
        for before in set(task.after):
            if not 0 <= before < len(tasks):
                raise InvalidInputError(f"task {task.name!r} depends on task {before}, which does not exist")
            successors[before].append(index)
    return successors


def _topological(tasks: Sequence[Task], successors: list[list[int]]) -> list[int]:
    order, stuck = topological_order(successors)
    if stuck is not None:
        raise InvalidInputError(f"the task graph has a cycle (through {tasks[stuck].name!r})")
    return order


def schedule(tasks: Sequence[Task], capacity: int = 1) -> Schedule:
    """Schedule ``tasks`` (module docstring); every channel runs ``capacity`` motifs at once."""
    if capacity < 1:
        raise InvalidInputError(f"channel capacity {capacity} must be at least 1")
    for task in tasks:
        if not task.seconds >= 0:
            raise InvalidInputError(f"task {task.name!r} has duration {task.seconds!r}; it must be >= 0")
    successors = _successors(tasks)
    level = _bottom_levels(tasks, successors)
    waiting = [len(set(t.after)) for t in tasks]
    release = [0.0] * len(tasks)
    start = [0.0] * len(tasks)
    end = [0.0] * len(tasks)
    compute_free = 0.0
    slots: dict[int, list[float]] = {}
    ready_compute: list[tuple[float, int, int]] = []      # (release, arrival, index): FIFO
    ready_comm: dict[int, list[int]] = {}
    arrivals = 0

    def make_ready(index: int) -> None:
        nonlocal arrivals
        task = tasks[index]
        if task.is_compute:
            heapq.heappush(ready_compute, (release[index], arrivals, index))
            arrivals += 1
        else:
            ready_comm.setdefault(task.channel, []).append(index)
            slots.setdefault(task.channel, [0.0] * capacity)

    for index, count in enumerate(waiting):
        if count == 0:
            make_ready(index)
    order: list[int] = []
    while len(order) < len(tasks):
        best: tuple[float, int, int] | None = None   # (start, resource rank, index)
        if ready_compute:
            _, _, index = ready_compute[0]
            best = (max(compute_free, release[index]), 0, index)
        for channel, candidates in ready_comm.items():
            if not candidates:
                continue
            free = min(slots[channel])
            index = min(candidates, key=lambda i: (max(free, release[i]), -level[i], i))
            option = (max(free, release[index]), 1, index)
            if best is None or option[:2] < best[:2]:
                best = option
        assert best is not None, "ready tasks exist while the graph is acyclic"
        begin, _, index = best
        task = tasks[index]
        if task.is_compute:
            heapq.heappop(ready_compute)
            compute_free = begin + task.seconds
        else:
            ready_comm[task.channel].remove(index)
            free = slots[task.channel]
            free[free.index(min(free))] = begin + task.seconds
        start[index], end[index] = begin, begin + task.seconds
        order.append(index)
        for s in successors[index]:
            release[s] = max(release[s], end[index])
            waiting[s] -= 1
            if waiting[s] == 0:
                make_ready(s)
    position = {index: k for k, index in enumerate(order)}
    motifs = sorted((i for i in order if not tasks[i].is_compute), key=lambda i: (start[i], position[i]))
    sequence: dict[int, int] = {}
    number, previous = -1, None
    for i in motifs:
        if start[i] != previous:
            number, previous = number + 1, start[i]
        sequence[i] = number
    return Schedule(tuple(start), tuple(end), tuple(order), sequence)
