"""The replanning policy (issue 16) as a pure function in the style of
torchft's ``quorum_compute``: ``step(state, event, now) -> (state, actions)``,
clock injected, no I/O. It decides *when* to search for a plan, *whether* to
commit a search's result, and *when* to go back to an earlier plan; the service
runs the searches and the two-phase commit (:mod:`.coordinator`). What starts a
search is a :class:`~.triggers.Trigger`, watched with a
:class:`~.hysteresis.Hysteresis`; :class:`PolicyConfig` says why each setting
is what it is, and each rule below says how it reads its source.

Driving it (one :class:`Policy` per job, :meth:`Policy.new` with the job's
cluster state key): feed :class:`Iteration` once per completed training
iteration, in order (e.g. rank 0's Telemetry: ``duration_seconds``,
``wait_seconds``, ``running_version``; version 0 is passthrough, and rolling
back to it means installing no plan); :class:`SearchDone` /
:class:`SearchFailed` when a search asked for by :class:`RequestPlan` ends;
:class:`Committed` / :class:`CommitFailed` for every commit decision of the
job's coordinator; :class:`ClusterChanged` when the calibrated topology (or
whatever the key hashes) changes; :class:`Pause` / :class:`Resume` /
:class:`ReplanNow` from the operator; :class:`Tick` now and then. Execute
:class:`RequestPlan`, :class:`CancelSearch`, :class:`Commit` and
:class:`RollBack`, and store every action (with :class:`Note`) as a job event:
each has ``kind`` and ``reason``.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import replace

from optimizer_service.control.policy_config import PolicyConfig
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
    ReplanNow,
    RequestPlan,
    Resume,
    RollBack,
    SearchDone,
    SearchFailed,
    Tick,
)
from optimizer_service.control.policy_state import (
    COMMITTING,
    SEARCHING,
    WAITING,
    Measurement,
    Pending,
    Policy,
    Trial,
    Watches,
)
from optimizer_service.control.triggers import Trigger

STALE_TAIL = 2
"""How many of the previous plan's last iterations before a switch, in a row, must each measure
more than ``drift_trigger`` over its median for :func:`_stale` (never more than
``step_iterations``). Two: in the 394 iterations past warm-up of ten lossless loop runs (DDP, DLRM) before
their NIC change, 29 were more than 20 % over the median of their plan's earlier ones, and two in a
row three times (0.8 %), three in a row never; the trial's plan must be as far over as well."""

__all__ = [
    "Action", "CancelSearch", "ClusterChanged", "Commit", "CommitFailed", "Committed", "Event", "Iteration", "Note",
    "Pause", "Pending", "Policy", "PolicyConfig", "ReplanNow", "RequestPlan", "Resume", "RollBack", "SearchDone",
    "SearchFailed", "Tick", "Trial", "Trigger", "drifted_from", "step",
]


# ---------------------------------------------------------------- helpers
def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def _name(version: int) -> str:
    return "passthrough" if version == 0 else f"v{version}"


def _cool(state: Policy, factor: int = 1) -> Policy:
    return replace(state, cooldown_until=state.count + state.config.cooldown * factor)


def _latch(state: Policy, trigger: Trigger) -> Policy:
    """A search for ``trigger`` ended with a result: it starts no other until its
    condition clears (for whichever plan runs then) or the cluster state changes,
    so a condition a search could not improve, or a commit that was rolled back,
    does not cause a search every cooldown. (A failed search or commit does not
    latch: :func:`_release`.)"""
    watches = state.watches
    match trigger:
        case Trigger.FIRST:
            return replace(state, first_done=True)
        case Trigger.CLUSTER:
            return replace(state, due="")
        case Trigger.SLOW:
            return replace(state, watches=replace(watches, slow=watches.slow.latch()))
        case Trigger.WAITS:
            return replace(state, watches=replace(watches, waits=watches.waits.latch()))
        case Trigger.BOUND:
            return replace(state, bound_done=state.cluster)
    return state


def _release(state: Policy, pending: Pending) -> Policy:
    """The commit ``pending`` asked for failed: its trigger is no longer latched, so
    it is retried (after the backed-off cooldown)."""
    watches = state.watches
    match pending.trigger:
        case Trigger.FIRST:
            return replace(state, first_done=False)
        case Trigger.CLUSTER:
            return replace(state, due=pending.due)
        case Trigger.SLOW:
            return replace(state, watches=replace(watches, slow=watches.slow.release()))
        case Trigger.WAITS:
            return replace(state, watches=replace(watches, waits=watches.waits.release()))
        case Trigger.BOUND:
            return replace(state, bound_done="")
    return state


def _fruitless(state: Policy) -> tuple[Policy, int]:
    """One more search or commit in a row that changed nothing: a longer cooldown."""
    fruitless = state.fruitless + 1
    factor = min(2 ** fruitless, state.config.max_backoff)
    return replace(_cool(state, factor), fruitless=fruitless), state.config.cooldown * factor


def _fail(state: Policy, pending: Pending) -> tuple[Policy, int]:
    """A search or commit failed: release a commit's trigger, back off the cooldown."""
    state, wait = _fruitless(replace(state, pending=None))
    if pending.what == COMMITTING:
        state = _release(state, pending)
    return state, wait


def _fresh(state: Policy) -> Policy:
    """Measure from scratch (a new plan runs, or the cluster state changed). Latches
    stay: a plan re-installed by a rollback must not re-open the search that found
    the plan it replaced; they clear when the condition does."""
    return replace(state, measurement=Measurement(), watches=state.watches.restart())


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
def _channel_moved(state: Policy) -> bool:
    """A channel's motif time moved against channel 0's by more than ``channel_drift`` (either way)."""
    shift = state.channel_shift()
    return shift is not None and abs(math.log(shift[1])) > math.log(1 + state.config.channel_drift)


def _watch(state: Policy) -> tuple[Policy, list[Action]]:
    """Observe the medians with every watch; a latched trigger that cleared is armed again (with a note).
    Outside a :meth:`~Policy.quiet` window the watches on the iteration time count nothing (their
    streaks start again) and only the per-channel one observes."""
    cfg, actions, watches = state.config, [], state.watches
    median, wait = state.median_seconds(), state.median_wait()
    if not state.quiet():
        moved = median is not None and _channel_moved(state)
        return replace(state, watches=replace(watches.restart(), channel=watches.channel.count(moved))), actions
    predicted = state.predicted.get(state.running) if state.running else None
    slow, waits = watches.slow, watches.waits
    if median is not None and predicted:
        over = median / predicted - 1
        slow, rearmed = slow.observe(over, cfg.slow_trigger, cfg.slow_clear, cfg.consecutive)
        if rearmed:
            actions.append(Note("cleared", Trigger.SLOW.cleared(
                median=median, over=_pct(over), predicted=predicted, running=_name(state.running),
                clear=_pct(cfg.slow_clear), needed=cfg.consecutive)))
    elif not slow.latched:
        slow = slow.restart()          # no prediction (any more): nothing to be over
    if wait is not None and state.running:
        waits, rearmed = waits.observe(wait, cfg.wait_trigger, cfg.wait_clear, cfg.consecutive)
        if rearmed:
            actions.append(Note("cleared", Trigger.WAITS.cleared(wait=_pct(wait), clear=_pct(cfg.wait_clear),
                                                                 needed=cfg.consecutive)))
    watches = replace(watches, slow=slow, waits=waits)
    if median is not None:
        drift = state.measurement.drifted(median, cfg)
        best = state.best(excluding=state.running)
        better = best is not None and best[1] < median * (1 - cfg.restore_gain)
        watches = replace(watches, drift=watches.drift.count(drift), channel=watches.channel.count(_channel_moved(state)),
                          restore=watches.restore.count(better))
    return replace(state, watches=watches), actions


def _drift(state: Policy) -> tuple[Policy, list[Action]]:
    """The running plan's median left its baseline by more than ``drift_trigger``,
    or one channel's motif time moved against channel 0's by more than
    ``channel_drift``, for ``consecutive`` iterations: the cluster changed under
    it, though nobody said so. The policy enters a new cluster state named after
    the last one (``KEY~dN``), exactly as if :class:`ClusterChanged` had said so;
    the search that follows re-fits the channels to what the traces now measure."""
    median, baseline, cfg = state.median_seconds(), state.measurement.baseline, state.config
    assert median is not None and baseline is not None
    shift = state.channel_shift()
    channel, drift = state.watches.channel, state.watches.drift
    if channel.fired(cfg.consecutive) and shift is not None:
        moved, factor = shift
        what = (f"the motifs of {_name(state.running)} on channel {moved} take {factor:.2f}x their baseline "
                f"time relative to channel 0's for {channel.streak} iterations (beyond "
                f"{1 + cfg.channel_drift:.2f}x either way; the iteration measures {median:.3f} s, baseline "
                f"{baseline:.3f} s)")
    else:
        what = (f"{_name(state.running)} measures {median:.3f} s, {_pct(abs(median / baseline - 1))} "
                f"{'over' if median > baseline else 'under'} its {baseline:.3f} s baseline for {drift.streak} "
                f"iterations (more than {_pct(cfg.drift_trigger)})")
    return _drifted(state, what)


def drifted_from(cluster: str, earlier: str) -> bool:
    """Whether ``cluster`` is a drift state (:func:`_drifted`: ``KEY~dN``) of ``earlier``'s key
    entered after it: the same cluster as far as anyone said, changed as the job measured it."""
    return cluster != earlier and "~d" in cluster and cluster.split("~")[0] == earlier.split("~")[0]


def _drifted(state: Policy, what: str, shown: int | None = None) -> tuple[Policy, list[Action]]:
    """Enter the next drift state ``KEY~dN`` because of ``what`` (a ``drift`` note); ``shown``:
    how many of the last iterations showed it (default: the drift watch's ``consecutive``)."""
    cfg, drifts = state.config, state.drifts + 1
    cluster = f"{state.cluster.split('~')[0]}~d{drifts}"
    # The iterations that showed the drift ran the same plan on the changed cluster: they are the new
    # state's first measurements (a reported change, by contrast, comes before any).
    shown = min(cfg.consecutive if shown is None else shown, cfg.window)
    state, actions = _changed(replace(state, drifts=drifts), cluster, f"{what}: the cluster changed under the "
                              f"job; taken as a new cluster state {cluster}", keep=state.measurement.last(shown),
                              measured=state.trial is None)
    return state, [Note("drift", actions[-1].reason), *actions[:-1]]


def _evaluate(state: Policy, now: float) -> tuple[Policy, list[Action]]:
    """A trial's verdict once ``evaluate`` iterations of the new plan are measured.
    It compares medians measured in the same cluster state: if the state changed
    during the trial there is nothing to compare with and the plan is kept. A
    rollback after a failed trial is not itself evaluated (the plan is known).

    A restored plan (``restore``) is, and it is also compared with its own
    median when it last ran in this cluster state: more than ``drift_trigger``
    over it, and the cluster changed under the known medians — a change the
    drift watch could not see because it came before the running plan had its
    baseline. (In an FSDP loop run the second NIC slowed 16 iterations after
    a plan switched, before its baseline was taken; a plan measured before the change
    was restored as 35 % faster, measured 81 % over its own old median, and was
    rolled back, and the replan came 97 iterations after the change.) The
    policy then enters a drift state (:func:`_drifted`), whose search is due
    at once.

    Before the verdict, every iteration of a trial is watched for a step
    (:func:`_stepped`): the cluster changed during the trial, so the state
    changes there and then, the trial's plan keeps running into it and
    nothing is rolled back. The plan a failed trial's rollback re-installs
    is watched the same way, and measured against its own median there, but
    not judged (``Trial.judged``): that is how a change that came during the
    trial's warm-up, which its iterations cannot show as a step, shows
    ``step_iterations`` + 1 iterations after the rollback's switch. A trial
    whose previous plan's last iterations were already slow shows a change
    before the switch as soon (:func:`_stale_early`)."""
    trial, cfg = state.trial, state.config
    assert trial is not None
    if state.running != trial.version:
        if state.running == trial.previous and state.count - trial.started <= cfg.switch_within:
            return state, []          # the ranks switch at the coordinator's boundary
        return replace(state, trial=None), [Note("abandoned", f"{_name(trial.version)} was committed but the ranks "
                                                 f"run {_name(state.running)}; not evaluated")]
    stepped = _stepped(state, trial) or _stale_early(state, trial)
    if stepped is not None:
        what, shown = stepped
        return _drifted(replace(state, trial=None), what, shown)
    slow = None if state.paused else _slow_from_the_start(state, trial)
    if slow is not None:
        return _roll_back(replace(state, trial=None), trial, slow, _pct(cfg.drift_trigger), now)
    window = state.measurement.window
    if state.paused or len(window) < cfg.evaluate:
        return state, []
    median = state.median_seconds()
    assert median is not None
    state, new, old = replace(state, trial=None), _name(trial.version), _name(trial.previous)
    known = trial.known_seconds
    if known is not None and median > known * (1 + cfg.drift_trigger):
        return _drifted(state, f"{new}, {_reinstalled(trial)}, measured {median:.3f} s over {len(window)} iterations, "
                               f"{_pct(median / known - 1)} over the {known:.3f} s it measured before in cluster state "
                               f"{state.cluster} (more than {_pct(cfg.drift_trigger)})")
    if not trial.judged:
        return state, []
    state = replace(state, measurement=state.measurement.kept(cfg))
    if trial.previous_seconds is None:
        return state, [Note("kept", f"{new} measured {median:.3f} s; no measurement of {old} in cluster state "
                            f"{state.cluster} to compare with; kept")]
    change = median / trial.previous_seconds - 1
    compare = (f"{new} measured {median:.3f} s over {len(window)} iterations, {_pct(abs(change))} "
               f"{'slower' if change > 0 else 'faster'} than {old}'s {trial.previous_seconds:.3f} s")
    if change > cfg.rollback_margin:
        stale = _stale(trial, median, cfg)
        if stale is not None:
            return _drifted(state, f"{compare}, {stale}: the cluster changed before the trial, not under {new} "
                                   f"alone; {new} is kept", len(window))
        return _roll_back(state, trial, compare, _pct(cfg.rollback_margin), now)
    return state, [Note("kept", f"{compare}; kept")]


def _roll_back(state: Policy, trial: Trial, compare: str, margin: str, now: float) -> tuple[Policy, list[Action]]:
    """The failed ``trial``'s plan is rolled back to the one it replaced (``compare``: how it failed)."""
    reason = Trigger.TRIAL.reason(compare=compare, margin=margin, previous=_name(trial.previous))
    state = replace(state, pending=Pending(COMMITTING, Trigger.TRIAL, now, version=trial.previous))
    return state, [RollBack(trial.previous, trial.version, Trigger.TRIAL.value, reason)]


def _slow_from_the_start(state: Policy, trial: Trial) -> str | None:
    """How a trial failed before its verdict, or None: its plan measured every iteration after the
    switch's first, ``step_iterations`` of them at least, its warm-up's counted, more than
    ``drift_trigger`` over the previous plan's median (and no step inside the trial, no stale tail
    said the cluster changed). A plan settling is not that slow that long (:func:`_stepped`), and
    its median could only fail the verdict's far smaller ``rollback_margin``; rolled back now, the
    plan re-installed shows within ``step_iterations`` + 1 iterations of its switch whether the cluster
    changed under both. (In a DLRM loop run the NIC slowed as the trial began: from the trial's
    second iteration on, every one measured 0.40–0.52 s against the old plan's 0.213 s; the verdict
    came 12 iterations later, and the replan 40 iterations after the change.)"""
    cfg, previous = state.config, trial.previous_seconds
    if not trial.judged or previous is None:
        return None
    series = _since_switch(state)
    run = _shown(series, previous * (1 + cfg.drift_trigger), cfg.step_iterations)
    if not run or run < len(series) - 1:
        return None
    return (f"{_name(trial.version)} measured each of its {len(series) - 1} iterations after the switch's first "
            f"more than {_pct(cfg.drift_trigger)} over {_name(trial.previous)}'s {previous:.3f} s (the last "
            f"{series[-1]:.3f} s)")


def _stepped(state: Policy, trial: Trial) -> tuple[str, int] | None:
    """A step up inside a trial, as ``(what, iterations that show it)``, or None.

    ``step_iterations`` measured iterations in a row each more than
    ``drift_trigger`` over the median of the trial's iterations before them
    (at least as many, its warm-up's included: a change as the warm-up ends
    leaves no measured iteration from before it; in two DLRM loop runs the
    plan then measured 75 % over the old plan's median and was rolled back,
    and the replan came 38 iterations after the change), from the earliest
    such split; or, for a plan
    re-installed where it ran (``known_seconds``), the last ones each that much
    over its median there, its warm-up's counted but for the switch's first iteration (in
    35 switches of sixteen loop runs that no change overlapped, 13 of the 140 second to fifth
    iterations measured more than 1.2x the plan's median over its next 12, never more than two
    in a row; the first iterations up to 1.43x). Only a step up: a plan's first measured iterations
    can still be slower than its later ones (a new plan settling), never the
    reverse by chance four times in a row (``PolicyConfig.step_iterations``).
    Our reading of issue 32's "a replan within 30 iterations" for a change
    that lands while a plan is on trial."""
    cfg, window = state.config, [seconds for seconds, _ in state.measurement.window]
    k, level, new = cfg.step_iterations, 1 + cfg.drift_trigger, _name(trial.version)
    known, warm = trial.known_seconds, state.measurement.warm_seconds()
    if known is not None:
        run = _shown(warm + window, known * level, k)
        if run:
            of_warm = max(run - len(window), 0)
            what = (f"{new}, {_reinstalled(trial)}, measured {run} iterations in a row each more than "
                    f"{_pct(cfg.drift_trigger)} over the {known:.3f} s it measured before in cluster state "
                    f"{state.cluster}{f' ({of_warm} of them its warm-up)' if of_warm else ''} (the last "
                    f"{(warm + window)[-1]:.3f} s)")
            return what, run
    # The warm-up iterations count among those before a step, never in it: a plan settling is slow
    # first, and a change during the warm-up shows as the measured iterations stepping up from them.
    series = warm + window
    for split in range(max(k, len(warm)), len(series) - k + 1):
        before = statistics.median(series[:split])
        if min(series[split:]) > before * level:
            after, first = len(series) - split, split - len(warm) + 1
            counted = f"{split} before them" + (f" ({len(warm)} of them its warm-up)" if warm else "")
            what = (f"{new} measured {after} iterations in a row from its trial's measured iteration {first}, "
                    f"each more than {_pct(cfg.drift_trigger)} over the {before:.3f} s median of the {counted} "
                    f"(the last {window[-1]:.3f} s): a step inside its trial")
            return what, after
    return None


def _over(series: list[float], level: float) -> int:
    """How many of ``series``'s last values, in a row, are over ``level``."""
    return len(list(itertools.takewhile(lambda seconds: seconds > level, reversed(series))))


def _shown(series: list[float], level: float, k: int) -> int:
    """How many of the last iterations since a switch (``series``, its warm-up's first), in a row, are
    over ``level`` where that run holds ``k`` of them at least, the switch's first left out (0 otherwise)."""
    run = _over(series, level)
    return run if min(run, len(series) - 1) >= k else 0


def _since_switch(state: Policy) -> list[float]:
    """The running plan's iterations since its switch: its warm-up's, then the measured ones."""
    return state.measurement.warm_seconds() + [seconds for seconds, _ in state.measurement.window]


def _stale_early(state: Policy, trial: Trial) -> tuple[str, int] | None:
    """A trial's stale comparison (:func:`_stale`) seen before its verdict, as ``(what, iterations
    that show it)``, or None: the previous plan's tail before the switch was stale, and the trial's
    plan measured ``step_iterations`` iterations in a row each more than ``drift_trigger`` over the
    previous plan's median, its warm-up's counted but for the switch's first iteration (as for a
    re-installed plan in :func:`_stepped`). The change came before the switch, so every iteration of
    the trial, its warm-up's too, is the new state's. (In a DLRM run of ``scripts/run.sh`` the NIC
    slowed as a trial began; the verdict that saw it came after the trial's 5 + 12 iterations, and
    the replan 33 iterations after the change.)"""
    cfg, previous = state.config, trial.previous_seconds
    if not trial.judged or previous is None:
        return None
    series = _since_switch(state)
    run = _shown(series, previous * (1 + cfg.drift_trigger), cfg.step_iterations)
    if not run:
        return None
    stale = _stale(trial, series[-1], cfg)
    if stale is None:
        return None
    what = (f"{_name(trial.version)} measured {run} iterations in a row after the switch each more than "
            f"{_pct(cfg.drift_trigger)} over {_name(trial.previous)}'s {previous:.3f} s (the last {series[-1]:.3f} s), "
            f"{stale}: the cluster changed before the trial, not under {_name(trial.version)} alone; "
            f"{_name(trial.version)} is kept")
    return what, len(series)


def _stale(trial: Trial, median: float, cfg: PolicyConfig) -> str | None:
    """Why the median a failed trial is compared with is stale, or None: the trial's plan measured
    more than ``drift_trigger`` over it, and so did the previous plan's last iterations before the
    switch (``Trial.previous_tail``), at least :data:`STALE_TAIL` in a row. The cluster then
    changed before the trial began, while the search and the commit ran (the watches on the
    iteration time count nothing while the job's search runs, :meth:`Policy.quiet`), and the
    search's window came from before the change. (In two of three DLRM loop runs the NIC slowed
    one and three iterations after the slow trigger had started a search; the plan, searched on
    the old state's window, measured 27 and 77 % slower than the old plan's median from before
    the change and was rolled back, the old plan re-installed then showed the change, and the
    replan came 44 and 51 iterations after it.) Both plans slower at once is the cluster, not the
    new plan; the rollback would only re-install a plan that is as slow now.

    The tail counts from its end: in a later DLRM run the NIC slowed three iterations before
    the ranks switched, the old plan's last three measured 61–99 % over its median, the fourth
    before them under it, the whole tail was asked for, and the rollback's detour put the replan
    44 iterations after the change."""
    level = 1 + cfg.drift_trigger
    previous = trial.previous_seconds
    if previous is None or median <= previous * level:
        return None
    slow = _over(list(trial.previous_tail), previous * level)
    if slow < min(STALE_TAIL, cfg.step_iterations):
        return None
    return (f"and {_name(trial.previous)}'s last {slow} iterations before the switch each measured more than "
            f"{_pct(cfg.drift_trigger)} over its median too (the last {trial.previous_tail[-1]:.3f} s)")


def _reinstalled(trial: Trial) -> str:
    """How a trial with ``known_seconds`` came to run its plan again."""
    return "restored" if trial.judged else "re-installed by the rollback"


def _fired(state: Policy, median: float) -> tuple[Trigger, str] | None:
    """The search trigger that fired, first in priority order, with its reason."""
    cfg, running, watches = state.config, state.running, state.watches
    if state.due:
        return Trigger.CLUSTER, Trigger.CLUSTER.reason(due=state.due, running=_name(running), median=median)
    if running == 0 and not state.first_done and state.passthrough >= cfg.first_plan_after:
        return Trigger.FIRST, Trigger.FIRST.reason(passthrough=state.passthrough, median=median)
    predicted = state.predicted.get(running)
    if predicted and watches.slow.fired(cfg.consecutive):
        return Trigger.SLOW, Trigger.SLOW.reason(median=median, over=_pct(median / predicted - 1), predicted=predicted,
                                                 running=_name(running), streak=watches.slow.streak)
    if watches.waits.fired(cfg.consecutive):
        return Trigger.WAITS, Trigger.WAITS.reason(wait=_pct(state.median_wait() or 0.0), level=_pct(cfg.wait_trigger),
                                                   streak=watches.waits.streak)
    bound = state.bounds.get(state.cluster)
    tried = any(version not in state.unplanned for version in state.measured.get(state.cluster, {}))
    if (running in state.unplanned and tried and bound and state.bound_done != state.cluster
            and median > bound * (1 + cfg.bound_gap)):
        return Trigger.BOUND, Trigger.BOUND.reason(running=_name(running), median=median, bound=bound,
                                                   over=_pct(median / bound - 1), cluster=state.cluster)
    return None


def _decide(state: Policy, now: float) -> tuple[Policy, list[Action]]:
    """While waiting, outside cooldown and not paused: restore a known better plan, or search.

    Keep-best: ``measured`` holds, per cluster state, the latest median of every
    plan that ran in it. Whenever the running plan measures more than
    ``restore_gain`` slower than a known plan of the current state for
    ``consecutive`` iterations, that plan is re-installed (a rollback with cause
    ``restore``, evaluated like a commit); right after a cluster change, as soon
    as ``min_samples`` are measured. This is how a cluster state seen before gets
    its best plan back, and how a failed rollback is retried. With none known, a
    cluster change makes a search due once ``min_samples`` are measured in it.
    Restoring passthrough does not answer a cluster change: its search stays due
    (after the restore is measured), so the policy never settles for passthrough
    in a changed cluster without asking the model for a plan that beats it and
    the stale plan (issue 32, item 4)."""
    median = state.median_seconds()
    if state.paused or state.count < state.cooldown_until or median is None:
        return state, []
    best = state.best(excluding=state.running)
    better = best is not None and best[1] < median * (1 - state.config.restore_gain)
    if best is not None and better and (state.due or state.watches.restore.fired(state.config.consecutive)):
        version, seconds = best
        reason = Trigger.RESTORE.reason(version=_name(version), seconds=seconds, cluster=state.cluster,
                                        gain=_pct(1 - seconds / median), running=_name(state.running), median=median)
        due = state.due if version in state.unplanned else ""
        state = replace(state, due=due, pending=Pending(COMMITTING, Trigger.RESTORE, now, version=version))
        return state, [RollBack(version, state.running, Trigger.RESTORE.value, reason)]
    found = _fired(state, median)
    if found is None:
        return state, []
    trigger, reason = found
    request = state.next_request
    state = replace(state, next_request=request + 1,
                    pending=Pending(SEARCHING, trigger, now, request=request, due=state.due))
    return state, [RequestPlan(request, trigger.value, reason)]


def _on_iteration(state: Policy, event: Iteration, now: float) -> tuple[Policy, list[Action]]:
    seconds = event.seconds
    if event.index == state.last_index or not (math.isfinite(seconds) and seconds > 0
                                               and math.isfinite(event.wait_seconds)):
        return state, []
    cfg = state.config
    if event.running_version != state.running:
        trial = state.trial
        if trial is not None and trial.version == event.running_version and not trial.previous_tail:
            tail = tuple(seconds for seconds, _ in state.measurement.window[-cfg.step_iterations:])
            state = replace(state, trial=replace(trial, previous_tail=tail))
        state = replace(_fresh(state), running=event.running_version)
        known = state.measured.get(state.cluster, {}).get(state.running)
        if known is not None:       # re-installed where it ran: drift is measured against its median there
            state = replace(state, measurement=replace(state.measurement, baseline=known))
    measurement = state.measurement.add(seconds, event.wait_seconds, event.channel_seconds, cfg)
    state = replace(state, count=state.count + 1, last_index=event.index, measurement=measurement,
                    passthrough=state.passthrough + (event.running_version == 0))
    quiet = state.quiet()
    if quiet:
        state = replace(state, measurement=state.measurement.settle(cfg))
    median = state.median_seconds()
    if median is not None and quiet:
        known = {**state.measured.get(state.cluster, {}), state.running: median}
        state = replace(state, measured={**state.measured, state.cluster: known})
    state, actions = _watch(state)
    if state.watches.drift.fired(cfg.consecutive) or state.watches.channel.fired(cfg.consecutive):
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
    """Commit the search's plan when its gain is over ``min_gain``. The gain is the
    model's, the new plan against the running plan priced alike; the plan is then
    *expected* to take the running plan's measured median times that ratio
    (:func:`_expected`), and that expectation is its prediction from then on (the
    slow trigger compares with it). The model's absolute time of a live job misses
    what slows every plan alike (on 2 cores, 8 ranks' gloo threads waiting for a
    core: motifs measured 3–4× the calibrated time), and the ratio cancels it."""
    pending, cfg = state.pending, state.config
    if pending is None or pending.what != SEARCHING or pending.request != event.request:
        return state, [Note("ignored", f"result v{event.version} of search r{event.request} ignored: no such "
                            f"search is running")]
    if event.bound_seconds is not None and math.isfinite(event.bound_seconds) and event.bound_seconds > 0:
        state = replace(state, bounds={**state.bounds, state.cluster: event.bound_seconds})
    state = _latch(replace(state, pending=None), pending.trigger)
    median, running = state.settled_seconds(), _name(state.running)
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
        why = (f"only {len(state.measurement.window)} measured iterations of {running}, {cfg.min_samples} are "
               f"needed to compare")
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
        if event.same_as in state.unplanned:
            state = replace(state, unplanned=state.unplanned | {event.version})
    seconds = event.predicted_seconds
    if seconds is not None and math.isfinite(seconds) and seconds > 0:
        state = replace(state, predicted={**state.predicted, event.version: seconds})
    pending, cfg = state.pending, state.config
    state = replace(_cool(state), first_done=True, committed_at=state.count)
    if pending is None or pending.what != COMMITTING or pending.version not in (event.version, event.same_as):
        return state, [Note("committed", f"v{event.version} was committed without this policy asking; not evaluated")]
    state = replace(state, pending=None)
    if pending.trigger is Trigger.TRIAL:
        state, wait = _fruitless(state)
        alias = f" (as v{event.version})" if event.version != pending.version else ""
        known = state.measured.get(state.cluster, {}).get(event.version)
        state = replace(state, trial=Trial(event.version, state.running, None, state.count, known, judged=False))
        return state, [Note("committed", f"rolled back to {_name(pending.version)}{alias}; cooldown {wait} iterations")]
    state = replace(state, fruitless=0)
    before = state.measured.get(state.cluster, {}).get(state.running)
    known = state.measured.get(state.cluster, {}).get(event.version) if pending.trigger is Trigger.RESTORE else None
    state = replace(state, trial=Trial(event.version, state.running, before, state.count, known))
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
def _cancel(state: Policy, why: str, cool: bool = True) -> tuple[Policy, list[Action]]:
    """Drop the search under way, if any; ``cool``: and start a cooldown."""
    pending = state.pending
    if pending is None or pending.what != SEARCHING:
        return state, []
    return replace(_cool(state) if cool else state, pending=None), [
        CancelSearch(pending.request, f"search r{pending.request} cancelled: {why}")]


def _changed(state: Policy, cluster: str, due: str, keep: tuple[tuple, tuple] = ((), ()),
             measured: bool = False) -> tuple[Policy, list[Action]]:
    """Enter cluster state ``cluster`` (``due``: why); the last action is the ``cluster`` note.
    ``keep``: iterations (and their channel seconds) of the running plan already measured in the
    new state; they count in it, past warm-up. ``measured``: the running plan's iterations showed
    the change and no trial is left to judge it (a drift seen in them, :func:`_drifted`).

    A cooldown running from the old state ends, except what the last commit needs
    (no two switches within one cooldown, unless ``measured``: the commit's cooldown is there so
    that the switch's effect is measured, and it was, on a cluster that has since changed. A
    change seen from a trial's warm-up on (:func:`_stale_early`, :func:`_stepped`) comes about 13
    iterations after the commit, and with ``min_samples`` measured in the new state its search
    would still wait for the demo's 20-iteration cooldown): it waited out a search that found
    nothing worth committing there, or a failure there, and neither says anything
    about the new state. (The DLRM loop's drift was seen 14 iterations after the
    NIC slowed, and the cooldown of a search in the old state that committed
    nothing held the new state's search back 14 more iterations.) Cancelling a
    search of the old state starts no cooldown either: in three loop runs one was
    under way when the drift was seen, and its cooldown held the new state's
    search back 20 iterations. And the old state's run of searches that changed
    nothing ends: the new state's first fruitless search backs off as the first
    one does (in a DLRM loop run the old state's one such search made the new
    state's first, which found 4.3 %, wait 80 iterations instead of 40)."""
    old, (window, channels) = state.cluster, keep
    trial = None if state.trial is None else replace(state.trial, previous_seconds=None)
    held = state.count if measured else _switch_cooldown(state)
    state = replace(_fresh(state), cluster=cluster, due=due, trial=trial, watches=Watches(),   # every trigger armed
                    cooldown_until=min(state.cooldown_until, held), fruitless=0)
    if window:
        state = replace(state, measurement=Measurement(since_switch=state.config.warmup + len(window), window=window,
                                                       channel_window=channels))
    state, actions = _cancel(state, "it was for the old cluster state", cool=False)
    best = state.best()
    known = f"best known plan there: {_name(best[0])} ({best[1]:.3f} s)" if best else "no plan known there"
    left = max(state.config.min_samples - len(window), 0)
    when = (f"deciding once {left} more iteration(s) are measured" if left else "deciding now") + (
        f" (the last {len(window)} count in it)" if window else "")
    return state, actions + [Note("cluster", f"{due}; measurements of {old} no longer count; {known}; {when}")]


def _switch_cooldown(state: Policy) -> int:
    """The count before which the last commit forbids another switch (now if none does)."""
    if state.committed_at is None:
        return state.count
    return max(state.count, state.committed_at + state.config.cooldown)


def _on_cluster(state: Policy, event: ClusterChanged, now: float) -> tuple[Policy, list[Action]]:
    if event.cluster == state.cluster:
        return state, []
    return _changed(state, event.cluster, f"cluster state changed from {state.cluster} to {event.cluster}")


def _on_pause(state: Policy, event: Pause, now: float) -> tuple[Policy, list[Action]]:
    """Pause freezes plans: a running search is cancelled, nothing is requested,
    committed or rolled back (a trial's verdict waits for Resume); measuring goes on."""
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
    asked = Trigger.OPERATOR.reason(reason=f": {event.reason}" if event.reason else "")
    if state.paused:
        return state, [Note("ignored", f"{asked}; replanning is paused (resume it first)")]
    if state.pending is not None:
        what = "search" if state.pending.what == SEARCHING else "commit"
        return state, [Note("ignored", f"{asked}; the {state.pending.trigger.value} {what} under way decides")]
    if state.trial is not None:
        return state, [Note("ignored", f"{asked}; {_name(state.trial.version)} is still being measured against "
                                       f"{_name(state.trial.previous)}")]
    request = state.next_request
    state = replace(state, next_request=request + 1,
                    pending=Pending(SEARCHING, Trigger.OPERATOR, now, request=request))
    return state, [RequestPlan(request, Trigger.OPERATOR.value, asked)]


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
    before = state.pending
    state, actions = _timeouts(state, now)
    state, more = handler(state, event, now)
    if before is not None and before.what == SEARCHING and state.pending != before:   # however it ended
        state = replace(state, search_ended=state.count)
    return state, actions + more
