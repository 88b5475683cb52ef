"""The watched conditions' hysteresis (:mod:`optimizer_service.control.hysteresis`):
fire after a streak over the trigger level, latch, re-arm after a streak under the
clear level; and, as a property, step for step what the policy's two hand-written
copies (the slow and the waits trigger) did before it was one value."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.control.hysteresis import Hysteresis

TRIGGER, CLEAR, NEEDED = 0.15, 0.10, 3


def reference_streak(latched: bool, streak: int, value: float, trigger: float, clear: float,
                     needed: int) -> tuple[bool, int]:
    """The policy's ``_streak`` as it was, the oracle: armed, count values over
    ``trigger``; latched, count values under ``clear``, ``needed`` of them re-arm."""
    if not latched:
        return False, streak + 1 if value > trigger else 0
    streak = streak + 1 if value < clear else 0
    return (False, 0) if streak >= needed else (True, streak)


def observe_all(values, state=Hysteresis()):
    rearmed = []
    for value in values:
        state, again = state.observe(value, TRIGGER, CLEAR, NEEDED)
        rearmed.append(again)
    return state, rearmed


def test_fires_after_the_needed_streak_over_the_trigger_level_only():
    state, _ = observe_all([0.2, 0.2])
    assert state == Hysteresis(streak=2) and not state.fired(NEEDED)
    state, _ = observe_all([0.15], state)                  # at the level is not over it: the streak breaks
    assert state.streak == 0
    state, _ = observe_all([0.2, 0.3, 0.16], state)
    assert state.fired(NEEDED)


def test_latched_it_rearms_only_after_the_needed_streak_under_the_clear_level():
    state = Hysteresis(streak=5).latch()
    assert state == Hysteresis(latched=True) and not state.fired(NEEDED)
    state, rearmed = observe_all([0.12, 0.2, 0.05, 0.05], state)     # between the levels, or over: no clear
    assert state == Hysteresis(latched=True, streak=2) and rearmed == [False] * 4
    state, rearmed = observe_all([0.05], state)
    assert state == Hysteresis() and rearmed == [True]


def test_release_keeps_the_streak_and_restart_keeps_the_latch():
    assert Hysteresis(latched=True, streak=2).release() == Hysteresis(streak=2)
    assert Hysteresis(latched=True, streak=2).restart() == Hysteresis(latched=True)
    assert Hysteresis(streak=4).count(False) == Hysteresis() and Hysteresis(streak=4).count(True).streak == 5


OPS = st.one_of(st.floats(-1.0, 1.0, allow_nan=False), st.sampled_from(["latch", "release", "restart"]))


@settings(max_examples=500, deadline=None)
@given(st.lists(OPS, max_size=60), st.floats(0.0, 0.5), st.floats(0.0, 0.5), st.integers(1, 5))
def test_it_behaves_as_the_policy_s_former_streak_function(ops, a, b, needed):
    """The latch, release and restart the policy applied by hand to the old fields: ``_latch``
    set ``latched`` and zeroed the streak; a failed commit cleared ``latched`` only; a fresh
    measurement zeroed the streak only."""
    trigger, clear = max(a, b), min(a, b)
    latched, streak, state = False, 0, Hysteresis()
    for op in ops:
        if op == "latch":
            latched, streak, state = True, 0, state.latch()
        elif op == "release":
            latched, state = False, state.release()
        elif op == "restart":
            streak, state = 0, state.restart()
        else:
            was = latched
            latched, streak = reference_streak(latched, streak, op, trigger, clear, needed)
            state, rearmed = state.observe(op, trigger, clear, needed)
            assert rearmed == (was and not latched)
        assert (state.latched, state.streak) == (latched, streak)
        assert state.fired(needed) == (not latched and streak >= needed)
