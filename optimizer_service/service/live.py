"""What a job is doing now, from its ranks' telemetry: the dashboard's live data.

Every rank sends one Telemetry message per iteration. :class:`IterationGatherer`
groups them by iteration index into one :class:`JobIteration` per index — the
job's iteration time is the *mean* over ranks of each rank's
boundary-to-boundary time (over a run every rank's sum is the job's wall time;
the mean is the least noisy estimate of it), the dispatcher wait the mean of
the ranks' waits. An index is complete once every rank reported it, or once
some rank is :data:`STALE_ITERATIONS` ahead (a rank's telemetry queue
overflowed, or a rank is gone): then with the ranks that did report. The
replanning policy and the measured iteration time
(:mod:`optimizer_service.service.iteration_time`) read the same iterations.

:class:`LiveView` keeps, per job and bounded in memory: the last
:data:`HISTORY` iterations, each rank's last report, the dispatcher's wait per
op and channel since the running plan started, and each rank's last
iteration's op and motif timeline (for the measured Gantt). What one report
adds to the metrics is :func:`channel_waits` and :func:`op_counts`.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

STALE_ITERATIONS = 8        # complete an index with the ranks that reported once a rank is this far ahead
HISTORY = 1_000             # job iterations a view keeps
LAG_ITERATIONS = 3          # a rank this many iterations behind the job's newest is lagging
SILENT_SECONDS = 10.0       # a connected rank that sent nothing for this long is lagging
MAX_TIMELINE_RANKS = 8      # ranks whose last iteration's timeline is kept (the lowest ranks)


@dataclass(frozen=True)
class JobIteration:
    """One iteration of the job: the mean over the ranks that reported it."""

    index: int
    unix: float
    seconds: float
    wait_seconds: float
    version: int                                     # the version most ranks ran
    channels: tuple[tuple[int, float], ...] = ()     # (channel, mean motif seconds)
    ranks: int = 0

    def to_dict(self) -> dict:
        return {"iteration": self.index, "unix": self.unix, "seconds": self.seconds,
                "wait_seconds": self.wait_seconds, "version": self.version, "ranks": self.ranks,
                "channels": {str(c): s for c, s in self.channels}}


@dataclass
class _Gather:
    seconds: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    channels: dict[int, list[float]] = field(default_factory=dict)


class IterationGatherer:
    """Telemetry by rank in, :class:`JobIteration` by index out, in order, each index once."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._pending: dict[int, _Gather] = {}
        self._done_up_to = -1
        self._highest = -1

    def add(self, rank: int, iteration: int, seconds: float, wait: float, version: int,
            channels: dict[int, float], unix: float) -> list[JobIteration]:
        if iteration <= self._done_up_to:
            return []
        gather = self._pending.setdefault(iteration, _Gather())
        if rank in gather.ranks:
            return []
        gather.ranks.add(rank)
        gather.seconds.append(seconds)
        gather.waits.append(wait)
        gather.versions.append(version)
        for channel, motif_seconds in channels.items():
            gather.channels.setdefault(channel, []).append(motif_seconds)
        self._highest = max(self._highest, iteration)
        done = []
        while self._pending:
            first = min(self._pending)
            gather = self._pending[first]
            if len(gather.ranks) < self.world_size and self._highest - first < STALE_ITERATIONS:
                break
            del self._pending[first]
            self._done_up_to = first
            version = max(set(gather.versions), key=gather.versions.count)
            means = tuple((c, statistics.fmean(values)) for c, values in sorted(gather.channels.items()))
            done.append(JobIteration(first, unix, statistics.fmean(gather.seconds), statistics.fmean(gather.waits),
                                     version, means, len(gather.ranks)))
        return done


@dataclass
class RankLive:
    """A rank's last report."""

    iteration: int = -1
    version: int = 0
    seconds: float = 0.0
    wait_seconds: float = 0.0
    unix: float = 0.0


@dataclass
class _WaitSum:
    seconds: float = 0.0
    motifs: int = 0


def op_label(kind: str, group_seq: int, group: tuple[int, ...], world_size: int) -> str:
    """A comm-op's short name: ``all_reduce#3`` on the world, ``all_reduce#3 [0,1]`` on a subgroup."""
    where = "" if len(group) in (0, world_size) else " [" + ",".join(map(str, group[:8])) + (
        ",…" if len(group) > 8 else "") + "]"
    return f"{kind}#{group_seq}{where}"


class LiveView:
    """One job's live state (see the module docstring); bounded in memory."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.gatherer = IterationGatherer(world_size)
        self.history: deque[JobIteration] = deque(maxlen=HISTORY)
        self.ranks: dict[int, RankLive] = {}
        self.waits: dict[tuple[str, int], _WaitSum] = {}
        self.waits_version = -1
        self.timelines: dict[int, dict] = {}

    def observe(self, rank: int, message, unix: float) -> list[JobIteration]:
        """Take one rank's Telemetry: the job iterations it completed, in index order."""
        info = self.ranks.setdefault(rank, RankLive())
        info.iteration = max(info.iteration, message.iteration)
        info.version, info.seconds, info.wait_seconds, info.unix = (message.running_version, message.duration_seconds,
                                                                    message.wait_seconds, unix)
        if message.running_version != self.waits_version:
            self.waits, self.waits_version = {}, message.running_version
        ops = {op.seq: op for op in message.ops}
        channel_seconds: dict[int, float] = {}
        for motif in message.motifs:
            channel_seconds[motif.channel] = channel_seconds.get(motif.channel, 0.0) + motif.duration_seconds
            op = ops.get(motif.op_seq)
            label = op_label(op.kind, op.group_seq, tuple(op.group), self.world_size) if op else f"op {motif.op_seq}"
            total = self.waits.setdefault((label, motif.channel), _WaitSum())
            total.seconds += motif.wait_seconds
            total.motifs += 1
        if rank < MAX_TIMELINE_RANKS or rank in self.timelines:
            self.timelines[rank] = _timeline(message, self.world_size)
        done = self.gatherer.add(rank, message.iteration, message.duration_seconds, message.wait_seconds,
                                 message.running_version, channel_seconds, unix)
        self.history.extend(done)
        return done

    def lagging(self, connected: set[int], now: float) -> set[int]:
        """Ranks behind the job's newest iteration by :data:`LAG_ITERATIONS`, or silent too long."""
        newest = max((info.iteration for info in self.ranks.values()), default=-1)
        late = {rank for rank, info in self.ranks.items() if newest - info.iteration >= LAG_ITERATIONS}
        silent = {rank for rank in connected & self.ranks.keys() if now - self.ranks[rank].unix > SILENT_SECONDS}
        return late | silent

    def wait_table(self) -> list[dict]:
        """Mean dispatcher wait per motif, per op and channel, since the running plan started, largest first."""
        rows = [{"op": label, "channel": channel, "motifs": total.motifs, "wait_seconds": total.seconds,
                 "mean_wait_seconds": total.seconds / total.motifs if total.motifs else 0.0}
                for (label, channel), total in self.waits.items()]
        return sorted(rows, key=lambda row: (-row["wait_seconds"], row["op"], row["channel"]))


def channel_waits(message) -> dict[int, float]:
    """A Telemetry's dispatcher waits, summed per channel."""
    waits: dict[int, float] = {}
    for motif in message.motifs:
        waits[motif.channel] = waits.get(motif.channel, 0.0) + motif.wait_seconds
    return waits


def op_counts(message) -> dict[tuple[str, bool], int]:
    """A Telemetry's comm-ops counted by (kind, whether a plan ran them)."""
    counts: dict[tuple[str, bool], int] = {}
    for op in message.ops:
        counts[op.kind, op.enforced] = counts.get((op.kind, op.enforced), 0) + 1
    return counts


def _timeline(message, world_size: int) -> dict:
    """A rank's iteration as lanes of intervals (seconds from its start): ops, and motifs per channel."""
    ops = [{"label": op_label(op.kind, op.group_seq, tuple(op.group), world_size), "seq": op.seq,
            "start": op.issue_seconds, "end": max(op.complete_seconds, op.issue_seconds), "planned": op.enforced,
            "bytes": op.bytes}
           for op in message.ops]
    labels = {op["seq"]: op["label"] for op in ops}
    motifs = [{"label": labels.get(m.op_seq, f"op {m.op_seq}"), "order": m.order, "channel": m.channel,
               "start": m.start_seconds, "end": m.start_seconds + m.duration_seconds, "wait": m.wait_seconds}
              for m in message.motifs]
    return {"iteration": message.iteration, "version": message.running_version,
            "seconds": message.duration_seconds, "ops": ops, "motifs": motifs}
