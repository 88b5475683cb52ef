"""The replanning policy (issue 16) as a pure function in the style of
torchft's ``quorum_compute``: ``step(state, event, now) -> (state, actions)``,
clock injected, no I/O. It decides *when* to search for a plan, *whether* to
commit a search's result, and *when* to go back to an earlier plan; the service
runs the searches and the two-phase commit (:mod:`.coordinator`).

Syndicate (§4.4, paragraph "Replanning", just before §5 Implementation which
describes the 2PC): "We measure the wait time in the busy loop and send it as
feedback to the central optimizer. If wait times in every iteration
consistently add up to more than a threshold (= 5% of iteration time), then we
redo joint optimization at the optimizer to explore a different optimizer
plan." ARCHITECTURE.md adds: a first plan after N passthrough iterations,
replanning when the measured iteration time exceeds the prediction, a gain
threshold for commits, a cooldown, and rollback when a new plan measures slower.

Driving it (one :class:`Policy` per job, :meth:`Policy.new` with the job's
cluster state key): feed :class:`Iteration` once per completed training
iteration, in order (e.g. rank 0's Telemetry: ``duration_seconds``,
``wait_seconds``, ``running_version``); :class:`SearchDone` /
:class:`SearchFailed` when a search asked for by :class:`RequestPlan` ends;
:class:`Committed` / :class:`CommitFailed` for every commit decision of the
job's coordinator; :class:`ClusterChanged` when the calibrated topology (or
whatever the key hashes) changes; :class:`Pause` / :class:`Resume` from the
operator; :class:`Tick` now and then. Execute :class:`RequestPlan`,
:class:`CancelSearch`, :class:`Commit` and :class:`RollBack`, and store every
action (with :class:`Note`) as a job event: each has ``kind`` and ``reason``.

Defaults (:class:`PolicyConfig`, in :mod:`.policy_events`), and why:

* ``first_plan_after=20`` passthrough iterations: enough for ``warmup`` plus
  ``min_samples`` measured ones, so the first search's gain is judged against
  a median, still early in any real run.
* ``warmup=5``: iterations ignored after every switch, cluster change and at
  start (allocator growth, lazily built communicators, first-touch of channels).
* ``window=20``, ``min_samples=10``: statistics are medians over the last
  ``window`` measured iterations, used once ``min_samples`` exist — one noisy
  (or stalled, e.g. checkpointing) iteration moves a median by one rank only.
* ``min_gain=0.05``: commit only for a predicted gain above 5 % — the same size
  as Syndicate's 5 % wait threshold, and above the run-to-run noise of a median.
* ``slow_trigger=0.15`` / ``slow_clear=0.10``: replan when the median is more
  than 15 % over the running plan's prediction (three times ``min_gain``: an
  error that size means the search's ranking may be wrong, not just its
  constants) for ``consecutive=10`` iterations in a row; once it led to
  a search it is armed again only after 10 medians in a row below 10 % (hysteresis).
* ``wait_trigger=0.05`` (Syndicate) / ``wait_clear=0.03``: the same for the
  median of dispatcher waits / iteration time, under a plan.
* ``cooldown=30`` iterations after every search, commit, rollback and failure:
  a switch's effect must be measured (``warmup`` + ``evaluate`` = 25) before
  anything else may be decided; ``max_backoff=8``: after k searches or commits
  in a row that changed nothing (not committed, failed, rolled back) the
  cooldown is ``cooldown * min(2**k, 8)``: no tight retry loop, and noise near
  a threshold costs at most one search per 240 iterations.
* ``drift_trigger=0.20``: a running plan's *baseline* is its median over the
  second full ``window`` after the warm-up (the first is the trial's, and on
  the 2-core emulated cluster a new plan was still settling then); a median
  more than 20 % away from it for ``consecutive`` iterations means the cluster
  changed under the job (a NIC throttled, a neighbour's traffic) — larger than
  the 5–15 % that medians of one plan moved between windows there.
* ``channel_drift=0.50``: the same per channel, on the motif seconds the ranks
  report per channel, relative to channel 0's: a channel whose motifs take
  1.5× (or 1/1.5×) their baseline time *against channel 0's* changed. Measured
  relative to channel 0 because CPU contention slows every channel alike (and
  is no reason to move traffic); a slowed NIC shows there long before it shows
  in the iteration time (on the emulated cluster, a NIC slowed 4× made its
  motifs about 1.6× slower against the other's and the iteration not
  measurably slower: the plan's motifs on it were mostly hidden behind compute).
* ``restore_gain=0.10``: a known plan is re-installed only when it measured
  10 % faster than the running one's median for ``consecutive`` iterations in
  a row (twice ``min_gain``: a restore compares medians taken at different
  times, which carry the drift of the machine, not only the plan).
* ``evaluate=20``, ``rollback_margin=0.03``: a new plan is measured for 20
  iterations after its warm-up and rolled back when its median is more than 3 %
  over the previous plan's (below ``min_gain``, so a kept plan is never "known
  worse" by enough to be restored straight away: no ping-pong).
* ``switch_within=200`` iterations: ranks switch at the coordinator's next
  switch boundary; a committed plan not running by then is not evaluated.
* ``pending_timeout=600`` s: a search or commit without an answer for that long
  is taken as failed (the search is cancelled; a late answer is ignored).

Readings of the ambiguous points:

* "Consistently" (Syndicate) and "for M consecutive iterations" (issue): the
  *median over the window* must be above the threshold at M consecutive
  iterations; a single iteration never counts.
* The gain of a search result is the model's: ``1 - predicted / running``, the
  new plan against the running plan priced alike (same traces, re-fitted
  topology and scheduler). The plan is then *expected* to take the running
  plan's measured median times that ratio, and that expectation is its
  prediction from then on (the slow trigger compares with it). The model's
  absolute time of a live job misses what slows every plan alike (on 2 cores,
  8 ranks' gloo threads waiting for a core: motifs measured 3–4× the calibrated
  time), and the ratio cancels it. Where the running plan cannot be priced,
  the model's own time is compared with the median. With fewer than
  ``min_samples`` measured iterations nothing is committed. "Exceeds": strictly.
* A cluster change nobody reports is seen as *drift* (``drift_trigger``): the
  policy then enters a new cluster state named after the last one
  (``KEY~dN``), exactly as if :class:`ClusterChanged` had said so; the search
  that follows re-fits the channels to what the traces now measure.
* A trigger that led to a search is latched until its condition clears (for
  whichever plan runs then) or the cluster state changes: a condition a search
  could not improve, or a commit that was rolled back, does not cause a search
  every cooldown. A failed search or commit does not latch, so it is retried,
  after the backed-off cooldown.
* Rollback (trial) compares medians measured in the same cluster state; if the
  state changed during the trial there is nothing to compare with and the plan
  is kept. A rollback is not itself evaluated (the plan is known).
* Keep-best: per cluster state, the latest median of every plan that ran in it.
  Whenever the running plan measures more than ``restore_gain`` slower than a
  known plan of the current state for ``consecutive`` iterations, that plan is
  re-installed (``RollBack`` with cause ``restore``, evaluated like a commit);
  right after a cluster change, as soon as ``min_samples`` are measured. This
  is how a cluster state seen before gets its best plan back, and how a
  failed rollback is retried. With none known,
  a cluster change makes a replan due once ``min_samples`` are measured in it.
* Pause freezes plans: a running search is cancelled, nothing is requested,
  committed or rolled back (a trial's verdict waits for Resume); measuring goes on.
* Version 0 is passthrough; rolling back to it means installing no plan.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace

from optimizer_service.control.policy_events import (
    Action,
    CancelSearch,
    ClusterChanged,
    Commit,
    CommitFailed,
    Committed,
    Event,
    Iteration,
    Note,
    Pause,
    PolicyConfig,
    ReplanNow,
    RequestPlan,
    Resume,
    RollBack,
    SearchDone,
    SearchFailed,
    Tick,
)

__all__ = [
    "Action", "CancelSearch", "ClusterChanged", "Commit", "CommitFailed", "Committed", "Event", "Iteration", "Note",
    "Pause", "Pending", "Policy", "PolicyConfig", "ReplanNow", "RequestPlan", "Resume", "RollBack", "SearchDone",
    "SearchFailed", "Tick", "Trial", "step",
]

WAITING, SEARCHING, COMMITTING, EVALUATING = "waiting", "searching", "committing", "evaluating"


@dataclass(frozen=True)
class Pending:
    """The search (``request``; ``what`` is ``"searching"``) or commit
    (``version``; ``"committing"``) the policy waits for, since ``since`` (seconds). ``trigger``: what started it (``first``,
    ``cluster``, ``slow``, ``waits``; ``restore``, ``trial`` for rollbacks);
    ``due``: the cluster change a ``cluster`` search answers."""

    what: str
    trigger: str
    since: float
    request: int = 0
    version: int = 0
    due: str = ""


@dataclass(frozen=True)
class Trial:
    """A committed plan under evaluation against the one that ran before it
    (its median then, in this cluster state; None: nothing to compare with)."""

    version: int
    previous: int
    previous_seconds: float | None
    started: int


@dataclass(frozen=True)
class Policy:
    """One job's replanning state. ``count``: iterations accepted so far (the
    clock of cooldowns); ``window``: ``(seconds, wait fraction)`` of the last
    measured iterations of the running plan; ``measured``: per cluster state,
    the latest median of each plan (version 0: passthrough) that ran in it."""

    config: PolicyConfig
    cluster: str
    paused: bool = False
    count: int = 0
    last_index: int | None = None
    running: int = 0
    since_switch: int = 0
    window: tuple[tuple[float, float], ...] = ()
    passthrough: int = 0
    first_done: bool = False
    due: str = ""
    slow_streak: int = 0
    wait_streak: int = 0
    slow_latched: bool = False
    wait_latched: bool = False
    baseline: float | None = None
    channel_window: tuple[tuple[tuple[int, float], ...], ...] = ()
    channel_baseline: tuple[tuple[int, float], ...] = ()
    drift_streak: int = 0
    channel_streak: int = 0
    drifts: int = 0
    restore_streak: int = 0
    cooldown_until: int = 0
    fruitless: int = 0
    next_request: int = 1
    pending: Pending | None = None
    trial: Trial | None = None
    predicted: Mapping[int, float] = field(default_factory=dict)
    measured: Mapping[str, Mapping[int, float]] = field(default_factory=dict)

    @classmethod
    def new(cls, cluster: str, config: PolicyConfig | None = None) -> Policy:
        """A job's policy before its first iteration, in cluster state ``cluster``."""
        return cls(config or PolicyConfig(), cluster)

    @property
    def phase(self) -> str:
        if self.pending is not None:
            return SEARCHING if self.pending.what == SEARCHING else COMMITTING
        return EVALUATING if self.trial is not None else WAITING

    def median_seconds(self) -> float | None:
        """The running plan's median iteration time, once ``min_samples`` are measured."""
        if len(self.window) < self.config.min_samples:
            return None
        return statistics.median(seconds for seconds, _ in self.window)

    def median_wait(self) -> float | None:
        """The running plan's median fraction of an iteration spent in dispatcher waits."""
        if len(self.window) < self.config.min_samples:
            return None
        return statistics.median(wait for _, wait in self.window)

    def best(self, excluding: int | None = None) -> tuple[int, float] | None:
        """The plan with the lowest known median in the current cluster state (other
        than version ``excluding``), with that median."""
        known = {v: s for v, s in self.measured.get(self.cluster, {}).items() if v != excluding}
        return min(known.items(), key=lambda item: (item[1], -item[0])) if known else None

    def channel_medians(self) -> dict[int, float]:
        """Per channel, the running plan's median motif seconds per iteration (``min_samples`` needed)."""
        values: dict[int, list[float]] = {}
        for channels in self.channel_window:
            for channel, seconds in channels:
                values.setdefault(channel, []).append(seconds)
        return {c: statistics.median(v) for c, v in sorted(values.items()) if len(v) >= self.config.min_samples}

    def channel_shift(self) -> tuple[int, float] | None:
        """The channel whose motif time moved most against channel 0's since the
        baseline, with that relative factor (>1: it got slower than channel 0 did)."""
        base, now = dict(self.channel_baseline), self.channel_medians()
        if not (base.get(0) and now.get(0)):
            return None
        shifts = [(c, (now[c] / base[c]) / (now[0] / base[0])) for c in now if c > 0 and base.get(c) and now[c] > 0]
        return max(shifts, key=lambda item: abs(math.log(item[1])), default=None)

    def to_dict(self) -> dict:
        """A JSON-ready summary for the dashboard and the store."""
        return {"phase": self.phase, "paused": self.paused, "cluster": self.cluster, "running": self.running,
                "iterations": self.count, "cooldown_left": max(0, self.cooldown_until - self.count),
                "median_seconds": self.median_seconds(), "median_wait_fraction": self.median_wait(),
                "predicted_seconds": self.predicted.get(self.running), "due": self.due,
                "baseline_seconds": self.baseline,
                "channel_baseline_seconds": {str(c): s for c, s in self.channel_baseline},
                "streaks": {"slow": self.slow_streak, "waits": self.wait_streak, "drift": self.drift_streak,
                            "channel": self.channel_streak, "restore": self.restore_streak},
                "latched": {"slow": self.slow_latched, "waits": self.wait_latched}, "fruitless": self.fruitless,
                "pending": None if self.pending is None else asdict(self.pending),
                "trial": None if self.trial is None else asdict(self.trial),
                "measured": {cluster: {str(v): s for v, s in plans.items()} for cluster, plans in self.measured.items()},
                "config": {f.name: getattr(self.config, f.name) for f in fields(self.config)}}


# ---------------------------------------------------------------- helpers
def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def _name(version: int) -> str:
    return "passthrough" if version == 0 else f"v{version}"


def _cool(state: Policy, factor: int = 1) -> Policy:
    return replace(state, cooldown_until=state.count + state.config.cooldown * factor)


def _latch(state: Policy, trigger: str) -> Policy:
    """A search for ``trigger`` ended with a result: do not search for it again until it clears."""
    if trigger == "first":
        return replace(state, first_done=True)
    if trigger == "cluster":
        return replace(state, due="")
    if trigger == "slow":
        return replace(state, slow_latched=True, slow_streak=0)
    if trigger == "waits":
        return replace(state, wait_latched=True, wait_streak=0)
    return state


def _fruitless(state: Policy) -> tuple[Policy, int]:
    """One more search or commit in a row that changed nothing: a longer cooldown."""
    fruitless = state.fruitless + 1
    factor = min(2 ** fruitless, state.config.max_backoff)
    return replace(_cool(state, factor), fruitless=fruitless), state.config.cooldown * factor


def _fail(state: Policy, pending: Pending) -> tuple[Policy, int]:
    """A search or commit failed: release its trigger (retry allowed), back off the cooldown."""
    state, wait = _fruitless(replace(state, pending=None))
    if pending.what == COMMITTING:
        state = replace(state, first_done=state.first_done and pending.trigger != "first",
                        due=pending.due if pending.trigger == "cluster" else state.due,
                        slow_latched=state.slow_latched and pending.trigger != "slow",
                        wait_latched=state.wait_latched and pending.trigger != "waits")
    return state, wait


def _fresh(state: Policy) -> Policy:
    """Measure from scratch (a new plan runs, or the cluster state changed). Latches
    stay: a plan re-installed by a rollback must not re-open the search that found
    the plan it replaced; they clear when the condition does."""
    return replace(state, since_switch=0, window=(), slow_streak=0, wait_streak=0, baseline=None, drift_streak=0,
                   restore_streak=0, channel_window=(), channel_baseline=(), channel_streak=0)


def _timeouts(state: Policy, now: float) -> tuple[Policy, list[Action]]:
    pending, limit = state.pending, state.config.pending_timeout
    if pending is None or now - pending.since < limit:
        return state, []
    state, wait = _fail(state, pending)
    if pending.what == SEARCHING:
        return state, [CancelSearch(pending.request, f"search r{pending.request} gave no answer within {limit:g} s"),
                       Note("timeout", f"search r{pending.request} taken as failed; next attempt after {wait} "
                            f"iterations")]
    return state, [Note("timeout", f"no outcome for the commit of {_name(pending.version)} within {limit:g} s; taken "
                        f"as failed; keeping {_name(state.running)}; cooldown {wait} iterations")]


# ---------------------------------------------------------------- iterations
def _streak(latched: bool, streak: int, value: float, trigger: float, clear: float, needed: int) -> tuple[bool, int]:
    """Hysteresis: armed, ``streak`` counts medians above ``trigger`` in a row;
    latched, it counts medians below ``clear`` in a row, and ``needed`` of them re-arm."""
    if not latched:
        return False, streak + 1 if value > trigger else 0
    streak = streak + 1 if value < clear else 0
    return (False, 0) if streak >= needed else (True, streak)


def _watch(state: Policy) -> tuple[Policy, list[Action]]:
    """Update the slow and waits streaks from the medians; re-arm a latched trigger that cleared."""
    cfg, actions = state.config, []
    median, wait = state.median_seconds(), state.median_wait()
    predicted = state.predicted.get(state.running) if state.running else None
    if median is not None and predicted:
        over = median / predicted - 1
        latched, streak = _streak(state.slow_latched, state.slow_streak, over, cfg.slow_trigger, cfg.slow_clear,
                                  cfg.consecutive)
        if state.slow_latched and not latched:
            actions.append(Note("cleared", f"measured {median:.3f} s is {_pct(over)} over the predicted "
                                f"{predicted:.3f} s of {_name(state.running)}, below {_pct(cfg.slow_clear)} for "
                                f"{cfg.consecutive} iterations: the slow trigger is armed again"))
        state = replace(state, slow_latched=latched, slow_streak=streak)
    elif state.slow_streak and not state.slow_latched:
        state = replace(state, slow_streak=0)          # no prediction (any more): nothing to be over
    if wait is not None and state.running:
        latched, streak = _streak(state.wait_latched, state.wait_streak, wait, cfg.wait_trigger, cfg.wait_clear,
                                  cfg.consecutive)
        if state.wait_latched and not latched:
            actions.append(Note("cleared", f"dispatcher waits are {_pct(wait)} of the iteration, below "
                                f"{_pct(cfg.wait_clear)} for {cfg.consecutive} iterations: the waits trigger is "
                                f"armed again"))
        state = replace(state, wait_latched=latched, wait_streak=streak)
    if median is not None:
        drift = state.baseline is not None and abs(median / state.baseline - 1) > cfg.drift_trigger
        best = state.best(excluding=state.running)
        better = best is not None and best[1] < median * (1 - cfg.restore_gain)
        shift = state.channel_shift()
        moved = shift is not None and abs(math.log(shift[1])) > math.log(1 + cfg.channel_drift)
        state = replace(state, drift_streak=state.drift_streak + 1 if drift else 0,
                        channel_streak=state.channel_streak + 1 if moved else 0,
                        restore_streak=state.restore_streak + 1 if better else 0)
    return state, actions


def _drift(state: Policy) -> tuple[Policy, list[Action]]:
    """The running plan's median left its baseline by more than ``drift_trigger``,
    or one channel's motif time moved against channel 0's by more than
    ``channel_drift``, for ``consecutive`` iterations: the cluster changed under
    it, though nobody said so. It becomes a new cluster state, derived from the last one."""
    median, baseline, cfg = state.median_seconds(), state.baseline, state.config
    assert median is not None and baseline is not None
    drifts = state.drifts + 1
    cluster = f"{state.cluster.split('~')[0]}~d{drifts}"
    shift = state.channel_shift()
    if state.channel_streak >= cfg.consecutive and shift is not None:
        channel, factor = shift
        what = (f"the motifs of {_name(state.running)} on channel {channel} take {factor:.2f}x their baseline "
                f"time relative to channel 0's for {state.channel_streak} iterations (beyond "
                f"{1 + cfg.channel_drift:.2f}x either way; the iteration measures {median:.3f} s, baseline "
                f"{baseline:.3f} s)")
    else:
        what = (f"{_name(state.running)} measures {median:.3f} s, {_pct(abs(median / baseline - 1))} "
                f"{'over' if median > baseline else 'under'} its {baseline:.3f} s baseline for {state.drift_streak} "
                f"iterations (more than {_pct(cfg.drift_trigger)})")
    # The iterations that showed the drift ran the same plan on the changed cluster: they are the new
    # state's first measurements (a reported change, by contrast, comes before any).
    shown = min(cfg.consecutive, cfg.window)
    state, actions = _changed(replace(state, drifts=drifts), cluster, f"{what}: the cluster changed under the "
                              f"job; taken as a new cluster state {cluster}",
                              keep=(state.window[-shown:], state.channel_window[-shown:]))
    return state, [Note("drift", actions[-1].reason), *actions[:-1]]


def _evaluate(state: Policy, now: float) -> tuple[Policy, list[Action]]:
    """A trial's verdict once ``evaluate`` iterations of the new plan are measured."""
    trial, cfg = state.trial, state.config
    assert trial is not None
    if state.running != trial.version:
        if state.running == trial.previous and state.count - trial.started <= cfg.switch_within:
            return state, []          # the ranks switch at the coordinator's boundary
        return replace(state, trial=None), [Note("abandoned", f"{_name(trial.version)} was committed but the ranks "
                                                 f"run {_name(state.running)}; not evaluated")]
    if state.paused or len(state.window) < cfg.evaluate:
        return state, []
    median = state.median_seconds()
    assert median is not None
    state, new, old = replace(state, trial=None), _name(trial.version), _name(trial.previous)
    if trial.previous_seconds is None:
        return state, [Note("kept", f"{new} measured {median:.3f} s; no measurement of {old} in cluster state "
                            f"{state.cluster} to compare with; kept")]
    change = median / trial.previous_seconds - 1
    compare = (f"{new} measured {median:.3f} s over {len(state.window)} iterations, {_pct(abs(change))} "
               f"{'slower' if change > 0 else 'faster'} than {old}'s {trial.previous_seconds:.3f} s")
    if change > cfg.rollback_margin:
        reason = f"{compare} (margin {_pct(cfg.rollback_margin)}); rolling back to {old}"
        state = replace(state, pending=Pending(COMMITTING, "trial", now, version=trial.previous))
        return state, [RollBack(trial.previous, trial.version, "trial", reason)]
    return state, [Note("kept", f"{compare}; kept")]


def _trigger(state: Policy, median: float) -> tuple[str, str] | None:
    cfg, running = state.config, state.running
    if state.due:
        return "cluster", f"{state.due}; no known plan for it beats the running {_name(running)} ({median:.3f} s)"
    if running == 0 and not state.first_done and state.passthrough >= cfg.first_plan_after:
        return "first", f"first plan after {state.passthrough} passthrough iterations (measured {median:.3f} s)"
    predicted = state.predicted.get(running)
    if predicted and state.slow_streak >= cfg.consecutive and not state.slow_latched:
        return "slow", (f"measured {median:.3f} s is {_pct(median / predicted - 1)} over the predicted "
                        f"{predicted:.3f} s of {_name(running)} for {state.slow_streak} iterations")
    if state.wait_streak >= cfg.consecutive and not state.wait_latched:
        return "waits", (f"dispatcher waits are {_pct(state.median_wait() or 0.0)} of the iteration time (over "
                         f"{_pct(cfg.wait_trigger)}) for {state.wait_streak} iterations")
    return None


def _decide(state: Policy, now: float) -> tuple[Policy, list[Action]]:
    """While waiting, outside cooldown and not paused: restore a known better plan, or search."""
    median = state.median_seconds()
    if state.paused or state.count < state.cooldown_until or median is None:
        return state, []
    best = state.best(excluding=state.running)
    better = best is not None and best[1] < median * (1 - state.config.restore_gain)
    if best is not None and better and (state.due or state.restore_streak >= state.config.consecutive):
        version, seconds = best
        reason = (f"{_name(version)} measured {seconds:.3f} s in cluster state {state.cluster}, "
                  f"{_pct(1 - seconds / median)} faster than the running {_name(state.running)}'s {median:.3f} s")
        state = replace(state, due="", pending=Pending(COMMITTING, "restore", now, version=version))
        return state, [RollBack(version, state.running, "restore", reason)]
    found = _trigger(state, median)
    if found is None:
        return state, []
    trigger, reason = found
    request = state.next_request
    state = replace(state, next_request=request + 1,
                    pending=Pending(SEARCHING, trigger, now, request=request, due=state.due))
    return state, [RequestPlan(request, trigger, reason)]


def _on_iteration(state: Policy, event: Iteration, now: float) -> tuple[Policy, list[Action]]:
    seconds, wait = event.seconds, event.wait_seconds
    if event.index == state.last_index or not (math.isfinite(seconds) and seconds > 0 and math.isfinite(wait)):
        return state, []
    cfg = state.config
    if event.running_version != state.running:
        state = replace(_fresh(state), running=event.running_version)
    since = state.since_switch + 1
    window = state.window
    channel_window = state.channel_window
    if since > cfg.warmup:
        window = (window + ((seconds, min(max(wait, 0.0) / seconds, 1.0)),))[-cfg.window:]
        channels = tuple((c, s) for c, s in event.channel_seconds if math.isfinite(s) and s >= 0)
        channel_window = (channel_window + (channels,))[-cfg.window:]
    state = replace(state, count=state.count + 1, last_index=event.index, since_switch=since, window=window,
                    channel_window=channel_window, passthrough=state.passthrough + (event.running_version == 0))
    median = state.median_seconds()
    if median is not None:
        known = {**state.measured.get(state.cluster, {}), state.running: median}
        state = replace(state, measured={**state.measured, state.cluster: known})
        if state.baseline is None and since >= cfg.warmup + 2 * cfg.window:
            state = replace(state, baseline=median, channel_baseline=tuple(state.channel_medians().items()))
    state, actions = _watch(state)
    if state.drift_streak >= cfg.consecutive or state.channel_streak >= cfg.consecutive:
        state, more = _drift(state)
        return state, actions + more
    if state.trial is not None:
        state, more = _evaluate(state, now)
    elif state.phase == WAITING:
        state, more = _decide(state, now)
    else:
        more = []
    return state, actions + more


# ---------------------------------------------------------------- outcomes
def _on_search_done(state: Policy, event: SearchDone, now: float) -> tuple[Policy, list[Action]]:
    pending, cfg = state.pending, state.config
    if pending is None or pending.what != SEARCHING or pending.request != event.request:
        return state, [Note("ignored", f"result v{event.version} of search r{event.request} ignored: no such "
                            f"search is running")]
    state = _latch(replace(state, pending=None), pending.trigger)
    median, running = state.median_seconds(), _name(state.running)
    expected, basis = _expected(event, median, running)
    gain = 1 - expected / median if median and expected is not None else None
    if gain is not None and gain > cfg.min_gain + 1e-12 and not state.paused:     # float noise at the threshold is no gain
        state = replace(_cool(state), predicted={**state.predicted, event.version: expected},
                        pending=Pending(COMMITTING, pending.trigger, now, version=event.version, due=pending.due))
        return state, [Commit(event.version, expected, median, f"predicted gain {_pct(gain)} is over the threshold "
                              f"{_pct(cfg.min_gain)}: {basis}")]
    state, wait = _fruitless(state)
    if state.paused:
        why = "replanning is paused"
    elif median is None:
        why = f"only {len(state.window)} measured iterations of {running}, {cfg.min_samples} are needed to compare"
    elif gain is None:
        why = f"its predicted iteration time {event.predicted_seconds} is not a time"
    else:
        why = f"predicted gain {_pct(gain)} is below the threshold {_pct(cfg.min_gain)}: {basis}"
    return state, [Note("not-committed", f"v{event.version} from search r{event.request} not committed: {why}; "
                        f"keeping {running}; next search after {wait} iterations at the earliest")]


def _expected(event: SearchDone, median: float | None, running: str) -> tuple[float | None, str]:
    """The iteration time expected of a search's plan, and how it was reached:
    the model's ratio of the new plan to the running one, applied to the running
    plan's measured median (both priced alike, so what the model misses for this
    job on this cluster cancels); the model's own time where the running plan
    could not be priced."""
    predicted, model = event.predicted_seconds, event.running_seconds

    def time(value: float | None) -> bool:
        return value is not None and math.isfinite(value) and value > 0

    if not time(predicted) or not median:
        return None, ""
    new = f"v{event.version}"
    if time(model):
        expected = median * predicted / model
        return expected, (f"the model prices {new} at {predicted:.3f} s and {running} at {model:.3f} s "
                          f"({_pct(abs(1 - predicted / model))} {'faster' if predicted < model else 'slower'}); "
                          f"on {running}'s measured {median:.3f} s that is {expected:.3f} s")
    return predicted, f"{new} predicted {predicted:.3f} s vs the measured {median:.3f} s of {running}"


def _on_search_failed(state: Policy, event: SearchFailed, now: float) -> tuple[Policy, list[Action]]:
    pending = state.pending
    if pending is None or pending.what != SEARCHING or pending.request != event.request:
        return state, [Note("ignored", f"failure of search r{event.request} ignored: no such search is running")]
    state, wait = _fail(state, pending)
    return state, [Note("search-failed", f"search r{event.request} failed: {event.reason}; next attempt after "
                        f"{wait} iterations at the earliest")]


def _move(state: Policy, old: int, new: int) -> Policy:
    """Plan ``old`` now runs as version ``new``: its numbers move with it."""
    measured = {c: {(new if v == old else v): s for v, s in plans.items()} for c, plans in state.measured.items()}
    predicted = {(new if v == old else v): s for v, s in state.predicted.items()}
    return replace(state, measured=measured, predicted=predicted)


def _on_committed(state: Policy, event: Committed, now: float) -> tuple[Policy, list[Action]]:
    if event.same_as is not None and event.same_as != event.version:
        state = _move(state, event.same_as, event.version)
    seconds = event.predicted_seconds
    if seconds is not None and math.isfinite(seconds) and seconds > 0:
        state = replace(state, predicted={**state.predicted, event.version: seconds})
    pending, cfg = state.pending, state.config
    state = replace(_cool(state), first_done=True)
    if pending is None or pending.what != COMMITTING or pending.version not in (event.version, event.same_as):
        return state, [Note("committed", f"v{event.version} was committed without this policy asking; not evaluated")]
    state = replace(state, pending=None)
    if pending.trigger == "trial":
        state, wait = _fruitless(state)
        alias = f" (as v{event.version})" if event.version != pending.version else ""
        return state, [Note("committed", f"rolled back to {_name(pending.version)}{alias}; cooldown {wait} iterations")]
    state = replace(state, fruitless=0)
    before = state.measured.get(state.cluster, {}).get(state.running)
    state = replace(state, trial=Trial(event.version, state.running, before, state.count))
    versus = f"{_name(state.running)}'s {before:.3f} s" if before is not None else f"{_name(state.running)}"
    return state, [Note("committed", f"v{event.version} committed; measuring {cfg.evaluate} iterations after "
                        f"{cfg.warmup} warm-up iterations against {versus}")]


def _on_commit_failed(state: Policy, event: CommitFailed, now: float) -> tuple[Policy, list[Action]]:
    pending = state.pending
    if pending is None or pending.what != COMMITTING or pending.version != event.version:
        return state, [Note("ignored", f"failure of the commit of v{event.version} ignored: not committing it")]
    state, wait = _fail(state, pending)
    return state, [Note("commit-failed", f"commit of {_name(event.version)} failed: {event.reason}; keeping "
                        f"{_name(state.running)}; cooldown {wait} iterations")]


# ---------------------------------------------------------------- operator and cluster
def _cancel(state: Policy, why: str) -> tuple[Policy, list[Action]]:
    pending = state.pending
    if pending is None or pending.what != SEARCHING:
        return state, []
    return replace(_cool(state), pending=None), [CancelSearch(pending.request, f"search r{pending.request} "
                                                              f"cancelled: {why}")]


def _changed(state: Policy, cluster: str, due: str, keep: tuple[tuple, tuple] = ((), ())) -> tuple[Policy, list[Action]]:
    """Enter cluster state ``cluster`` (``due``: why); the last action is the ``cluster`` note.
    ``keep``: iterations (and their channel seconds) of the running plan already measured in the
    new state; they count in it, past warm-up."""
    old, (window, channels) = state.cluster, keep
    trial = None if state.trial is None else replace(state.trial, previous_seconds=None)
    state = replace(_fresh(state), cluster=cluster, due=due, trial=trial, slow_latched=False, wait_latched=False)
    if window:
        state = replace(state, window=window, channel_window=channels,
                        since_switch=state.config.warmup + len(window))
    state, actions = _cancel(state, "it was for the old cluster state")
    best = state.best()
    known = f"best known plan there: {_name(best[0])} ({best[1]:.3f} s)" if best else "no plan known there"
    left = max(state.config.min_samples - len(window), 0)
    when = (f"deciding once {left} more iteration(s) are measured" if left else "deciding now") + (
        f" (the last {len(window)} count in it)" if window else "")
    return state, actions + [Note("cluster", f"{due}; measurements of {old} no longer count; {known}; {when}")]


def _on_cluster(state: Policy, event: ClusterChanged, now: float) -> tuple[Policy, list[Action]]:
    if event.cluster == state.cluster:
        return state, []
    return _changed(state, event.cluster, f"cluster state changed from {state.cluster} to {event.cluster}")


def _on_pause(state: Policy, event: Pause, now: float) -> tuple[Policy, list[Action]]:
    if state.paused:
        return state, []
    state, actions = _cancel(replace(state, paused=True), "replanning paused")
    return state, actions + [Note("paused", f"replanning paused{': ' + event.reason if event.reason else ''}")]


def _on_resume(state: Policy, event: Resume, now: float) -> tuple[Policy, list[Action]]:
    if not state.paused:
        return state, []
    return replace(state, paused=False), [Note("resumed", "replanning resumed" +
                                               (f": {event.reason}" if event.reason else ""))]


def _on_replan_now(state: Policy, event: ReplanNow, now: float) -> tuple[Policy, list[Action]]:
    """An operator's "replan now": a search at once, whatever the cooldown and the
    triggers say — but not while paused, nor on top of a search or commit under way."""
    asked = f"an operator asked for a plan{': ' + event.reason if event.reason else ''}"
    if state.paused:
        return state, [Note("ignored", f"{asked}; replanning is paused (resume it first)")]
    if state.pending is not None:
        what = "search" if state.pending.what == SEARCHING else "commit"
        return state, [Note("ignored", f"{asked}; the {state.pending.trigger} {what} under way decides")]
    if state.trial is not None:
        return state, [Note("ignored", f"{asked}; {_name(state.trial.version)} is still being measured against "
                                       f"{_name(state.trial.previous)}")]
    request = state.next_request
    state = replace(state, next_request=request + 1, pending=Pending(SEARCHING, "operator", now, request=request))
    return state, [RequestPlan(request, "operator", asked)]


def _on_tick(state: Policy, event: Tick, now: float) -> tuple[Policy, list[Action]]:
    return state, []


_HANDLERS = {Iteration: _on_iteration, SearchDone: _on_search_done, SearchFailed: _on_search_failed,
             Committed: _on_committed, CommitFailed: _on_commit_failed, ClusterChanged: _on_cluster,
             Pause: _on_pause, Resume: _on_resume, ReplanNow: _on_replan_now, Tick: _on_tick}


def step(state: Policy, event: Event, now: float) -> tuple[Policy, list[Action]]:
    """The policy's next state and its actions, in order (``now`` in seconds, any monotonic clock)."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"the replanning policy has no rule for {type(event).__name__}")
    state, actions = _timeouts(state, now)
    state, more = handler(state, event, now)
    return state, actions + more
