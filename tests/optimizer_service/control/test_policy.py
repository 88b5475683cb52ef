"""The replanning policy's rules (issue 16; Syndicate §4.4 "Replanning"): the
first plan, the gain threshold, the slow and waits triggers with hysteresis,
cooldown and backoff, trials and rollback, the best plan per cluster state,
failures and timeouts, pause/resume, noise, and a property over arbitrary
event sequences. Pure: no processes, the clock is a number."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from optimizer_service.control.policy import (
    CancelSearch,
    ClusterChanged,
    Commit,
    CommitFailed,
    Committed,
    Iteration,
    Note,
    Pause,
    Policy,
    PolicyConfig,
    ReplanNow,
    RequestPlan,
    Resume,
    RollBack,
    SearchDone,
    SearchFailed,
    Tick,
    drifted_from,
    step,
)
from optimizer_service.errors import InvalidInputError

CFG = PolicyConfig()
PASSTHROUGH = 0.2          # seconds per iteration before any plan
PREDICTED = 0.175          # v1's prediction (12.5 % better than passthrough)


def feed(state, seconds, n=1, *, wait=0.0, version=None, now=0.0):
    """``n`` iterations taking ``seconds`` each (or one per item of a list),
    with ``wait`` the fraction of each spent in dispatcher waits."""
    times = list(seconds) if isinstance(seconds, list) else [seconds] * n
    actions = []
    for value in times:
        index = 0 if state.last_index is None else state.last_index + 1
        running = state.running if version is None else version
        state, more = step(state, Iteration(index, value, wait * value, running), now)
        actions += more
    return state, actions


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def notes(actions, kind):
    return [a for a in actions if isinstance(a, Note) and a.kind == kind]


def first_request(config=CFG, seconds=PASSTHROUGH):
    state, actions = feed(Policy.new("A", config), seconds, config.first_plan_after)
    [request] = of(actions, RequestPlan)
    return state, request


def running_plan(predicted=PREDICTED, measured=PREDICTED, config=CFG, passthrough=PASSTHROUGH):
    """A job that committed v1 (``predicted``) over passthrough, measured it at
    ``measured`` and kept it; the cooldown of the commit still has 5 iterations."""
    state, request = first_request(config, passthrough)
    state, actions = step(state, SearchDone(request.request, 1, predicted), 0.0)
    assert of(actions, Commit)
    state, _ = step(state, Committed(1, predicted), 0.0)
    state, actions = feed(state, measured, config.warmup + config.evaluate, version=1)
    assert notes(actions, "kept") and state.trial is None and state.running == 1
    return state


# ---------------------------------------------------------------- first plan and gain threshold
def test_the_first_plan_is_requested_after_n_passthrough_iterations_not_before():
    state, actions = feed(Policy.new("A"), PASSTHROUGH, CFG.first_plan_after - 1)
    assert actions == [] and state.phase == "waiting"
    state, actions = feed(state, PASSTHROUGH)
    [request] = actions
    assert isinstance(request, RequestPlan) and request.trigger == "first" and request.request == 1
    assert "after 20 passthrough iterations" in request.reason and state.phase == "searching"
    assert str(request).startswith("replan: first plan")


def test_the_number_of_passthrough_iterations_is_configurable():
    config = PolicyConfig(first_plan_after=40)
    state, actions = feed(Policy.new("A", config), PASSTHROUGH, 39)
    assert not of(actions, RequestPlan)
    assert of(feed(state, PASSTHROUGH)[1], RequestPlan)


@pytest.mark.parametrize("gain, committed", [(0.049, False), (0.051, True)])
def test_a_result_is_committed_only_for_a_predicted_gain_above_the_threshold(gain, committed):
    state, request = first_request()
    predicted = PASSTHROUGH * (1 - gain)
    state, actions = step(state, SearchDone(request.request, 7, predicted), 0.0)
    if committed:
        [commit] = actions
        assert isinstance(commit, Commit) and commit.version == 7
        assert commit.baseline_seconds == PASSTHROUGH and commit.gain == pytest.approx(gain)
        assert "5.1 % is over the threshold 5.0 %" in commit.reason and state.phase == "committing"
    else:
        [note] = actions
        assert note.kind == "not-committed" and "predicted gain 4.9 % is below the threshold 5.0 %" in note.reason
        assert state.phase == "waiting" and state.running == 0


def test_the_gain_is_measured_against_the_median_not_one_noisy_iteration():
    state = Policy.new("A")
    times = [PASSTHROUGH] * (CFG.first_plan_after - 1) + [10.0]      # a stalled last iteration
    state, actions = feed(state, times)
    [request] = of(actions, RequestPlan)
    state, actions = step(state, SearchDone(request.request, 1, 0.195), 0.0)       # 2.5 % under the median
    assert "predicted gain 2.5 % is below" in notes(actions, "not-committed")[0].reason
    state, actions = step(first_request()[0], SearchDone(request.request, 1, PASSTHROUGH * 0.95), 0.0)
    assert notes(actions, "not-committed"), "a gain of exactly the threshold does not exceed it"


def test_with_the_running_plan_priced_the_gain_is_the_model_s_ratio_on_the_measured_median():
    # the model's times are 2.5x too low for this job, but alike for both plans
    state, request = first_request()
    state, actions = step(state, SearchDone(request.request, 3, 0.060, running_seconds=0.080), 0.0)
    [commit] = actions
    assert isinstance(commit, Commit) and commit.gain == pytest.approx(0.25)
    assert commit.predicted_seconds == pytest.approx(PASSTHROUGH * 0.75)          # expected: 0.15 s, not 0.06 s
    assert "prices v3 at 0.060 s and passthrough at 0.080 s" in commit.reason
    state, _ = step(state, Committed(3, commit.predicted_seconds), 0.0)
    assert state.predicted[3] == pytest.approx(0.15)
    # a result the model finds only 3 % faster is not committed, however far under the median it lies
    state, request = first_request()
    state, actions = step(state, SearchDone(request.request, 4, 0.0776, running_seconds=0.080), 0.0)
    assert "predicted gain 3.0 % is below the threshold" in notes(actions, "not-committed")[0].reason


# ---------------------------------------------------------------- triggers and hysteresis
@pytest.mark.parametrize("over, fires", [(0.149, False), (0.151, True)])
def test_slow_trigger_needs_the_median_over_the_prediction_for_m_iterations(over, fires):
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)          # cooldown over, steady
    # the median of 20 turns after 11 slow iterations; 10 medians in a row must be over
    state, actions = feed(state, PREDICTED * (1 + over), 19, version=1)
    assert not of(actions, RequestPlan)
    state, actions = feed(state, PREDICTED * (1 + over), 1 if fires else 200, version=1)
    requests = of(actions, RequestPlan)
    if fires:
        [request] = requests
        assert request.trigger == "slow"
        assert "is 15.1 % over the predicted 0.175 s of v1 for 10 iterations" in request.reason
    else:
        assert requests == []


@pytest.mark.parametrize("fraction, fires", [(0.049, False), (0.051, True)])
def test_waits_trigger_at_five_percent_of_the_iteration(fraction, fires):
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)
    state, actions = feed(state, PREDICTED, 19, wait=fraction, version=1)
    assert not of(actions, RequestPlan)
    state, actions = feed(state, PREDICTED, 1 if fires else 200, wait=fraction, version=1)
    assert [r.trigger for r in of(actions, RequestPlan)] == (["waits"] if fires else [])


def test_waits_in_passthrough_never_trigger():
    state, request = first_request()
    state, _ = step(state, SearchDone(request.request, 1, PASSTHROUGH), 0.0)      # not committed
    state, actions = feed(state, PASSTHROUGH, 500, wait=0.5)
    assert not of(actions, RequestPlan)


def test_hysteresis_a_fired_trigger_rearms_only_below_the_clear_level():
    slow, between, low = PREDICTED * 1.2, PREDICTED * 1.12, PREDICTED * 1.05
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)
    state, actions = feed(state, slow, 30, version=1)
    [request] = of(actions, RequestPlan)
    state, actions = step(state, SearchDone(request.request, 2, slow), 0.0)          # no better plan
    assert notes(actions, "not-committed") and state.watches.slow.latched
    # between the clear (10 %) and trigger (15 %) levels, and back over: latched, nothing
    state, actions = feed(state, [between] * 100 + [slow] * 100, version=1)
    assert not of(actions, RequestPlan) and not notes(actions, "cleared")
    # 10 medians in a row below 10 % re-arm it; slow again, it fires again
    state, actions = feed(state, low, 20, version=1)
    assert notes(actions, "cleared") and not state.watches.slow.latched
    state, actions = feed(state, slow, 300, version=1)
    assert [r.trigger for r in of(actions, RequestPlan)] == ["slow"]


def test_without_hysteresis_noise_at_the_trigger_level_asks_far_more_often():
    def requests(clear):       # the drift trigger off: the 15 % step from v1's baseline is one (test below)
        config = PolicyConfig(slow_clear=clear, drift_trigger=1.0)
        return noisy_run(config, center=PREDICTED * 1.15, iterations=5000, seed=1)[0]
    with_hysteresis, without = requests(0.10), requests(0.15)
    # without, only the backoff bounds it (one search per 240 iterations)
    assert with_hysteresis <= 4 and without >= 15 and 4 * with_hysteresis <= without


# ---------------------------------------------------------------- noise
def noisy_run(config, center, iterations, seed, jitter=0.10):
    """v1 runs; every iteration is ``center`` ± ``jitter`` (seeded); every search
    answers with a plan predicted as fast as the median now (no gain); passthrough
    was far slower, so no known plan is better either. Returns (requests,
    switches) after v1 was committed."""
    state = running_plan(config=config, passthrough=0.4)
    rng = random.Random(seed)
    requests = switches = 0
    for _ in range(iterations):
        state, actions = feed(state, center * (1 + rng.uniform(-jitter, jitter)), version=1)
        switches += len(of(actions, Commit)) + len(of(actions, RollBack))
        for request in of(actions, RequestPlan):
            requests += 1
            state, more = step(state, SearchDone(request.request, 100 + requests, state.median_seconds()), 0.0)
            switches += len(of(more, Commit))
    return requests, switches


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jitter_around_the_prediction_never_asks_for_anything(seed):
    assert noisy_run(CFG, PREDICTED, 5000, seed) == (0, 0)


@pytest.mark.parametrize("level", [1.05, 1.10, 1.13, 1.15, 1.17, 1.25])
def test_jitter_anywhere_asks_at_most_once_per_backed_off_cooldown(level):
    iterations = 5000
    requests, switches = noisy_run(CFG, PREDICTED * level, iterations, seed=3)
    assert switches == 0
    assert requests <= 1 + iterations // (CFG.cooldown * CFG.max_backoff)


def test_one_stalled_iteration_changes_nothing():
    state, _ = feed(running_plan(), PREDICTED, 50, version=1)
    state, actions = feed(state, [PREDICTED] * 10 + [PREDICTED * 20] + [PREDICTED] * 100, version=1)
    assert actions == [] and state.median_seconds() == PREDICTED


# ---------------------------------------------------------------- cooldown and backoff
def test_no_request_during_the_cooldown_after_a_commit():
    state, request = first_request()
    state, _ = step(state, SearchDone(request.request, 1, 0.1), 0.0)
    state, _ = step(state, Committed(1, 0.1), 0.0)
    # v1 measures 0.19 s (kept: faster than passthrough) but 90 % over its prediction
    state, actions = feed(state, 0.19, CFG.cooldown - 1, version=1)
    assert not of(actions, RequestPlan) and state.watches.slow.streak >= CFG.consecutive
    state, actions = feed(state, 0.19, 1, version=1)
    assert [r.trigger for r in of(actions, RequestPlan)] == ["slow"]


def test_failed_searches_back_off_and_never_loop_tightly():
    state, request = first_request()
    gaps, count = [], state.count
    for _ in range(4):
        state, actions = step(state, SearchFailed(request.request, "the search crashed"), 0.0)
        [note] = actions
        assert note.kind == "search-failed" and "the search crashed" in note.reason and state.phase == "waiting"
        for _ in range(1000):
            state, actions = feed(state, PASSTHROUGH)
            if actions:
                break
        [request] = of(actions, RequestPlan)
        assert request.trigger == "first"
        gaps.append(state.count - count)
        count = state.count
    assert gaps == [60, 120, 240, 240]


def test_a_result_for_a_failed_or_unknown_search_is_ignored():
    state, request = first_request()
    state, _ = step(state, SearchFailed(request.request, "killed"), 0.0)
    state, actions = step(state, SearchDone(request.request, 1, 0.01), 0.0)
    assert [a.kind for a in actions] == ["ignored"] and state.phase == "waiting"
    state, actions = step(state, SearchFailed(99, "?"), 0.0)
    assert [a.kind for a in actions] == ["ignored"]


def test_an_aborted_commit_waits_then_searches_again():
    state, request = first_request()
    state, _ = step(state, SearchDone(request.request, 1, 0.1), 0.0)
    state, actions = step(state, CommitFailed(5, "not ours"), 0.0)
    assert [a.kind for a in actions] == ["ignored"] and state.phase == "committing"
    state, actions = step(state, CommitFailed(1, "rank 2 voted no: no such group"), 0.0)
    [note] = actions
    assert note.kind == "commit-failed" and "rank 2 voted no" in note.reason and "keeping passthrough" in note.reason
    state, actions = feed(state, PASSTHROUGH, 2 * CFG.cooldown - 1)
    assert not of(actions, RequestPlan)
    assert [r.trigger for r in of(feed(state, PASSTHROUGH)[1], RequestPlan)] == ["first"]


def test_a_search_or_commit_without_an_answer_times_out():
    state, request = first_request()
    state, actions = step(state, Tick(), CFG.pending_timeout - 1)
    assert actions == [] and state.phase == "searching"
    state, actions = step(state, Tick(), CFG.pending_timeout)
    assert [type(a) for a in actions] == [CancelSearch, Note] and actions[0].request == request.request
    assert state.phase == "waiting"
    state, actions = feed(state, PASSTHROUGH, 2 * CFG.cooldown, now=1000.0)
    [request] = of(actions, RequestPlan)
    state, _ = step(state, SearchDone(request.request, 1, 0.1), 1000.0)
    state, actions = step(state, Tick(), 1000.0 + CFG.pending_timeout)
    assert notes(actions, "timeout") and state.phase == "waiting" and state.pending is None


def test_a_commit_the_policy_did_not_ask_for_is_recorded_and_starts_a_cooldown():
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)
    state, actions = step(state, Committed(9, 0.1), 0.0)                 # an operator's p2 plan submit
    assert [a.kind for a in actions] == ["committed"] and "without this policy asking" in actions[0].reason
    assert state.trial is None and state.predicted[9] == 0.1
    # v9 measures 0.18 s, 80 % over its prediction: a search, but only after the cooldown
    state, actions = feed(state, 0.18, CFG.cooldown - 1, version=9)
    assert not of(actions, RequestPlan)
    assert [r.trigger for r in of(feed(state, 0.18, version=9)[1], RequestPlan)] == ["slow"]


# ---------------------------------------------------------------- trials and rollback
def slower_candidate(measured_new, config=CFG):
    """v1 got slow (0.21 s); a search found v2 (predicted 0.15 s), committed; v2 measures ``measured_new``."""
    return feed(committed_candidate(config), measured_new, config.warmup + config.evaluate, version=2)


def committed_candidate(config=CFG):
    """:func:`slower_candidate` up to v2's first iteration."""
    state, _ = feed(running_plan(config=config), PREDICTED, 10, version=1)
    state, actions = feed(state, 0.21, 30, version=1)
    [request] = of(actions, RequestPlan)
    state, actions = step(state, SearchDone(request.request, 2, 0.15), 0.0)
    [commit] = of(actions, Commit)
    assert commit.baseline_seconds == 0.21
    state, actions = step(state, Committed(2, 0.15), 0.0)
    assert "against v1's 0.210 s" in notes(actions, "committed")[0].reason
    state, _ = feed(state, 0.21, 3, version=1)                      # the switch boundary is ahead
    return state


@pytest.mark.parametrize("slower, rolled_back", [(0.029, False), (0.031, True)])
def test_a_new_plan_measured_slower_than_the_previous_one_is_rolled_back(slower, rolled_back):
    state, actions = slower_candidate(0.21 * (1 + slower))
    if rolled_back:
        [rollback] = of(actions, RollBack)
        assert (rollback.to_version, rollback.from_version, rollback.cause) == (1, 2, "trial")
        assert "3.1 % slower than v1's 0.210 s" in rollback.reason and state.phase == "committing"
    else:
        assert not of(actions, RollBack) and notes(actions, "kept") and state.phase == "waiting"


def changed_while_searching(search_seconds, new_seconds, tail=None):
    """v1 kept at 0.175 s; a search starts, and v1 measures ``search_seconds`` from then to the switch
    (4 iterations after the commit; ``tail``: those 4 instead); the search's v2 then measures
    ``new_seconds`` (or a list of seconds, in turn) for its trial."""
    state, [request] = step(running_plan(), ReplanNow("look"), 0.0)
    state, _ = feed(state, search_seconds, 3, version=1)
    state, actions = step(state, SearchDone(request.request, 2, 0.15, running_seconds=PREDICTED), 0.0)
    [commit] = of(actions, Commit)
    assert commit.baseline_seconds == PREDICTED                     # the quiet median from before the search
    state, _ = step(state, Committed(2, 0.15), 0.0)
    for seconds in tail or [search_seconds] * 4:
        state, _ = feed(state, seconds, 1, version=1)
    if isinstance(new_seconds, list):
        return feed(state, new_seconds[:CFG.warmup + CFG.evaluate], version=2)
    return feed(state, new_seconds, CFG.warmup + CFG.evaluate, version=2)


def test_a_trial_compared_with_a_median_from_before_a_change_drifts_instead_of_rolling_back():
    """The DLRM loop runs: the NIC slows while the search runs. v2 (searched on the old window)
    measures 0.35 s, twice v1's 0.175 s median, but v1's last iterations before the switch measured
    0.45 s: the cluster changed, v2 stays, and its trial's iterations are the new state's first. That
    shows once v2's iterations after the switch's first are ``step_iterations`` (its warm-up's
    count), not at the trial's verdict; and the new state's search waits for ``min_samples`` there,
    not for the commit's cooldown (the switch's effect was measured, on a changed cluster)."""
    state, [request] = step(running_plan(), ReplanNow("look"), 0.0)
    state, _ = feed(state, 0.45, 3, version=1)
    state, actions = step(state, SearchDone(request.request, 2, 0.15, running_seconds=PREDICTED), 0.0)
    state, _ = step(state, Committed(2, 0.15), 0.0)
    state, _ = feed(state, 0.45, 4, version=1)
    state, actions = feed(state, 0.35, CFG.step_iterations, version=2)
    assert not notes(actions, "drift") and state.trial is not None    # the switch's first does not count
    state, actions = feed(state, 0.35, 1, version=2)
    [drift] = notes(actions, "drift")
    assert not of(actions, RollBack) and state.running == 2 and state.cluster == "A~d1" and state.trial is None
    # a drift state of A (the service's searches there start from A's last fit, values only), and of A~d1 the next
    assert drifted_from("A~d1", "A") and drifted_from("A~d2", "A~d1")
    assert not drifted_from("A", "A") and not drifted_from("B", "A") and not drifted_from("B~d1", "A")
    assert ("v2 measured 5 iterations in a row after the switch each more than 20.0 % over v1's 0.175 s (the last "
            "0.350 s), and v1's last 4 iterations before the switch each measured more than 20.0 % over its median "
            "too (the last 0.450 s): the cluster changed before the trial, not under v2 alone; v2 is kept") \
        in drift.reason
    assert [seconds for seconds, _ in state.measurement.window] == [0.35] * (CFG.step_iterations + 1)
    requests, waited = [], 0
    while not requests:
        state, more = feed(state, 0.35, 1, version=2)
        requests, waited = of(more, RollBack) + of(more, RequestPlan), waited + 1
    assert isinstance(requests[0], RequestPlan) and requests[0].trigger == "cluster"
    assert waited == CFG.min_samples - CFG.step_iterations - 1 and state.count < state.committed_at + CFG.cooldown


def test_a_trial_as_slow_after_a_stale_tail_still_drifts_at_its_verdict():
    """v2's iterations are not each over v1's median (one in four under it), so nothing shows before the
    verdict; its median is, and v1's tail was stale: the verdict takes the change."""
    state, actions = changed_while_searching(0.45, [0.35, 0.35, 0.35, 0.2] * 7)
    [drift] = notes(actions, "drift")
    assert "v2 measured 0.350 s over 20 iterations, 100.0 % slower than v1's 0.175 s" in drift.reason
    assert not of(actions, RollBack) and state.cluster == "A~d1"


@pytest.mark.parametrize("search_seconds, new_seconds", [(0.19, 0.35), (0.45, 0.20)])
def test_a_trial_is_rolled_back_as_before_unless_both_plans_show_the_change(search_seconds, new_seconds):
    """v1 only a little slower while the search ran (the search's own load), or v2 slower than v1's
    median but within ``drift_trigger``: the comparison stands and v2 is rolled back."""
    state, actions = changed_while_searching(search_seconds, new_seconds)
    [rollback] = of(actions, RollBack)
    assert rollback.cause == "trial" and not notes(actions, "drift") and state.cluster == "A"


@pytest.mark.parametrize("slow, drifted", [(1, False), (2, True), (3, True)])
def test_a_change_in_the_previous_plan_s_last_iterations_before_the_switch_counts_from_the_end(slow, drifted):
    """The DLRM loop run: the NIC slowed three iterations before the ranks switched; v1's last three
    measured 0.35–0.43 s against its 0.215 s median, the one before them 0.233 s. Two slow ones in a
    row at the end of the tail and a trial as slow: the cluster changed, v2 is kept. One: chance
    (7 % of iterations are 20 % over their plan's median), and v2 is rolled back."""
    tail = [PREDICTED] * (4 - slow) + [0.45] * slow
    state, actions = changed_while_searching(PREDICTED, 0.35, tail)
    if drifted:
        [drift] = notes(actions, "drift")
        assert not of(actions, RollBack) and state.running == 2 and state.cluster == "A~d1"
        assert (f"v1's last {slow} iterations before the switch each measured more than 20.0 % over its median too "
                "(the last 0.450 s)") in drift.reason
    else:
        [rollback] = of(actions, RollBack)
        assert rollback.cause == "trial" and not notes(actions, "drift") and state.cluster == "A"


def test_a_rollback_reinstalled_under_a_new_version_takes_its_numbers_along():
    state, _ = slower_candidate(0.25)
    state, actions = step(state, Committed(3, PREDICTED, same_as=1), 0.0)
    assert "rolled back to v1 (as v3)" in notes(actions, "committed")[0].reason
    assert state.measured["A"][3] == 0.21 and 1 not in state.measured["A"]
    # the re-installed plan is watched against its own median, not judged
    assert (state.trial.version, state.trial.known_seconds, state.trial.judged) == (3, 0.21, False)
    assert state.predicted[3] == PREDICTED
    # the rollback changed nothing: a longer cooldown, and the slow trigger stays latched (no ping-pong)
    state, actions = feed(state, 0.21, 1000, version=3)
    assert not of(actions, RequestPlan) and not of(actions, RollBack)


def test_a_trial_verdict_waits_while_paused():
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)
    state, actions = feed(state, 0.21, 30, version=1)
    [request] = of(actions, RequestPlan)
    state, _ = step(state, SearchDone(request.request, 2, 0.15), 0.0)
    state, _ = step(state, Committed(2, 0.15), 0.0)
    state, actions = step(state, Pause("incident"), 0.0)
    assert [a.kind for a in actions] == ["paused"] and "incident" in actions[0].reason
    state, actions = feed(state, 0.25, 200, version=2)
    assert not of(actions, RollBack) and state.trial is not None
    state, actions = step(state, Resume(), 0.0)
    assert [a.kind for a in actions] == ["resumed"]
    state, actions = feed(state, 0.25, version=2)
    assert [r.to_version for r in of(actions, RollBack)] == [1]


# ---------------------------------------------------------------- cluster states
def test_a_cluster_change_triggers_replanning_once_the_new_state_is_measured():
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)
    state, actions = step(state, ClusterChanged("B"), 0.0)
    [note] = actions
    assert note.kind == "cluster" and "from A to B" in note.reason and "no plan known there" in note.reason
    state, actions = feed(state, 0.25, CFG.warmup + CFG.min_samples - 1, version=1)
    assert not of(actions, RequestPlan)
    state, actions = feed(state, 0.25, version=1)
    [request] = of(actions, RequestPlan)
    assert request.trigger == "cluster" and "from A to B" in request.reason
    # A's numbers no longer count: the gain is judged against v1 as measured in B
    state, actions = step(state, SearchDone(request.request, 2, 0.2), 0.0)
    [commit] = of(actions, Commit)
    assert commit.baseline_seconds == 0.25 and commit.gain == pytest.approx(0.2)


def test_a_cooldown_from_the_old_cluster_state_does_not_hold_back_the_new_states_search():
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)
    state, actions = feed(state, 0.21, 30, version=1)                  # slow: a search finds nothing worth it
    [request] = of(actions, RequestPlan)
    state, actions = step(state, SearchDone(request.request, 2, 0.208), 0.0)
    assert notes(actions, "not-committed") and state.cooldown_until > state.count
    state, actions = step(state, ClusterChanged("B"), 0.0)
    assert state.cooldown_until <= state.count
    state, actions = feed(state, 0.25, CFG.warmup + CFG.min_samples, version=1)
    [request] = of(actions, RequestPlan)
    assert request.trigger == "cluster"
    # nor does the old state's run of searches that changed nothing lengthen the new state's cooldown
    # (the DLRM loop: 80 iterations after the new state's first search found 4.3 %, where 40 are the first step)
    state, actions = step(state, SearchDone(request.request, 3, 0.245), 0.0)
    [note] = notes(actions, "not-committed")
    assert state.fruitless == 1 and state.cooldown_until == state.count + 2 * CFG.cooldown
    assert f"next search after {2 * CFG.cooldown} iterations" in note.reason


def test_a_cluster_change_cancels_the_search_for_the_old_state():
    state, request = first_request()
    state, actions = step(state, ClusterChanged("B"), 0.0)
    assert [type(a) for a in actions] == [CancelSearch, Note] and actions[0].request == request.request
    assert state.cooldown_until <= state.count           # the cancel holds the new state's search back in nothing
    state, actions = step(state, SearchDone(request.request, 1, 0.01), 0.0)
    assert [a.kind for a in actions] == ["ignored"]
    assert step(state, ClusterChanged("B"), 0.0)[1] == []                       # no change, no event


def test_the_best_plan_of_a_cluster_state_is_restored_when_the_state_returns():
    state, _ = feed(running_plan(), PREDICTED, 10, version=1)          # A: v1 0.175 s, passthrough 0.2 s
    state, _ = step(state, ClusterChanged("B"), 0.0)
    state, actions = feed(state, 0.25, CFG.warmup + CFG.min_samples, version=1)
    [request] = of(actions, RequestPlan)
    state, _ = step(state, SearchDone(request.request, 2, 0.2), 0.0)
    state, _ = step(state, Committed(2, 0.2), 0.0)
    state, actions = feed(state, 0.2, CFG.warmup + CFG.evaluate, version=2)
    assert notes(actions, "kept") and state.best() == (2, 0.2)          # B: v2 0.2 s, v1 0.25 s
    # back in A, v2 measures 0.22 s: A's best, v1, comes back without a search
    state, actions = step(state, ClusterChanged("A"), 0.0)
    assert "best known plan there: v1 (0.175 s)" in actions[-1].reason
    state, actions = feed(state, 0.22, CFG.warmup + CFG.min_samples + 10, version=2)
    assert not of(actions, RequestPlan)
    [restore] = of(actions, RollBack)
    assert (restore.to_version, restore.from_version, restore.cause) == (1, 2, "restore")
    assert "v1 measured 0.175 s in cluster state A" in restore.reason
    state, _ = step(state, Committed(4, PREDICTED, same_as=1), 0.0)
    state, actions = feed(state, PREDICTED, CFG.warmup + CFG.evaluate, version=4)
    assert notes(actions, "kept") and state.best() == (4, PREDICTED)
    # and B's numbers were kept for B
    assert state.measured["B"] == {4: 0.25, 2: 0.2}


def test_a_plan_rolled_back_to_drifts_from_its_own_median_when_the_cluster_changed_during_the_trial():
    """The change comes during a trial: the new plan is rolled back (it measured slower than the old
    one's median from before); the old one, re-installed, measures far over that median: a drift."""
    state, actions = slower_candidate(0.35)
    [rollback] = of(actions, RollBack)
    assert rollback.cause == "trial"
    state, _ = step(state, Committed(3, PREDICTED, same_as=1), 0.0)
    state, actions = feed(state, 0.35, 1, version=3)
    assert state.measurement.baseline == 0.21                           # v1's median in A
    # step_iterations after the switch's first show it, its warm-up's counted (the drift watch would
    # need min_samples + consecutive)
    state, more = feed(state, 0.35, CFG.step_iterations - 1, version=3)
    assert not notes(actions + more, "drift") and state.cluster == "A"
    state, more = feed(state, 0.35, 1, version=3)
    [drift] = notes(more, "drift")
    assert ("v3, re-installed by the rollback, measured 5 iterations in a row each more than 20.0 % over the "
            "0.210 s it measured before in cluster state A (5 of them its warm-up) (the last 0.350 s)") in drift.reason
    assert state.cluster == "A~d1" and state.trial is None and not of(more, RollBack)
    assert [seconds for seconds, _ in state.measurement.window] == [0.35] * (CFG.step_iterations + 1)
    # searched once min_samples are measured in the new state, the rollback's cooldown notwithstanding
    requests = []
    while not requests:
        state, more = feed(state, 0.35, 1, version=3)
        requests = of(more, RequestPlan)
    assert len(state.measurement.window) == CFG.min_samples and state.count < state.cooldown_until + CFG.cooldown
    # where it measures its median again, nothing drifts
    state, _ = slower_candidate(0.35)
    state, _ = step(state, Committed(3, PREDICTED, same_as=1), 0.0)
    state, actions = feed(state, 0.22, 200, version=3)
    assert not notes(actions, "drift") and state.cluster == "A"


def test_a_step_inside_a_trial_is_a_cluster_change_and_the_trial_s_plan_is_not_rolled_back():
    """The NIC slows while v2 is on trial: v2's iterations step up from 0.16 s to 0.40 s after six of its
    measured ones. Its median would be slower than v1's 0.21 s (a rollback), but v1's median is from
    before the change: the step is a drift there and then, v2 keeps running, and the four iterations
    that showed it are the new state's first measurements."""
    state = committed_candidate()
    state, actions = feed(state, [0.16] * (CFG.warmup + 6) + [0.40] * (CFG.step_iterations - 1), version=2)
    assert not notes(actions, "drift") and state.trial is not None
    state, actions = feed(state, 0.40, 1, version=2)
    [drift] = notes(actions, "drift")
    assert ("v2 measured 4 iterations in a row from its trial's measured iteration 7, each more than 20.0 % over "
            "the 0.160 s median of the 11 before them (5 of them its warm-up) (the last 0.400 s): a step inside its "
            "trial") in drift.reason
    assert "taken as a new cluster state A~d1" in drift.reason and "the last 4 count in it" in drift.reason
    assert not of(actions, RollBack) and state.trial is None and state.running == 2 and state.cluster == "A~d1"
    assert [seconds for seconds, _ in state.measurement.window] == [0.40] * CFG.step_iterations
    # the new state's search, once min_samples are measured there: the commit's cooldown does not hold it
    # (the trial measured the switch's effect, on a cluster that has since changed)
    requests = []
    while not requests:
        state, more = feed(state, 0.40, 1, version=2)
        requests = of(more, RequestPlan)
    assert requests[0].trigger == "cluster" and not of(more, RollBack)
    assert len(state.measurement.window) == CFG.min_samples and state.count < state.committed_at + CFG.cooldown


def test_a_step_right_after_the_warm_up_is_measured_against_the_warm_up():
    """The DLRM loop runs: the NIC slows as v2's warm-up ends, so every measured iteration of its trial
    is slow and none steps up from another; the warm-up's iterations, from before the change, show it."""
    state = committed_candidate()
    state, actions = feed(state, [0.16] * CFG.warmup + [0.40] * (CFG.step_iterations - 1), version=2)
    assert not notes(actions, "drift") and state.trial is not None
    state, actions = feed(state, 0.40, 1, version=2)
    [drift] = notes(actions, "drift")
    assert ("v2 measured 4 iterations in a row from its trial's measured iteration 1, each more than 20.0 % over "
            "the 0.160 s median of the 5 before them (5 of them its warm-up)") in drift.reason
    assert not of(actions, RollBack) and state.cluster == "A~d1" and state.running == 2


@pytest.mark.parametrize("seconds", [
    [0.16, 0.19] * 10,                                      # noise: every other iteration 19 % over
    [0.16] * 6 + [0.40] * 3 + [0.16] * 11,                  # three slow ones in a row, not four
    [0.24] * 6 + [0.16] * 14,                               # a step down: a plan settling (under v1's 0.21 s x 1.2)
    [0.16] * 17 + [0.40] * 3,                               # a step too late in the trial to be one
])
def test_noise_a_short_burst_and_a_step_down_inside_a_trial_are_no_step(seconds):
    state = committed_candidate()
    state, actions = feed(state, seconds[:1] * CFG.warmup + seconds, version=2)     # warm-up as it starts
    assert not notes(actions, "drift") and state.cluster == "A" and state.trial is None
    assert notes(actions, "kept")                           # judged as before: faster than v1's 0.21 s


def test_a_trial_slow_from_the_start_is_rolled_back_before_its_verdict():
    """Every iteration of v2 after the switch's first more than ``drift_trigger`` over v1's 0.21 s
    median: rolled back once ``step_iterations`` of them are measured (its warm-up's count), not after
    ``evaluate`` more; one of them under that level, and the verdict decides as before."""
    state, actions = feed(committed_candidate(), [0.22] + [0.30] * (CFG.step_iterations - 1), version=2)
    assert not of(actions, RollBack) and state.trial is not None
    state, actions = feed(state, 0.30, version=2)
    [rollback] = of(actions, RollBack)
    assert (rollback.to_version, rollback.cause) == (1, "trial") and not notes(actions, "drift")
    assert rollback.reason == ("v2 measured each of its 4 iterations after the switch's first more than 20.0 % over "
                               "v1's 0.210 s (the last 0.300 s) (margin 20.0 %); rolling back to v1")
    state, actions = feed(committed_candidate(), [0.30, 0.30, 0.25] + [0.30] * 2, version=2)
    assert not of(actions, RollBack) and state.trial is not None
    state, actions = feed(state, 0.30, CFG.evaluate, version=2)
    assert "v2 measured 0.300 s over 20 iterations" in of(actions, RollBack)[0].reason
    # paused: plans are frozen, and the verdict waits for the resume
    state, _ = step(committed_candidate(), Pause("incident"), 0.0)
    state, actions = feed(state, 0.30, CFG.warmup + 1, version=2)
    assert not of(actions, RollBack) and state.trial is not None


def restore_after_unseen_change(config, restored):
    """v2 kept at 0.16 s (passthrough 0.2 s, v1 0.21 s); the cluster changes under it while it has no
    baseline; the stale medians restore passthrough (as v3), which measures ``restored``. (A kept plan
    has its trial's median as a provisional baseline, which shows such a change, test below; cleared
    here, it stands for a plan without one, as every plan was before its second window.)"""
    state, actions = slower_candidate(0.16, config)
    assert notes(actions, "kept") and state.measurement.baseline == 0.16 and state.measurement.provisional
    state = replace(state, measurement=replace(state.measurement, baseline=None, provisional=False))
    state, actions = feed(state, 0.30, 100, version=2)
    restore = of(actions, RollBack)[0]
    assert (restore.to_version, restore.cause) == (0, "restore") and not notes(actions, "drift")
    state, _ = step(state, Committed(3, None, same_as=0), 0.0)
    assert state.trial.known_seconds == PASSTHROUGH
    return feed(state, restored, config.warmup + config.evaluate, version=3)


@pytest.mark.parametrize("restored, changed", [(0.30, True), (0.23, False)])
def test_a_restored_plan_measured_far_over_its_own_median_is_a_cluster_change(restored, changed):
    """A change right after a switch, before the running plan has its baseline, hides from the drift
    watch; the stale medians then restore a plan, and that plan measuring more than ``drift_trigger``
    over its own median in the state shows the change (within it, it is judged as before)."""
    state, actions = restore_after_unseen_change(CFG, restored)
    assert not of(actions, RollBack)
    if not changed:
        assert notes(actions, "kept") and state.cluster == "A"
        return
    # here the restored plan's first step_iterations measured iterations show it; with that check off (a
    # step longer than the trial) and a trial shorter than the drift watch needs, the trial's verdict does
    [drift] = notes(actions, "drift")
    assert state.cluster == "A~d1" and ("v3, restored, measured 5 iterations in a row each more than 20.0 % over "
                                        "the 0.200 s it measured before in cluster state A (5 of them its warm-up)") \
        in drift.reason
    short = replace(CFG, evaluate=CFG.consecutive, step_iterations=CFG.warmup + CFG.consecutive)
    short_state, short = restore_after_unseen_change(short, restored)
    assert not of(short, RollBack) and short_state.cluster == "A~d1"
    assert "v3, restored, measured 0.300 s over 10 iterations, 50.0 % over the 0.200 s it measured before" \
        in notes(short, "drift")[0].reason
    # searched once min_samples are measured in the new state: the restore's cooldown does not hold it
    requests = of(actions, RequestPlan)
    while not requests:
        state, more = feed(state, restored, 1, version=3)
        requests = of(more, RequestPlan)
    assert state.count < state.committed_at + CFG.cooldown
    assert requests[0].trigger == "cluster" and state.measured["A~d1"] == {3: restored}


def test_a_kept_plan_s_trial_median_shows_a_change_before_its_own_baseline():
    """The DLRM loop run: v2 kept at 0.16 s; a search overlaps the window its own baseline would come
    from, and the NIC slows right after it. Against the trial's median the drift shows as soon as a
    quiet window does; with no baseline yet, the second window would have taken the slowed median."""
    state, actions = slower_candidate(0.16)
    assert notes(actions, "kept") and (state.measurement.baseline, state.measurement.provisional) == (0.16, True)
    state, [request] = step(state, ReplanNow("look"), 0.0)
    state, _ = feed(state, 0.17, 10, version=2)
    state, actions = step(state, SearchDone(request.request, 3, 0.16, running_seconds=0.16), 0.0)
    assert notes(actions, "not-committed")
    ended = state.count
    state, actions = feed(state, 0.30, CFG.window + CFG.consecutive, version=2)
    [drift] = notes(actions, "drift")
    assert "v2 measures 0.300 s, 87.5 % over its 0.160 s baseline for 10 iterations" in drift.reason
    assert state.cluster == "A~d1" and not of(actions, RollBack) and state.count - ended == CFG.window + CFG.consecutive


@pytest.mark.parametrize("later, own", [(0.12, True), (0.19, True), (0.30, False)])
def test_a_provisional_baseline_gives_way_to_the_plan_s_own_unless_over_it(later, own):
    """A plan still settling in its trial gets faster: its own baseline replaces the trial's median at
    the second window, and a faster median before that is no drift; a slower one by more than
    ``drift_trigger`` keeps the provisional baseline (and is a drift)."""
    state = running_plan()                                              # v1 kept at 0.175 s
    assert (state.measurement.baseline, state.measurement.provisional) == (PREDICTED, True)
    state, actions = feed(state, later, CFG.window, version=1)
    if not own:
        [drift] = notes(actions, "drift")
        assert "over its 0.175 s baseline" in drift.reason and state.cluster == "A~d1"
        return
    assert not notes(actions, "drift") and (state.measurement.baseline, state.measurement.provisional) == (later, False)
    state, actions = feed(state, later, 100, version=1)
    assert not notes(actions, "drift") and state.cluster == "A"


@pytest.mark.parametrize("factor", [1.5, 0.6])
def test_a_plan_drifting_from_its_baseline_is_a_cluster_change_nobody_reported(factor):
    state = running_plan()                                 # v1 kept at 0.175 s after its trial's window
    assert state.measurement.provisional                   # the trial's median, until the second window's
    state, _ = feed(state, PREDICTED, CFG.window, version=1)
    assert state.measurement.baseline == PREDICTED and not state.measurement.provisional
    state, actions = feed(state, PREDICTED * factor, CFG.window // 2 + CFG.consecutive, version=1)
    [drift] = notes(actions, "drift")
    assert state.cluster == "A~d1" and state.measurement.baseline is None
    assert f"{'over' if factor > 1 else 'under'} its 0.175 s baseline" in drift.reason and "A~d1" in drift.reason
    # the iterations that showed the drift are the new state's first measurements: no warm-up, no wait
    assert len(state.measurement.window) >= CFG.consecutive and {seconds for seconds, _ in state.measurement.window} == {PREDICTED * factor}
    assert "deciding now (the last 10 count in it)" in drift.reason
    state, more = feed(state, PREDICTED * factor, 1, version=1)
    [request] = of(actions[actions.index(drift):] + more, RequestPlan)
    assert request.trigger == "cluster" and state.measured["A~d1"] == {1: PREDICTED * factor}


def test_iterations_measured_while_the_job_s_search_runs_are_no_evidence_of_a_drift():
    """Where the service shares the ranks' cores its search slows their steps: no drift (which would
    cancel the search), no recorded median; a change that outlasts the search is still seen."""
    state = running_plan()
    state, _ = feed(state, PREDICTED, CFG.window, version=1)
    assert state.measurement.baseline == PREDICTED and state.quiet()
    state, [request] = step(state, ReplanNow("look"), 0.0)
    state, actions = feed(state, PREDICTED * 1.5, 200, version=1)
    assert actions == [] and state.phase == "searching" and not state.quiet()
    assert state.measured["A"][1] == PREDICTED and state.watches.drift.streak == 0
    state, actions = step(state, SearchDone(request.request, 2, PREDICTED, running_seconds=PREDICTED), 0.0)
    [note] = notes(actions, "not-committed")
    assert "on v1's measured 0.175 s" in note.reason and state.search_ended == state.count   # not the search's 0.263
    # back to its time: the window still holds the search's iterations, and nothing drifts
    state, actions = feed(state, PREDICTED, 100, version=1)
    assert not notes(actions, "drift") and state.quiet() and state.measured["A"][1] == PREDICTED
    # slower for good after a search: taken as a change once a window without the search shows it
    state, [request] = step(state, ReplanNow("again"), 0.0)
    state, _ = step(state, SearchDone(request.request, 3, PREDICTED, running_seconds=PREDICTED), 0.0)
    ended = state.count
    state, actions = feed(state, PREDICTED * 1.5, CFG.window + CFG.consecutive, version=1)
    [drift] = notes(actions, "drift")
    assert state.cluster == "A~d1" and "over its 0.175 s baseline for 10 iterations" in drift.reason
    assert state.count - ended == CFG.window + CFG.consecutive


def test_a_search_s_iterations_take_no_baseline_and_the_gain_is_judged_on_a_quiet_median():
    state, request = first_request()
    state, actions = feed(state, PASSTHROUGH * 2, 3 * CFG.window)       # the search slows every step
    assert actions == [] and state.measurement.baseline is None and state.measured["A"] == {0: PASSTHROUGH}
    state, actions = step(state, SearchDone(request.request, 1, PREDICTED, running_seconds=PASSTHROUGH), 0.0)
    [commit] = of(actions, Commit)
    assert commit.baseline_seconds == PASSTHROUGH and commit.predicted_seconds == pytest.approx(PREDICTED)


def test_a_search_s_iterations_keep_the_baseline_for_after_it():
    state, request = first_request()
    state, _ = feed(state, PASSTHROUGH * 2, 10)
    state, actions = step(state, SearchDone(request.request, 1, PASSTHROUGH, running_seconds=PASSTHROUGH), 0.0)
    assert notes(actions, "not-committed")
    state, actions = feed(state, PASSTHROUGH, 2 * CFG.window)
    assert not notes(actions, "drift") and state.measurement.baseline == PASSTHROUGH


def channel_run(state, seconds, n, ch0, ch1):
    """``n`` iterations of v1 whose motifs took ``ch0`` and ``ch1`` seconds on channels 0 and 1."""
    actions = []
    for _ in range(n):
        index = state.last_index + 1
        state, more = step(state, Iteration(index, seconds, 0.0, 1, ((0, ch0), (1, ch1))), 0.0)
        actions += more
    return state, actions


def test_a_channel_slowed_against_channel_0_is_a_cluster_change_the_iteration_time_hides():
    state = running_plan()
    state, _ = channel_run(state, PREDICTED, CFG.window, 0.02, 0.03)
    assert dict(state.measurement.channel_baseline) == {0: 0.02, 1: 0.03}
    # contention slows both channels alike (x2): no change
    state, actions = channel_run(state, PREDICTED, 100, 0.04, 0.06)
    assert not notes(actions, "drift") and state.channel_shift() == (1, pytest.approx(1.0))
    # channel 1's motifs take 1.6x longer against channel 0's, the iteration time does not move
    state, actions = channel_run(state, PREDICTED, CFG.window // 2 + CFG.consecutive, 0.04, 0.096)
    [drift] = notes(actions, "drift")
    assert "on channel 1 take 1.60x their baseline time relative to channel 0's" in drift.reason
    assert state.cluster == "A~d1"
    state, actions = channel_run(state, PREDICTED, CFG.warmup + CFG.min_samples, 0.04, 0.096)
    assert [r.trigger for r in of(actions, RequestPlan)] == ["cluster"]


def test_a_drift_below_the_trigger_or_a_stall_is_no_cluster_change():
    state = running_plan()
    state, actions = feed(state, PREDICTED * 1.15, 300, version=1)
    state, more = feed(state, [PREDICTED] * 10 + [PREDICTED * 20] * 3 + [PREDICTED] * 100, version=1)
    assert not notes(actions + more, "drift") and state.cluster == "A"


def test_a_known_faster_plan_comes_back_only_after_a_streak_and_a_margin():
    # the slow and drift triggers off: this is the restore rule alone (with them on, a plan this much slower
    # than its own baseline is a cluster change first)
    config = PolicyConfig(slow_trigger=1.0, slow_clear=1.0, drift_trigger=1.0)
    state = running_plan(config=config)                      # v1 0.175 s, passthrough known at 0.2 s
    # v1 at 0.21 s: passthrough's 0.2 s is under 10 % faster -> never restored
    assert not of(feed(state, 0.21, 200, version=1)[1], RollBack)
    # v1 at 0.23 s (passthrough 13 % faster): restored once the streak is long enough, not at the first median
    state, actions = feed(state, 0.23, config.window // 2 + config.consecutive - 1, version=1)
    assert not of(actions, RollBack)
    state, actions = feed(state, 0.23, version=1)
    [restore] = of(actions, RollBack)
    assert restore.to_version == 0 and restore.cause == "restore"


def test_restoring_passthrough_after_a_cluster_change_still_searches_for_a_plan_that_beats_both():
    # B was seen before with passthrough at 0.2 s; back in B the stale v1 measures 0.3 s
    state = Policy(CFG, "A", running=1, first_done=True, measured={"B": {0: 0.2}}, predicted={1: PREDICTED})
    state, _ = step(state, ClusterChanged("B"), 0.0)
    state, actions = feed(state, 0.3, CFG.warmup + CFG.min_samples, version=1)
    [restore] = of(actions, RollBack)
    assert restore.to_version == 0 and restore.cause == "restore" and state.due      # the search stays due
    state, _ = step(state, Committed(2, None, same_as=0), 0.0)
    state, actions = feed(state, 0.2, 100, version=2)
    [request] = of(actions, RequestPlan)
    assert request.trigger == "cluster" and not of(actions, RollBack)
    state, actions = step(state, SearchDone(request.request, 3, 0.15, running_seconds=0.2), 0.0)
    [commit] = of(actions, Commit)
    assert commit.version == 3 and commit.predicted_seconds == pytest.approx(0.15)


def rolled_back_to_passthrough(bound: float):
    """v1 (searched with ``bound``) measured 0.22 s against passthrough's 0.2 s: rolled back, re-installed as v2."""
    state, request = first_request()
    state, _ = step(state, SearchDone(request.request, 1, PREDICTED, bound_seconds=bound), 0.0)
    state, _ = step(state, Committed(1, PREDICTED), 0.0)
    state, actions = feed(state, 0.22, CFG.warmup + CFG.evaluate, version=1)
    [rollback] = of(actions, RollBack)
    assert rollback.to_version == 0 and rollback.cause == "trial"
    state, _ = step(state, Committed(2, None, same_as=0), 0.0)
    return state


def test_passthrough_far_over_the_bound_after_a_tried_plan_searches_once_more():
    state = rolled_back_to_passthrough(bound=0.12)         # passthrough 0.2 s is 67 % over the bound
    state, actions = feed(state, 0.2, 300, version=2)
    [request] = of(actions, RequestPlan)
    assert request.trigger == "bound" and "over the lower bound 0.120 s" in request.reason
    state, actions = step(state, SearchDone(request.request, 3, 0.199, running_seconds=0.2, bound_seconds=0.12), 0.0)
    assert notes(actions, "not-committed")
    state, actions = feed(state, 0.2, 1000, version=2)       # once per cluster state: no loop of searches
    assert not of(actions, RequestPlan)
    state, actions = step(state, ClusterChanged("B"), 0.0)   # a new state arms it again (after its own search)
    assert state.bound_done == "A" and state.cluster == "B"


def test_passthrough_near_the_bound_is_left_alone():
    state = rolled_back_to_passthrough(bound=0.19)         # 5 % over the bound: nothing to gain
    state, actions = feed(state, 0.2, 1000, version=2)
    assert not of(actions, RequestPlan)


# ---------------------------------------------------------------- pause / resume
def test_pause_cancels_the_search_and_holds_replanning_until_resume():
    state, _ = first_request()
    state, actions = step(state, Pause("maintenance"), 0.0)
    assert [type(a) for a in actions] == [CancelSearch, Note] and state.paused
    assert step(state, Pause(), 0.0)[1] == []                                  # idempotent
    state, actions = feed(state, PASSTHROUGH, 500)
    assert not of(actions, RequestPlan)
    state, actions = step(state, Resume("done"), 0.0)
    assert [a.kind for a in actions] == ["resumed"] and not state.paused
    assert step(state, Resume(), 0.0)[1] == []
    assert [r.trigger for r in of(feed(state, PASSTHROUGH)[1], RequestPlan)] == ["first"]


def test_replan_now_searches_at_once_but_not_while_paused_or_busy():
    state, _ = feed(Policy.new("A"), PASSTHROUGH, 16)          # before first_plan_after: no trigger of its own
    state, actions = step(state, ReplanNow("new driver"), 1.0)
    [request] = of(actions, RequestPlan)
    assert request.trigger == "operator" and "new driver" in request.reason and state.phase == "searching"
    again, actions = step(state, ReplanNow(), 1.0)               # a search is under way: that one decides
    assert notes(actions, "ignored") and not of(actions, RequestPlan) and again == state
    paused, _ = step(Policy.new("A"), Pause(), 0.0)
    paused, actions = step(paused, ReplanNow(), 0.0)
    assert not of(actions, RequestPlan) and "paused" in notes(actions, "ignored")[0].reason
    state, actions = step(state, SearchDone(request.request, 1, PREDICTED), 2.0)   # then the usual rules
    assert [c.version for c in of(actions, Commit)] == [1]


# ---------------------------------------------------------------- values
def test_state_summary_is_json_and_actions_read_as_text():
    state, request = first_request()
    summary = json.loads(json.dumps(state.to_dict()))
    assert summary["phase"] == "searching" and summary["pending"]["request"] == request.request
    assert summary["measured"] == {"A": {"0": PASSTHROUGH}} and summary["config"]["cooldown"] == 30
    assert list(summary) == ["phase", "paused", "cluster", "running", "iterations", "cooldown_left", "median_seconds",
                             "median_wait_fraction", "predicted_seconds", "due", "baseline_seconds",
                             "channel_baseline_seconds", "streaks", "latched", "fruitless", "pending", "trial",
                             "measured", "bound_seconds", "quiet", "config"]
    assert summary["pending"] == {"what": "searching", "trigger": "first", "since": 0.0, "request": 1, "version": 0,
                                  "due": ""}
    assert summary["streaks"] == {"slow": 0, "waits": 0, "drift": 0, "channel": 0, "restore": 0}
    assert summary["latched"] == {"slow": False, "waits": False}
    assert str(Note("kept", "fine")) == "kept: fine"


def test_bad_config_and_unknown_events_are_refused():
    with pytest.raises(InvalidInputError, match="slow_clear <= slow_trigger"):
        PolicyConfig(slow_clear=0.2)
    with pytest.raises(InvalidInputError, match="min_samples <= evaluate <= window"):
        PolicyConfig(window=5)
    with pytest.raises(TypeError, match="no rule for str"):
        step(Policy.new("A"), "tick", 0.0)


def test_duplicate_and_broken_iterations_are_ignored():
    state, _ = feed(Policy.new("A"), PASSTHROUGH, 10)
    for event in (Iteration(9, PASSTHROUGH), Iteration(10, 0.0), Iteration(10, float("nan"))):
        assert step(state, event, 0.0) == (state, [])


# ---------------------------------------------------------------- property
SMALL = PolicyConfig(first_plan_after=3, warmup=1, window=4, min_samples=2, evaluate=3, consecutive=2, cooldown=5,
                     switch_within=10, pending_timeout=50.0)
ITERATIONS = st.tuples(st.just("iterations"), st.integers(1, 20), st.integers(1, 6), st.sampled_from([0.0, 0.02, 0.2]),
                       st.sampled_from(["running"] * 4 + ["pending", "other"]))
DONE = st.tuples(st.just("done"), st.floats(0.01, 0.7), st.sampled_from([True] * 4 + [False]))
COMMITTED = st.tuples(st.just("committed"), st.sampled_from([True] * 4 + [False]), st.booleans())
MOVES = st.one_of(      # weighted by repetition: mostly iterations and answers to the policy's own actions
    ITERATIONS, ITERATIONS, ITERATIONS, ITERATIONS, ITERATIONS, ITERATIONS, DONE, DONE, DONE, COMMITTED, COMMITTED,
    st.tuples(st.just("search-failed"), st.booleans()),
    st.tuples(st.just("commit-failed"), st.booleans()),
    st.tuples(st.just("cluster"), st.sampled_from("AB")),
    st.tuples(st.sampled_from(["pause", "resume", "resume"])),
    st.tuples(st.just("tick"), st.integers(0, 60)),
)


class Run:
    """Feeds the moves of one example to a policy and checks every action."""

    def __init__(self):
        self.state, self.now, self.versions = Policy.new("A", SMALL), 0.0, 10
        self.fed: list[tuple[float, int]] = []     # (seconds, segment) per iteration
        self.segment = 0                           # a new one at every change of running plan or cluster state
        self.switches: list[tuple[int, int]] = []  # (state.count, version) at every Commit and restoring RollBack
        self.last_request = 0
        self.seen = {"commit": 0, "replan": 0, "rollback": 0}

    def move(self, move):
        kind, state, pending = move[0], self.state, self.state.pending
        if kind == "iterations":
            _, n, tenths, wait, which = move
            for _ in range(n):
                pending = self.state.pending
                running = {"running": self.state.running, "other": self.versions,
                           "pending": pending.version if pending else self.state.running}[which]
                self.segment += running != self.state.running
                self.fed.append((tenths / 10, self.segment))
                self.send(Iteration((self.state.last_index or 0) + 1, tenths / 10, wait * tenths / 10, running))
            return
        answers = pending is not None and (kind == "done") == (pending.what == "searching")
        if kind in ("done", "committed") and move[2 if kind == "done" else 1] and not answers:
            return                                 # an answer to nothing: the stale variant below covers it
        if kind == "done":
            self.versions += 1
            event = SearchDone(self.last_request if move[2] else self.last_request + 7, self.versions, move[1])
        elif kind == "committed":
            target = pending.version if answers and move[1] else self.versions + 1
            self.versions += 1
            event = Committed(self.versions if move[2] else target, 0.3, same_as=target if move[2] else None)
        elif kind == "search-failed":
            event = SearchFailed(self.last_request if move[1] else 0, "x")
        elif kind == "commit-failed":
            event = CommitFailed(pending.version if pending and move[1] else -1, "no")
        elif kind == "cluster":
            self.segment += move[1] != state.cluster
            event = ClusterChanged(move[1])
        elif kind == "tick":
            self.now += move[1]
            event = Tick()
        else:
            event = Pause() if kind == "pause" else Resume()
        self.send(event)

    def send(self, event):
        before = self.state
        self.state, actions = step(before, event, self.now)
        state = self.state
        if (not isinstance(event, Committed) and before.pending is not None and before.pending.what == "committing"
                and state.pending is None and self.switches and self.switches[-1][1] == before.pending.version):
            self.switches.pop()                    # that commit failed or timed out: it switched nothing
        for action in actions:
            self.seen[action.kind] = self.seen.get(action.kind, 0) + 1
            if isinstance(action, RequestPlan):
                self.last_request = action.request
                assert not before.paused and before.phase == "waiting" and state.count >= before.cooldown_until
            if isinstance(action, Commit) or (isinstance(action, RollBack) and action.cause == "restore"):
                assert not state.paused
                if self.switches:
                    assert state.count - self.switches[-1][0] >= SMALL.cooldown, "two switches within one cooldown"
                self.switches.append((state.count, action.version if isinstance(action, Commit) else action.to_version))
            if isinstance(action, Commit):
                assert isinstance(event, SearchDone) and action.predicted_seconds == event.predicted_seconds
                assert action.version == event.version
                assert action.gain > SMALL.min_gain, "committed below the gain threshold"
                # the baseline: the median of a window of the running plan's measured iterations in this state
                # (the latest one no search overlapped, else the latest)
                latest = [seconds for seconds, part in self.fed if part == self.segment][SMALL.warmup:]
                assert any(statistics.median(latest[end - n:end]) == action.baseline_seconds
                           for n in range(SMALL.min_samples, min(len(latest), SMALL.window) + 1)
                           for end in range(n, len(latest) + 1))


#: Two runs hypothesis found (shrunk) where a commit that failed or timed out was counted as a switch.
FAILED_COMMIT_THEN_RESTORE = [("iterations", 1, 1, 0.0, "running")] * 3 + [
    ("done", 0.5, True), ("iterations", 8, 2, 0.0, "other")] + [("iterations", 1, 1, 0.0, "running")] * 3 + [
    ("commit-failed", True), ("cluster", "A"), ("iterations", 3, 2, 0.0, "running")]
TIMED_OUT_COMMIT_THEN_RESTORE = [
    ("cluster", "B"), ("pause",), ("iterations", 19, 3, 0.0, "running"), ("iterations", 11, 6, 0.0, "other"),
    ("iterations", 1, 1, 0.0, "running"), ("resume",), ("iterations", 1, 1, 0.0, "running"),
    ("iterations", 1, 6, 0.0, "running"), ("tick", 20), ("tick", 40), ("cluster", "B"),
    ("iterations", 14, 5, 0.0, "other")]


@settings(max_examples=300, deadline=None)
@given(st.lists(MOVES, min_size=10, max_size=80))
@example(moves=FAILED_COMMIT_THEN_RESTORE)
@example(moves=TIMED_OUT_COMMIT_THEN_RESTORE)
def test_no_two_switches_within_a_cooldown_and_no_commit_below_the_gain(moves):
    run = Run()
    for move in moves:
        run.move(move)


def test_the_property_s_generator_reaches_commits_and_rollbacks():
    """Guards the property test against a generator that never gets to the interesting part.
    (What hypothesis draws here also depends on the tests run before it — 5 rollbacks alone,
    1 in the whole suite — so the bound on rollbacks only asks that they are reached.)"""
    seen = {"commit": 0, "replan": 0, "rollback": 0}

    @settings(max_examples=400, deadline=None, derandomize=True, database=None)
    @given(st.lists(MOVES, min_size=10, max_size=80))
    def count(moves):
        run = Run()
        for move in moves:
            run.move(move)
        for kind in seen:
            seen[kind] += run.seen.get(kind, 0)

    count()
    assert seen["replan"] >= 100 and seen["commit"] >= 20 and seen["rollback"] >= 1, seen
