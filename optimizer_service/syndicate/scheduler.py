"""optSched: Syndicate's greedy critical-path list scheduler (Pseudocode 1, §4.3.1),
and the orders of the baselines it is compared with (§6.4).

Input: a DAG of tasks. A task is compute (it runs on a compute stream) or a
communication motif (it runs on its channel; a channel runs at most
``capacity`` motifs at a time), with a duration and predecessors. Output: when
every task starts and ends, the iteration time (the last end), and the
scheduling order the enforcer installs (sequence numbers).

**Compute streams.** Syndicate plans one rank's view of a data-parallel job:
one compute stream, :data:`COMPUTE`. A job whose devices compute different
things at once (a pipeline's stages, each on its own mesh) gives each its own
stream: stream ``k`` is the channel value ``COMPUTE - k``
(:func:`stream_channel`; every negative channel is a compute stream, every
channel >= 0 a topology's). Each stream runs one task at a time, FIFO, as the
one stream does below; streams run beside each other.

**Lanes.** Likewise one channel carries every motif of a rank's
communicators. Comm-ops whose motifs travel disjoint paths (a pipeline's
directed edges, each between two meshes) may name lanes: the motifs of lane
``l`` on channel ``c`` run on :func:`lane_channel` ``(c, l)``, a channel of
its own to this scheduler, beside the other lanes'.

Pseudocode 1 alternates between dequeuing compute tasks FIFO while the compute
stream is behind and dequeuing communication motifs by critical path while
communication is behind. Our reading, as an event-driven list scheduler that
does exactly that without the text's garbled loop structure:

* a task is *released* when all its predecessors have ended;
* every resource (each compute stream, each channel) is work-conserving: when
  it is free and some of its tasks are released, it starts one of them;
* a compute stream takes its released compute tasks FIFO (by release time,
  then index); a channel takes, by :class:`Policy`,

  - ``critical-path`` (optSched): the motif with the longest path to the end
    of the DAG (its duration plus the longest chain of successors, the
    "bottom level");
  - ``lifo`` (ByteScheduler, BS+): the motif of the most recently submitted
    comm-op (largest ``program`` index), an op's motifs in index order;
  - ``fifo`` (today's stack, and S-Exec): motifs strictly in ``program``
    order across all channels — a motif does not start before the one before
    it has started, as when one thread issues them in order;

* decisions are taken in time order: of all resources, the one that can start
  a task earliest goes first (compute before channels on ties, as the
  pseudocode runs compute first; stream 0 first, then 1, ...; channels in
  increasing value). A task released later has a predecessor
  that ends later, so no decision is ever taken without the tasks it could
  have chosen.

**Interference** (our addition; Syndicate §6.6 calls the channel of NCCL
"GPU-driven" and that of UCC "CPU-driven"): a GPU-driven collective runs
kernels that hold some of the GPU's SMs, so compute overlapped with it runs
slower, while a host-staged transfer leaves them free. ``slowdown`` gives
each channel ``s`` such that compute takes ``1 + s`` times as long while one
of its motifs runs, ``1 + s₁ + s₂ + …`` while several do: the compute task
progresses at rate ``1 / (1 + Σ s)``, piecewise between motif starts and
ends. A compute task's end is therefore known only once no motif can start
before it: a stream's running task ends as an event, taken before any
decision at or after its projected end (the earliest end first, the lower
stream on ties), and only then releases its successors. Motifs are not
slowed by compute, and the critical-path priorities use the durations as
given. With no slowdown every task takes exactly its duration. With several
compute streams a motif slows every one of them: the scheduler does not know
which devices a stream stands for, so it takes the pessimistic reading.

Sequence numbers follow start times; motifs that start at the same instant on
different channels share a number — they are meant to overlap (§4.4, "two or
more motifs can be assigned the same priority").

:func:`schedule` takes :class:`Task` values; :class:`Graph` is the same DAG
compiled once into flat lists, which the search re-times many times
(:meth:`Graph.run` with new durations) without building objects.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from optimizer_service.errors import InvalidInputError
from optimizer_service.syndicate.toposort import topological_order

COMPUTE = -1  # the channel value of compute tasks (on stream 0)


def stream_channel(stream: int) -> int:
    """The channel value of compute stream ``stream`` (0: :data:`COMPUTE`)."""
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
        raise InvalidInputError(f"compute stream {stream!r} must be a whole number >= 0")
    return COMPUTE - stream


def stream_of(channel: int) -> int:
    """The compute stream of a negative channel value (the inverse of :func:`stream_channel`)."""
    return COMPUTE - channel


#: Lane ``l`` of channel ``c`` is the scheduler channel ``c + l * LANE_STRIDE`` (topology channels stay below it).
LANE_STRIDE = 1 << 16


def lane_channel(channel: int, lane: int) -> int:
    """The scheduler channel of ``channel``'s lane ``lane`` (lane 0: the channel itself)."""
    return channel + lane * LANE_STRIDE


def channel_and_lane(value: int) -> tuple[int, int]:
    """The topology channel and lane of a scheduler channel >= 0 (the inverse of :func:`lane_channel`)."""
    return value % LANE_STRIDE, value // LANE_STRIDE


class Policy(str, Enum):
    CRITICAL_PATH = "critical-path"
    LIFO = "lifo"
    FIFO = "fifo"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Task:
    name: str
    seconds: float
    channel: int = COMPUTE          # a compute stream (< 0, stream_channel), or the motif's channel
    after: tuple[int, ...] = ()     # indices of predecessor tasks
    program: int = -1               # submission order (-1: the task's index)

    @property
    def is_compute(self) -> bool:
        return self.channel < 0


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
        """The share of compute-stream time idle, over every stream that has a task."""
        busy = sum(self.end[i] - self.start[i] for i, t in enumerate(tasks) if t.is_compute)
        streams = max(1, len({t.channel for t in tasks if t.is_compute}))
        return 1.0 - busy / (self.seconds * streams) if self.seconds > 0 else 0.0


def bottom_levels(tasks: Sequence[Task]) -> list[float]:
    """Each task's duration plus the longest chain of successors after it."""
    graph = Graph.of(tasks)
    return graph.bottom_levels([t.seconds for t in tasks])


def schedule(tasks: Sequence[Task], capacity: int = 1, policy: Policy = Policy.CRITICAL_PATH,
             slowdown: Mapping[int, float] | None = None) -> Schedule:
    """Schedule ``tasks`` (module docstring); every channel runs ``capacity`` motifs at once;
    ``slowdown``: channel -> how much longer compute takes while one of its motifs runs."""
    for task in tasks:
        if not task.seconds >= 0:
            raise InvalidInputError(f"task {task.name!r} has duration {task.seconds!r}; it must be >= 0")
    graph = Graph.of(tasks)
    start, end, order = graph.run([t.seconds for t in tasks], capacity, policy, slowdown)
    return Schedule(tuple(start), tuple(end), tuple(order), graph.sequence(start, order))


class Graph:
    """A task DAG compiled for repeated scheduling: successor lists, in-degrees,
    resources, and a topological order, all as flat lists. ``streams`` are the
    compute channels present (:data:`COMPUTE` if none), stream 0 first;
    ``channels`` the motif channels, ascending."""

    def __init__(self, channel: Sequence[int], after: Sequence[Sequence[int]], program: Sequence[int],
                 names: Sequence[str] | None = None, ordered: bool = False) -> None:
        """``ordered``: every task's predecessors come before it (the caller built
        the list in a topological order), which skips the sort and the checks."""
        n = len(channel)
        self.size = n
        self.channel = list(channel)
        self.program = list(program)
        self.names = list(names) if names is not None else [f"task {i}" for i in range(n)]
        self.successors: list[list[int]] = [[] for _ in range(n)]
        self.indegree = [0] * n
        self._fifo: list[int] | None = None
        if ordered:
            successors, indegree = self.successors, self.indegree
            for index, before in enumerate(after):
                for b in before:
                    successors[b].append(index)
                indegree[index] = len(before)
            self.topological = range(n)
            self._resources()
            return
        for index, before in enumerate(after):
            for b in set(before):
                if not 0 <= b < n:
                    raise InvalidInputError(f"{self.names[index]!r} depends on task {b}, which does not exist")
                self.successors[b].append(index)
                self.indegree[index] += 1
        order, stuck = topological_order(self.successors)
        if stuck is not None:
            raise InvalidInputError(f"the task graph has a cycle (through {self.names[stuck]!r})")
        self.topological = order
        self._resources()

    def _resources(self) -> None:
        values = set(self.channel)
        self.streams = sorted((c for c in values if c < 0), reverse=True) or [COMPUTE]
        self.channels = sorted(c for c in values if c >= 0)

    @property
    def fifo(self) -> list[int]:
        """FIFO issue order of the motifs: by submission index, then task index."""
        if self._fifo is None:
            self._fifo = sorted((i for i in range(self.size) if self.channel[i] >= 0),
                                key=lambda i: (self.program[i], i))
        return self._fifo

    @classmethod
    def of(cls, tasks: Sequence[Task]) -> Graph:
        return cls([t.channel for t in tasks], [t.after for t in tasks],
                   [t.program if t.program >= 0 else i for i, t in enumerate(tasks)], [t.name for t in tasks])

    def bottom_levels(self, seconds: Sequence[float]) -> list[float]:
        level = [0.0] * self.size
        successors = self.successors
        for index in reversed(self.topological):
            best = 0.0
            for s in successors[index]:
                if level[s] > best:
                    best = level[s]
            level[index] = seconds[index] + best
        return level

    def run(self, seconds: Sequence[float], capacity: int = 1, policy: Policy = Policy.CRITICAL_PATH,
            slowdown: Mapping[int, float] | None = None) -> tuple[list[float], list[float], list[int]]:
        """``(start, end, order)`` of every task under ``policy`` (module docstring);
        ``slowdown``: channel -> how much longer compute takes while one of its
        motifs runs ("Interference" in the module docstring)."""
        if capacity < 1:
            raise InvalidInputError(f"channel capacity {capacity} must be at least 1")
        n = self.size
        channel, successors, program = self.channel, self.successors, self.program
        waiting = list(self.indegree)
        release = [0.0] * n
        start = [0.0] * n
        end = [0.0] * n
        order: list[int] = []
        push, pop = heapq.heappush, heapq.heappop
        if policy is Policy.CRITICAL_PATH:
            level = self.bottom_levels(seconds)
            key = [(-level[i], i) for i in range(n)]
        else:
            key = [(-program[i], i) for i in range(n)]
        # resource slots 0..streams-1 are the compute streams, then the channels
        streams = len(self.streams)
        slot_of = {c: k for k, c in enumerate(self.streams)}
        slot_of.update({c: streams + k for k, c in enumerate(self.channels)})
        resource = [slot_of[c] for c in channel]
        count = streams + len(self.channels)
        drag = [0.0] * streams + [float((slowdown or {}).get(c, 0.0)) for c in self.channels]
        for c, s in zip(self.channels, drag[streams:]):
            if not 0.0 <= s < math.inf:
                raise InvalidInputError(f"channel {c} has compute slowdown {s!r}; it must be a number >= 0")
        # A task's priority on its resource: compute FIFO (release, index), a channel by ``key``.
        pending: list[list] = [[] for _ in range(count)]     # (release, priority, index): predecessors done
        ready: list[list] = [[] for _ in range(count)]       # (priority, index): released by the resource's time
        free = [[0.0] * (1 if r < streams else capacity) for r in range(count)]
        fifo = policy is Policy.FIFO
        fifo_order, head, last_issue = (self.fifo if fifo else []), 0, 0.0
        clock = 0.0     # decisions are taken in time order; no start is earlier than the last
        known = [False] * n
        computing = [_Computing() for _ in range(streams)]
        running = 0     # streams with a task

        def arrive(i: int) -> None:
            r = resource[i]
            if fifo and r >= streams:
                known[i] = True
            else:
                push(pending[r], (release[i], key[i] if r >= streams else (release[i], i), i))

        def drain(r: int, until: float) -> None:
            waiting_queue, queue = pending[r], ready[r]
            while waiting_queue and waiting_queue[0][0] <= until:
                _, priority, i = pop(waiting_queue)
                push(queue, (priority, i))

        def ended(i: int, finish: float) -> None:
            for s in successors[i]:
                if finish > release[s]:
                    release[s] = finish
                waiting[s] -= 1
                if waiting[s] == 0:
                    arrive(s)

        for i in range(n):
            if waiting[i] == 0:
                arrive(i)
        while len(order) < n or running:
            best_time, best_resource = None, -1
            for r in range(count):
                if (fifo and r >= streams) or (r < streams and computing[r].task >= 0):
                    continue
                now = min(free[r])
                if now < clock:
                    now = clock
                drain(r, now)
                if ready[r]:
                    t = now
                elif pending[r]:
                    t = pending[r][0][0]
                else:
                    continue
                if best_time is None or t < best_time:
                    best_time, best_resource = t, r
            if fifo and head < len(fifo_order) and known[fifo_order[head]]:
                i = fifo_order[head]
                slots = free[resource[i]]
                t = max(release[i], min(slots), last_issue, clock)
                if best_time is None or t < best_time:
                    best_time, best_resource = t, -2
            if running:
                first, finish = -1, math.inf
                for r in range(streams):
                    if computing[r].task >= 0:
                        f = computing[r].finish()
                        if first < 0 or f < finish:
                            first, finish = r, f
                if best_time is None or finish <= best_time:    # it ends first: release what waits for it
                    i = computing[first].task
                    computing[first].task = -1
                    running -= 1
                    end[i] = finish
                    free[first][0] = finish
                    ended(i, finish)
                    continue
            if best_time is None:
                raise InvalidInputError("no task can start: the FIFO order waits for a motif whose "
                                        "predecessors come after it in submission order")
            if best_resource == -2:
                i = fifo_order[head]
                head += 1
                last_issue = best_time
            else:
                r = best_resource
                drain(r, best_time)            # it may start a task released only now
                i = pop(ready[r])[1]
            clock = best_time
            start[i] = best_time
            order.append(i)
            r = resource[i]
            if r < streams:
                computing[r].begin(i, best_time, seconds[i])
                running += 1
                continue
            finish = best_time + seconds[i]
            end[i] = finish
            slots = free[r]
            slots[slots.index(min(slots))] = finish
            if drag[r] > 0.0:
                for stream in computing:
                    stream.interfere(best_time, finish, drag[r])
            ended(i, finish)
        return start, end, order

    def sequence(self, start: Sequence[float], order: Sequence[int]) -> dict[int, int]:
        """Motif index -> sequence number: by start time; equal starts share a number."""
        position = {index: k for k, index in enumerate(order)}
        motifs = sorted((i for i in order if self.channel[i] >= 0), key=lambda i: (start[i], position[i]))
        sequence: dict[int, int] = {}
        number, previous = -1, None
        for i in motifs:
            if start[i] != previous:
                number, previous = number + 1, start[i]
            sequence[i] = number
        return sequence


class _Computing:
    """A compute stream's running task under interference: the base seconds
    of it left at ``since``, and the motifs running that slow it (their ends,
    ascending, and drags), so its end is known only as far as the motifs that
    started so far go ("Interference" in the module docstring)."""

    __slots__ = ("task", "since", "work", "motifs")

    def __init__(self) -> None:
        self.task = -1
        self.since = 0.0
        self.work = 0.0
        self.motifs: list[tuple[float, float]] = []   # (end, drag), by end, then start

    def _drop_ended(self, now: float) -> None:
        motifs = self.motifs
        k = 0
        while k < len(motifs) and motifs[k][0] <= now:
            k += 1
        if k:
            del motifs[:k]

    def begin(self, task: int, now: float, seconds: float) -> None:
        self._drop_ended(now)
        self.task, self.since, self.work = task, now, seconds

    def interfere(self, now: float, end: float, drag: float) -> None:
        """A motif that slows compute by ``drag`` runs from ``now`` to ``end``."""
        if self.task >= 0:
            self.work = self._walk(now)[1]
            self.since = now
        self._drop_ended(now)
        motifs = self.motifs
        k = len(motifs)
        while k > 0 and motifs[k - 1][0] > end:
            k -= 1
        motifs.insert(k, (end, drag))

    def _walk(self, until: float) -> tuple[float, float]:
        """Run the task on from ``since`` through the running motifs' ends:
        ``(time, base seconds left)`` at ``until`` or at its end, whichever is
        first (``until = inf``: at its end)."""
        t, work, motifs = self.since, self.work, self.motifs
        k = 0
        while True:
            while k < len(motifs) and motifs[k][0] <= t:
                k += 1
            drag = 0.0
            for j in range(k, len(motifs)):
                drag += motifs[j][1]
            stop = motifs[k][0] if k < len(motifs) and motifs[k][0] < until else until
            need = work * (1.0 + drag)
            if need <= stop - t:
                return t + need, 0.0
            work -= (stop - t) / (1.0 + drag)
            if work < 0.0:
                work = 0.0
            t = stop
            if t == until:
                return t, work

    def finish(self) -> float:
        """When the running task ends if no further motif starts."""
        return self._walk(math.inf)[0]
