"""The replanning policy's state as values: one job's :class:`Policy` and the
parts it is made of (the running plan's :class:`Measurement`, the
:class:`Watches` on its medians, the :class:`Pending` search or commit, the
:class:`Trial` of a new plan), with the queries the service and the dashboard
read. The rules that move it are in :mod:`.policy`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace

from optimizer_service.control.hysteresis import Hysteresis
from optimizer_service.control.policy_config import PolicyConfig
from optimizer_service.control.triggers import Trigger

WAITING, SEARCHING, COMMITTING, EVALUATING = "waiting", "searching", "committing", "evaluating"


@dataclass(frozen=True)
class Pending:
    """The search (``request``; ``what`` is ``"searching"``) or commit
    (``version``; ``"committing"``) the policy waits for, since ``since``
    (seconds), and the trigger that started it; ``due``: the cluster change a
    :attr:`Trigger.CLUSTER` search answers."""

    what: str
    trigger: Trigger
    since: float
    request: int = 0
    version: int = 0
    due: str = ""

    def to_dict(self) -> dict:
        return {**asdict(self), "trigger": self.trigger.value}


@dataclass(frozen=True)
class Trial:
    """A committed plan under evaluation against the one that ran before it
    (its median then, in this cluster state; None: nothing to compare with);
    ``known_seconds``: a restored or rolled-back-to plan's own median when it
    last ran in this cluster state (None for a new plan); ``judged``: False for
    the plan a failed trial's rollback re-installs, which is only watched for a
    step (``PolicyConfig.step_iterations``) and measured against its own median,
    not kept or rolled back; ``previous_tail``: the previous plan's last
    ``step_iterations`` measured iteration times before the switch (taken at the
    switch), which show whether the cluster changed before the trial began."""

    version: int
    previous: int
    previous_seconds: float | None
    started: int
    known_seconds: float | None = None
    judged: bool = True
    previous_tail: tuple[float, ...] = ()


@dataclass(frozen=True)
class Measurement:
    """The running plan's iterations in the current cluster state, from scratch
    when another plan runs or the state changes. ``since_switch``: iterations
    since then, of which the first ``warmup`` are not measured; ``window``:
    ``(seconds, wait fraction)`` of the last ``window`` measured ones and
    ``channel_window`` their ``(channel, motif seconds)``; ``baseline`` and
    ``channel_baseline``: the medians over the second full window after the
    warm-up, which drift is measured against — a plan re-installed (rolled back
    to, restored) in a cluster state where it ran starts with its median there as
    its baseline: a change that came while another plan had no baseline yet (a
    trial's) shows as that plan measuring far over its own median. A plan kept
    after its trial starts with the trial's medians as a ``provisional`` baseline
    (:meth:`kept`), which its own replaces at the second full window unless the
    median is then more than ``drift_trigger`` over it. ``warm`` and ``warm_channels``:
    the warm-up iterations, as ``window`` and ``channel_window`` hold the measured ones (a
    trial's step may start right after them; :meth:`last` hands them on). ``settled``: the
    median of the latest window that no search of the job overlapped
    (:meth:`Policy.quiet`)."""

    since_switch: int = 0
    window: tuple[tuple[float, float], ...] = ()
    channel_window: tuple[tuple[tuple[int, float], ...], ...] = ()
    baseline: float | None = None
    channel_baseline: tuple[tuple[int, float], ...] = ()
    settled: float | None = None
    provisional: bool = False
    warm: tuple[tuple[float, float], ...] = ()
    warm_channels: tuple[tuple[tuple[int, float], ...], ...] = ()

    def add(self, seconds: float, wait_seconds: float, channel_seconds: Iterable[tuple[int, float]],
            config: PolicyConfig) -> Measurement:
        """One more iteration of the running plan (``seconds`` finite and positive)."""
        since = self.since_switch + 1
        entry = (seconds, min(max(wait_seconds, 0.0) / seconds, 1.0))
        channels = tuple((c, s) for c, s in channel_seconds if math.isfinite(s) and s >= 0)
        if since <= config.warmup:
            return replace(self, since_switch=since, warm=self.warm + (entry,),
                           warm_channels=self.warm_channels + (channels,))
        return replace(self, since_switch=since, window=(self.window + (entry,))[-config.window:],
                       channel_window=(self.channel_window + (channels,))[-config.window:])

    def warm_seconds(self) -> list[float]:
        """The warm-up iterations' seconds."""
        return [seconds for seconds, _ in self.warm]

    def last(self, count: int) -> tuple[tuple, tuple]:
        """The last ``count`` iterations since the switch, warm-up's included (as many as there are), as
        ``(window, channel_window)`` entries: what a new cluster state keeps of the running plan."""
        if count <= 0:
            return (), ()
        return (self.warm + self.window)[-count:], (self.warm_channels + self.channel_window)[-count:]

    def settle(self, config: PolicyConfig) -> Measurement:
        """The window is :meth:`Policy.quiet`: its median is the ``settled`` one, and the baseline if
        this is the second full window after the warm-up and there is none yet, or only a
        provisional one the median is not more than ``drift_trigger`` over (a plan still
        settling in its trial gets faster, not slower; over it, the drift watch decides)."""
        median = self.median_seconds(config.min_samples)
        if median is None:
            return self
        if self.since_switch < config.warmup + 2 * config.window or not (
                self.baseline is None or self.provisional and not self.drifted(median, config)):
            return replace(self, settled=median)
        return replace(self._based(median, config, provisional=False), settled=median)

    def drifted(self, median: float, config: PolicyConfig) -> bool:
        """``median`` more than ``drift_trigger`` away from the baseline (over it, for a provisional one)."""
        baseline = self.baseline
        return (baseline is not None and abs(median / baseline - 1) > config.drift_trigger
                and (median > baseline or not self.provisional))

    def _based(self, median: float, config: PolicyConfig, provisional: bool) -> Measurement:
        """With ``median`` and the window's channel medians as the baseline."""
        return replace(self, baseline=median, provisional=provisional,
                       channel_baseline=tuple(self.channel_medians(config.min_samples).items()))

    def kept(self, config: PolicyConfig) -> Measurement:
        """The trial's window kept its plan: where the plan has no baseline yet, the window's medians
        are its provisional one. Without it a change that came before the second full quiet window
        went unseen: in a DLRM loop run a search overlapped that window, the NIC slowed at step 66,
        the baseline was then taken from the slowed iterations, and the replan came 58 iterations
        after the change (when the stale medians restored passthrough)."""
        median = self.median_seconds(config.min_samples)
        if self.baseline is not None or median is None:
            return self
        return self._based(median, config, provisional=True)

    def median_seconds(self, min_samples: int) -> float | None:
        """The median iteration time, once ``min_samples`` are measured."""
        if len(self.window) < min_samples:
            return None
        return statistics.median(seconds for seconds, _ in self.window)

    def median_wait(self, min_samples: int) -> float | None:
        """The median fraction of an iteration spent in dispatcher waits, once ``min_samples`` are measured."""
        if len(self.window) < min_samples:
            return None
        return statistics.median(wait for _, wait in self.window)

    def channel_medians(self, min_samples: int) -> dict[int, float]:
        """Per channel with ``min_samples`` measured, its median motif seconds per iteration."""
        values: dict[int, list[float]] = {}
        for channels in self.channel_window:
            for channel, seconds in channels:
                values.setdefault(channel, []).append(seconds)
        return {c: statistics.median(v) for c, v in sorted(values.items()) if len(v) >= min_samples}

    def channel_shift(self, min_samples: int) -> tuple[int, float] | None:
        """The channel whose motif time moved most against channel 0's since the baseline, with that factor."""
        base, now = dict(self.channel_baseline), self.channel_medians(min_samples)
        if not (base.get(0) and now.get(0)):
            return None
        shifts = [(c, (now[c] / base[c]) / (now[0] / base[0])) for c in now if c > 0 and base.get(c) and now[c] > 0]
        return max(shifts, key=lambda item: abs(math.log(item[1])), default=None)


@dataclass(frozen=True)
class Watches:
    """The conditions watched on the running plan's medians, each with its
    hysteresis: ``slow`` and ``waits`` start searches and latch; ``drift`` and
    ``channel`` take the cluster as changed; ``restore`` re-installs a known
    faster plan. The field names are the dashboard's keys."""

    slow: Hysteresis = Hysteresis()
    waits: Hysteresis = Hysteresis()
    drift: Hysteresis = Hysteresis()
    channel: Hysteresis = Hysteresis()
    restore: Hysteresis = Hysteresis()

    def restart(self) -> Watches:
        """Every streak from zero; latches stay (they clear when their condition does)."""
        return Watches(*(getattr(self, f.name).restart() for f in fields(self)))

    def streaks(self) -> dict[str, int]:
        """Each watch's current streak, by name."""
        return {f.name: getattr(self, f.name).streak for f in fields(self)}


@dataclass(frozen=True)
class Policy:
    """One job's replanning state. ``count``: iterations accepted so far (the
    clock of cooldowns); ``passthrough``: how many of them ran no plan;
    ``first_done``: the first search (or any commit) happened; ``due``: a
    cluster change that makes a search due, and why; ``drifts``: cluster
    changes measured so far; ``cooldown_until``: nothing is decided before that
    count; ``committed_at``: the count at the last commit (None before one);
    ``fruitless``: searches and commits in a row that changed nothing (the
    backoff); ``predicted``: each plan's expected iteration time;
    ``measured``: per cluster state, the latest median of each plan (version 0:
    passthrough) that ran in it; ``bounds``: per cluster state, the lower bound
    on the iteration time its last search reported; ``bound_done``: the cluster
    state whose bound trigger already fired ("" when none did); ``unplanned``:
    the versions that run no plan (0, and every rollback that re-installed it);
    ``search_ended``: the count when the job's last search ended (see :meth:`quiet`)."""

    config: PolicyConfig
    cluster: str
    paused: bool = False
    count: int = 0
    last_index: int | None = None
    running: int = 0
    passthrough: int = 0
    measurement: Measurement = Measurement()
    watches: Watches = Watches()
    first_done: bool = False
    due: str = ""
    drifts: int = 0
    cooldown_until: int = 0
    committed_at: int | None = None
    fruitless: int = 0
    next_request: int = 1
    pending: Pending | None = None
    trial: Trial | None = None
    predicted: Mapping[int, float] = field(default_factory=dict)
    measured: Mapping[str, Mapping[int, float]] = field(default_factory=dict)
    bounds: Mapping[str, float] = field(default_factory=dict)
    bound_done: str = ""
    unplanned: frozenset[int] = frozenset({0})
    search_ended: int = 0

    @classmethod
    def new(cls, cluster: str, config: PolicyConfig | None = None) -> Policy:
        """A job's policy before its first iteration, in cluster state ``cluster``."""
        return cls(config or PolicyConfig(), cluster)

    @property
    def phase(self) -> str:
        if self.pending is not None:
            return SEARCHING if self.pending.what == SEARCHING else COMMITTING
        return EVALUATING if self.trial is not None else WAITING

    def quiet(self) -> bool:
        """No search of this job runs, and none ran while the window's iterations were measured (an
        iteration's count is the ``count`` it made; ``search_ended`` the last counted during the search):
        their median is evidence about the plan and the cluster. A search spans iterations (it waits
        for traced ones, then computes), and a drift seen meanwhile cancelled it and started the next,
        so on a noisy host searches never finished: a 2-rank DDP job of 12 ms steps under a load that
        came and went every few seconds, with the Slurm test's policy (windows of 8), had 1, 7, 24 and
        64 searches cancelled in four runs, the last without a plan in 2,000 steps (none with this
        rule; the plan was committed within 2 s of the first search). Where the service shares the
        ranks' cores (the Slurm script starts it on the allocation's first node; compose and the
        emulated cluster run on one host), the search itself slows their steps too. So medians of a
        window a search overlapped take no baseline, are not the plan's recorded median
        (``measured``) nor the one a search's gain is judged on, and count for none of the watches
        on the iteration time; the per-channel one compares channels with each other, which a busy
        host slows alike, and stays on. A change that outlasts the search is seen one window after
        it; where the service runs elsewhere that delay is the only cost."""
        return self.phase != SEARCHING and self.count - len(self.measurement.window) >= self.search_ended

    def median_seconds(self) -> float | None:
        """The running plan's median iteration time, once ``min_samples`` are measured."""
        return self.measurement.median_seconds(self.config.min_samples)

    def settled_seconds(self) -> float | None:
        """The running plan's latest median over a :meth:`quiet` window since it started running (in
        this cluster state), or its current median when it has none."""
        settled = self.measurement.settled
        return settled if settled is not None else self.median_seconds()

    def median_wait(self) -> float | None:
        """The running plan's median fraction of an iteration spent in dispatcher waits."""
        return self.measurement.median_wait(self.config.min_samples)

    def best(self, excluding: int | None = None) -> tuple[int, float] | None:
        """The plan with the lowest known median in the current cluster state (other
        than version ``excluding``), with that median."""
        known = {v: s for v, s in self.measured.get(self.cluster, {}).items() if v != excluding}
        return min(known.items(), key=lambda item: (item[1], -item[0])) if known else None

    def channel_medians(self) -> dict[int, float]:
        """Per channel, the running plan's median motif seconds per iteration (``min_samples`` needed)."""
        return self.measurement.channel_medians(self.config.min_samples)

    def channel_shift(self) -> tuple[int, float] | None:
        """The channel whose motif time moved most against channel 0's since the
        baseline, with that relative factor (>1: it got slower than channel 0 did)."""
        return self.measurement.channel_shift(self.config.min_samples)

    def to_dict(self) -> dict:
        """A JSON-ready summary for the dashboard and the store."""
        watches = self.watches
        return {"phase": self.phase, "paused": self.paused, "cluster": self.cluster, "running": self.running,
                "iterations": self.count, "cooldown_left": max(0, self.cooldown_until - self.count),
                "median_seconds": self.median_seconds(), "median_wait_fraction": self.median_wait(),
                "predicted_seconds": self.predicted.get(self.running), "due": self.due,
                "baseline_seconds": self.measurement.baseline,
                "channel_baseline_seconds": {str(c): s for c, s in self.measurement.channel_baseline},
                "streaks": watches.streaks(),
                "latched": {"slow": watches.slow.latched, "waits": watches.waits.latched}, "fruitless": self.fruitless,
                "pending": None if self.pending is None else self.pending.to_dict(),
                "trial": None if self.trial is None else asdict(self.trial),
                "measured": {cluster: {str(v): s for v, s in plans.items()}
                             for cluster, plans in self.measured.items()},
                "bound_seconds": self.bounds.get(self.cluster), "quiet": self.quiet(),
                "config": {f.name: getattr(self.config, f.name) for f in fields(self.config)}}
