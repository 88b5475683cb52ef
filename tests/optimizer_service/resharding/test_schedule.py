"""The host-level problem of §3.2 (Eq. 1–3): timing a schedule, its text form, budgets."""

import pytest

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.resharding.schedule import Schedule, SearchBudget, check_schedule, evaluate
from tests.optimizer_service.resharding.problems import CASE3, problem


def test_a_task_waits_for_earlier_tasks_on_its_sender_and_receivers():
    naive = evaluate(CASE3, Schedule((0, 1, 0, 1), (0, 1, 2, 3)))
    assert naive.starts == (0.0, 1.0, 1.0, 2.0) and naive.makespan == 3.0
    crossed = evaluate(CASE3, Schedule((0, 1, 0, 1), (0, 3, 1, 2)))
    assert crossed.starts == (0.0, 1.0, 1.0, 0.0) and crossed.makespan == 2.0


def test_sending_and_receiving_on_one_host_do_not_conflict():
    """Eq. 3 orders tasks sharing a sender or a receiver; a host's two directions are separate."""
    swap = problem([((0,), (1.0,), (1,)), ((1,), (1.0,), (0,))])
    assert evaluate(swap, Schedule((0, 1), (0, 1))).starts == (0.0, 0.0)


def test_schedule_text_round_trips():
    schedule = Schedule((0, 1, 0, 1), (0, 3, 1, 2))
    assert str(schedule) == "order 0,3,1,2 senders h0,h1,h0,h1"
    assert Schedule.parse(str(schedule)) == schedule
    with pytest.raises(InvalidInputError, match="is not 'order"):
        Schedule.parse("0,1 h0")


def test_invalid_schedules_are_refused():
    with pytest.raises(PlanError, match="not a permutation"):
        check_schedule(CASE3, Schedule((0, 1, 0, 1), (0, 1, 1, 3)))
    with pytest.raises(PlanError, match="task 1: host 0 does not hold its slice"):
        check_schedule(CASE3, Schedule((0, 0, 0, 1), (0, 1, 2, 3)))


def test_problems_validate_themselves():
    with pytest.raises(InvalidInputError, match="distinct candidate sender hosts"):
        problem([((0, 0), (1.0, 1.0), (2,))])
    with pytest.raises(InvalidInputError, match="finite and >= 0"):
        problem([((0,), (-1.0,), (2,))])
    with pytest.raises(InvalidInputError, match="at least one receiver host"):
        problem([((0,), (1.0,), ())])


def test_a_budget_reads_time_only_from_its_clock():
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]

    meter = SearchBudget(seconds=100.0, max_nodes=10**6, clock=clock).meter()
    ticks = 0
    while meter.tick():
        ticks += 1
    assert meter.stopped_by == "time" and ticks < 256 * 100
    meter = SearchBudget(seconds=1.0, max_nodes=10).meter()
    assert sum(1 for _ in iter(meter.tick, False)) == 9 and meter.stopped_by == "nodes"
    with pytest.raises(InvalidInputError, match="seconds > 0"):
        SearchBudget(seconds=0.0)
