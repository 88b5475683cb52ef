"""``p2 demo`` leaves the steps and peer turns that ran beside one of the service's searches (niced
CPU on the host) out of its medians, and reports the median with them beside."""

from __future__ import annotations

import pytest

from deploy.emulated.cores import CoreTimes
from optimizer_service.cli.demo_report import beside, committed_plans, peer, phases
from optimizer_service.cli.demo_searching import (
    MIN_STEPS,
    SEARCH_SHARE,
    quiet,
    searched_steps,
    searched_turn,
    searches_line,
)
from tests.cli.test_demo_report import _peer_result, _run, _turn


def _times(niced_steps: set[int], last: int) -> list[tuple[int, list[float]]]:
    """One core reading per step on 2 cores: 1 s of the cores' time a step, of it 0.4 s niced in ``niced_steps``."""
    readings, user, nice, idle = [], 0.0, 0.0, 0.0
    for step in range(last + 1):
        if step:
            searching = step in niced_steps
            user, nice, idle = user + 0.5, nice + (0.4 if searching else 0.0), idle + (0.1 if searching else 0.5)
        readings.append((step, CoreTimes(2, user=user, nice=nice, idle=idle).to_list()))
    return readings


def test_a_step_ran_beside_a_search_when_niced_work_took_more_than_the_share_of_the_cores():
    readings = _times({12, 13, 14}, 20)
    assert searched_steps(readings) == {12, 13, 14}
    # Readings two steps apart: both steps between them count.
    assert searched_steps(readings[:11] + readings[12::2]) == {11, 12, 13, 14}
    tiny = [(0, CoreTimes(2, user=0, idle=0).to_list()), (1, CoreTimes(2, user=0.5, nice=SEARCH_SHARE / 2,
                                                                        idle=0.5).to_list())]
    assert searched_steps(tiny) == set() and searched_steps([]) == set()


def test_leaving_steps_out_keeps_at_least_the_fewest_a_median_takes():
    assert quiet(range(1, 11), {2, 3}) == [1, 4, 5, 6, 7, 8, 9, 10]
    assert quiet(range(1, MIN_STEPS + 1), {1}) == list(range(1, MIN_STEPS + 1))


def test_phases_and_committed_plans_leave_the_steps_beside_a_search_out_and_report_both():
    # Passthrough 1-10, the plan from 11 on (its phase from 14); a search beside steps 30-35 slowed it.
    versions = [0] * 10 + [1] * 40
    seconds = [1.0] * 10 + [0.3] * 19 + [0.45] * 6 + [0.3] * 15
    readings = _times(set(range(30, 36)), 50)
    rows = phases(_run(versions, seconds), None, {1: {"predicted_seconds": 0.3}}, [], (), readings)
    first = {row["name"]: row for row in rows}["first-plan"]
    assert first["measured_iteration_seconds"] == 0.3 and first["search_steps"] == 6
    assert first["steps"] == 37 - 6                              # steps 14-50, less the six
    assert first["with_searches_iteration_seconds"] == 0.3       # 6 of 37: the median survives them here
    plans = committed_plans(_run(versions, seconds), None, {1: {"predicted_seconds": 0.3}}, [],
                            searched=searched_steps(readings))
    assert plans[0]["steps"] == first["steps"] and plans[0]["measured_iteration_seconds"] == 0.3


def test_a_phase_mostly_beside_a_search_has_its_median_moved_and_both_are_reported():
    versions = [0] * 10 + [1] * 20
    seconds = [1.0] * 10 + [0.3] * 8 + [0.5] * 12
    rows = phases(_run(versions, seconds), None, {1: {}}, [], (), _times(set(range(19, 31)), 30))
    first = {row["name"]: row for row in rows}["first-plan"]
    assert first["measured_iteration_seconds"] == 0.3 and first["with_searches_iteration_seconds"] == 0.5
    assert first["search_steps"] == 12 and first["steps"] == 20 - 3 - 12


def _turn_with(first: int, last: int, job_step: int, niced: float) -> dict:
    return _turn(first, last, job_step, "before", cores=(CoreTimes(2, user=0, idle=0),
                                                         CoreTimes(2, user=2, nice=niced, idle=2 - niced)))


def test_the_peers_turns_beside_a_search_are_left_out_as_the_jobs_steps_are():
    # Turn 1 (steps 1-10) ran beside a search and measured 0.5 s; turns 2 and 3 0.4 s.
    seconds = [0.5] * 10 + [0.4] * 20
    turns = [_turn_with(1, 10, 10, niced=1.0), _turn_with(11, 20, 20, niced=0.0), _turn_with(21, 30, 30, niced=0.0)]
    assert [searched_turn(turn) for turn in turns] == [True, False, False]
    rows = phases(_run([0] * 10 + [1] * 30, [1.0] * 10 + [0.3] * 30), None, {1: {}}, [])
    row = peer(_peer_result(seconds, turns), rows)["before"]
    assert row["measured_iteration_seconds"] == 0.4 and row["search_turns"] == 1 and row["turns"] == 3
    assert row["with_searches_iteration_seconds"] == 0.4 and row["steps"] == 16
    beside(rows, _peer_result(seconds, turns))
    first = {r["name"]: r for r in rows}["first-plan"]
    assert first["peer_iteration_seconds"] == 0.4 and first["speedup_over_peer"] == pytest.approx(0.4 / 0.3)
    line = searches_line(rows, {"before": row, "after": None})
    assert line.endswith("peer-before 1 of 3 turns (400.0 ms with them)")
    assert searches_line([{**rows[0], "search_steps": 0}], {"before": None}) is None
    # Every turn beside a search: none is left out.
    every = [_turn_with(1, 10, 10, niced=1.0), _turn_with(11, 20, 20, niced=1.0)]
    row = peer(_peer_result([0.5] * 10 + [0.6] * 10, every), rows)["before"]
    assert row["search_turns"] == 2 and row["measured_iteration_seconds"] == 0.6 and row["steps"] == 13
