"""The replanning policy's settings (:class:`PolicyConfig`), set per job
(``p2 serve --policy KEY=VALUE``), each with the reason for its default.

The sources: Syndicate §4.4, paragraph "Replanning": "If wait times in every
iteration consistently add up to more than a threshold (= 5% of iteration
time), then we redo joint optimization"; ARCHITECTURE.md adds a first plan
after N passthrough iterations, replanning when the measured iteration time
exceeds the prediction, a gain threshold for commits, a cooldown, and rollback
when a new plan measures slower. The measured figures quoted below are from the
2-core emulated cluster."""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError


@dataclass(frozen=True)
class PolicyConfig:
    """Thresholds are fractions, counts are iterations, ``pending_timeout`` is seconds."""

    first_plan_after: int = 20
    """Passthrough iterations before the first search: enough for ``warmup`` plus
    ``min_samples`` measured ones, so the first search's gain is judged against a
    median, still early in any real run."""

    warmup: int = 5
    """Iterations ignored after every switch, cluster change and at start (allocator
    growth, lazily built communicators, first touch of channels)."""

    window: int = 20
    """Statistics are medians over the last ``window`` measured iterations of the
    running plan: one noisy (or stalled, e.g. checkpointing) iteration moves a median
    by one rank only."""

    min_samples: int = 10
    """Measured iterations a median needs; with fewer nothing is decided or committed."""

    min_gain: float = 0.05
    """Commit a search's plan only for a predicted gain strictly above 5 %: the size of
    Syndicate's 5 % wait threshold, and above the run-to-run noise of a median. The
    gain is the model's ``1 - predicted / running``, the new plan against the running
    one priced alike (same traces, re-fitted topology and scheduler)."""

    slow_trigger: float = 0.15
    """Search when the median is more than 15 % over the running plan's prediction for
    ``consecutive`` iterations: three times ``min_gain``, an error that size means the
    search's ranking may be wrong, not just its constants."""

    slow_clear: float = 0.10
    """Once the slow trigger led to a search it is armed again only after
    ``consecutive`` medians in a row below 10 % over the prediction (hysteresis)."""

    wait_trigger: float = 0.05
    """Search when the median of dispatcher waits / iteration time, under a plan, is
    over 5 % (Syndicate's threshold) for ``consecutive`` iterations."""

    wait_clear: float = 0.03
    """The waits trigger's level for being armed again, as ``slow_clear``."""

    consecutive: int = 10
    """How many iterations in a row a condition must hold (or, latched, be clear) to
    count. Syndicate's "consistently" and the issue's "for M consecutive iterations"
    read as: the *median over the window* crosses the level at that many consecutive
    iterations; a single iteration never counts."""

    cooldown: int = 30
    """Iterations after every search, commit, rollback and failure during which nothing
    else is decided: a switch's effect must be measured (``warmup`` + ``evaluate`` = 25)
    first."""

    max_backoff: int = 8
    """After k searches or commits in a row that changed nothing (not committed, failed,
    rolled back) the cooldown is ``cooldown * min(2**k, max_backoff)``: no tight retry
    loop, and noise near a threshold costs at most one search per 240 iterations."""

    evaluate: int = 20
    """A committed plan is measured for this many iterations after its warm-up, then
    kept or rolled back (``rollback_margin``); rolled back sooner when every iteration after
    the switch's first, ``step_iterations`` of them, measured more than ``drift_trigger`` over
    the previous plan's median (``policy._slow_from_the_start``)."""

    rollback_margin: float = 0.03
    """Roll a new plan back when its median is more than 3 % over the previous plan's:
    below ``min_gain``, so a kept plan is never "known worse" by enough to be restored
    straight away (no ping-pong)."""

    restore_gain: float = 0.10
    """Re-install a known plan only when it measured 10 % faster than the running one's
    median for ``consecutive`` iterations in a row: twice ``min_gain``, as a restore
    compares medians taken at different times, which carry the drift of the machine,
    not only the plan."""

    bound_gap: float = 0.25
    """Search again from passthrough when it measures more than 25 % over the lower
    bound of its cluster state (the last search's there) after a plan was tried in
    it (rolled back, or passthrough restored): once per cluster state. The bound
    says a plan can gain that much; the next search knows the tried plan's motif
    times (the service carries the fit of the state forward). 25 %: above the
    10–15 % the window median of one plan moves, so noise does not start it."""

    drift_trigger: float = 0.20
    """A running plan's median more than 20 % away from its *baseline* for
    ``consecutive`` iterations means the cluster changed under the job (a NIC
    throttled, a neighbour's traffic): larger than the 5–15 % that medians of one plan
    moved between windows. The baseline is the median over the second full ``window``
    after the warm-up (the first is the trial's, and a new plan was still settling then);
    until then a kept plan's is its trial's median, provisionally, and only a median
    over that counts."""

    step_iterations: int = 4
    """Inside a trial (issue 32), a *step*: this many measured iterations in a row, each
    more than ``drift_trigger`` over the median of the trial's iterations before them
    (at least as many), or over a re-installed plan's own median in the cluster state
    (its warm-up's iterations counted but the switch's first). Also how many iterations after
    a switch's first show a trial's plan slower than the plan before it from the start (a
    rollback, or a drift where that plan's last ones were slow too; ``policy._stale_early``).
    The cluster changed during the trial, and the trial's comparison with the plan
    before it would compare two cluster states. Four: in the loop runs of six jobs, an
    iteration was more than 20 % over the median of its plan's earlier ones 40 times in
    468, and four in a row happened twice, both while a search ran beside the job on the
    same two cores (no search runs during a trial); a NIC slowed 4× makes every
    iteration 1.5–3.5× slower. (In 3 of 12 loop runs the NIC slowed during a trial: the
    trial's plan was rolled back as slower, the plan re-installed needed the drift
    watch's ``warmup`` + ``min_samples`` + ``consecutive`` iterations to show the change,
    and the replan came 38–44 iterations after the change.)"""

    channel_drift: float = 0.50
    """The same per channel, on the motif seconds the ranks report per channel relative
    to channel 0's: a channel whose motifs take 1.5× (or 1/1.5×) their baseline time
    *against channel 0's* changed. Relative to channel 0 because CPU contention slows
    every channel alike (and is no reason to move traffic); a slowed NIC shows there long
    before it shows in the iteration time (a NIC slowed 4× made its motifs about 1.6×
    slower against the other's, and the iteration not measurably slower: the plan's
    motifs on it were mostly hidden behind compute)."""

    switch_within: int = 200
    """Ranks switch at the coordinator's next switch boundary; a committed plan not
    running this many iterations after the commit is not evaluated."""

    pending_timeout: float = 600.0
    """A search or commit without an answer for this long is taken as failed (the search
    is cancelled; a late answer is ignored)."""

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.min_samples <= self.evaluate <= self.window:
            problems.append(f"1 <= min_samples <= evaluate <= window (got {self.min_samples}, {self.evaluate}, "
                            f"{self.window})")
        if self.warmup < 0 or self.first_plan_after < self.warmup + self.min_samples:
            problems.append(f"0 <= warmup and first_plan_after >= warmup + min_samples (got {self.warmup}, "
                            f"{self.first_plan_after})")
        if not (0 <= self.slow_clear <= self.slow_trigger and 0 <= self.wait_clear <= self.wait_trigger):
            problems.append("0 <= slow_clear <= slow_trigger and 0 <= wait_clear <= wait_trigger")
        if not (0 <= self.min_gain < 1 and self.rollback_margin >= 0):
            problems.append(f"0 <= min_gain < 1 and rollback_margin >= 0 (got {self.min_gain}, {self.rollback_margin})")
        if not (self.min_gain <= self.restore_gain < 1 and 0 < self.drift_trigger and 0 < self.channel_drift
                and 0 < self.bound_gap):
            problems.append(f"min_gain <= restore_gain < 1, drift_trigger > 0, channel_drift > 0 and bound_gap > 0 "
                            f"(got {self.restore_gain}, {self.drift_trigger}, {self.channel_drift}, "
                            f"{self.bound_gap})")
        if (min(self.consecutive, self.cooldown, self.max_backoff, self.switch_within, self.step_iterations) < 1
                or self.pending_timeout <= 0):
            problems.append("consecutive, cooldown, max_backoff, switch_within, step_iterations >= 1 and "
                            "pending_timeout > 0")
        if problems:
            raise InvalidInputError("replanning policy config needs " + "; ".join(problems))
