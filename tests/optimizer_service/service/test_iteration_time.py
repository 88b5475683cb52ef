"""One measured iteration time: a job without a policy is measured as its policy
would measure it (the same window over the same iterations). Pure: no service."""

from __future__ import annotations

import math
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.control import policy as rules
from optimizer_service.control.policy import Iteration, Policy, PolicyConfig
from optimizer_service.service.iteration_time import IterationTime, of_history, of_policy
from optimizer_service.service.live import JobIteration

SMALL = PolicyConfig(first_plan_after=1_000_000, warmup=2, window=4, min_samples=3, evaluate=3)


def iterations(runs: list[tuple[int, list[float]]]) -> list[JobIteration]:
    """``(version, [seconds, ...])`` runs as a job's iterations, indexed from 0."""
    flat = [(version, seconds) for version, times in runs for seconds in times]
    return [JobIteration(index, float(index), seconds, 0.0, version) for index, (version, seconds) in enumerate(flat)]


def test_the_window_starts_after_the_warm_up_of_the_running_plan_and_keeps_the_last_ones():
    history = iterations([(0, [0.5] * 9), (1, [0.1, 0.2, 0.3, 0.4])])
    assert of_history(history, SMALL) == IterationTime(1, None, 2)          # 2 warm-up, 2 measured: < min_samples
    history = iterations([(0, [0.5] * 9), (1, [9.0, 9.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7])])
    assert of_history(history, SMALL) == IterationTime(1, 0.5, 4)           # median of the last 4: 0.3 0.4 0.6 0.7
    assert of_history([], SMALL) == IterationTime(0, None, 0)
    bad = iterations([(1, [0.2, 0.2, 0.2, 0.2, 0.2])]) + [JobIteration(9, 9.0, math.nan, 0.0, 2)]
    assert of_history(bad, SMALL) == IterationTime(1, 0.2, 3)               # an unusable time does not count


SECONDS = st.one_of(st.floats(0.1, 0.11), st.sampled_from([0.0, -1.0, math.nan, math.inf]))
RUNS = st.lists(st.tuples(st.integers(0, 3), st.lists(SECONDS, min_size=1, max_size=40)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(runs=RUNS, config=st.sampled_from([SMALL, PolicyConfig(first_plan_after=1_000_000)]))
def test_without_a_policy_the_figure_is_the_policys(runs, config):
    """After every iteration, the figure from the job's history equals what a policy fed
    the same iterations measures (times vary by under 10 %: no drift restarts its window)."""
    policy, history = Policy.new("cluster", config), deque(maxlen=1_000)
    for it in iterations(runs):
        policy, _ = rules.step(policy, Iteration(it.index, it.seconds, it.wait_seconds, it.version), 0.0)
        history.append(it)
        assert of_history(history, config) == of_policy(policy)
