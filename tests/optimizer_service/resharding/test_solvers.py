"""Load-balance solvers (§3.2, §5.2): hand cases, DFS against exhaustive
search, validity of every solver's schedule, determinism and budgets."""

import random

import pytest
from hypothesis import given, settings

from optimizer_service.resharding.dfs import dfs, exhaustive, schedule_lower_bound
from optimizer_service.resharding.schedule import ScheduleProblem, SearchBudget, evaluate
from optimizer_service.resharding.solvers import SOLVERS, greedy, load_balance, naive, solve
from tests.optimizer_service.resharding.problems import CASE3, CASE5, problem, small_problems

ENOUGH = SearchBudget(seconds=1.0, max_nodes=10**7)


def assert_valid(p: ScheduleProblem, result) -> None:
    timeline = evaluate(p, result.schedule)
    assert timeline.makespan == pytest.approx(result.makespan)
    for i in range(p.size):
        assert result.schedule.senders[i] in p.sender_hosts[i]
        for j in range(i + 1, p.size):
            shares = (result.schedule.senders[i] == result.schedule.senders[j]
                      or set(p.receiver_hosts[i]) & set(p.receiver_hosts[j]))
            overlap = min(timeline.finishes[i], timeline.finishes[j]) - max(timeline.starts[i], timeline.starts[j])
            assert not shares or overlap <= 1e-12, f"tasks {i} and {j} overlap on a host"


def test_naive_takes_the_lowest_host_in_index_order():
    result = naive(CASE5)
    assert result.schedule.senders == (0, 0, 0, 0) and result.schedule.order == (0, 1, 2, 3)
    assert result.makespan == 4.0


def test_load_balance_sorts_longest_first_onto_the_lightest_host():
    p = problem([((0, 1), (3.0, 3.0), (5,)), ((0, 1), (2.0, 2.0), (6,)), ((0, 1), (2.0, 2.0), (7,)),
                 ((0, 1), (1.0, 1.0), (8,))])
    result = load_balance(p)
    assert result.schedule.senders == (0, 1, 1, 0) and result.schedule.order == (0, 1, 2, 3)
    assert load_balance(CASE5).makespan == 3.0          # balanced, but both hosts send to h2 first


@pytest.mark.parametrize("name", ["dfs", "greedy", "ensemble"])
@pytest.mark.parametrize("case", [CASE3, CASE5], ids=["case3", "case5"])
def test_the_searches_use_both_senders_and_both_receivers(name, case):
    result = solve(name, case, budget=ENOUGH)
    assert result.makespan == 2.0
    assert_valid(case, result)


@given(small_problems())
@settings(max_examples=60, deadline=None)
def test_dfs_is_optimal_on_small_problems(p):
    _, best = exhaustive(p)
    found = dfs(p, budget=ENOUGH)
    assert found.optimal and found.stopped_by == "done"
    assert found.makespan == pytest.approx(best)
    assert_valid(p, found)
    assert schedule_lower_bound(p) <= best + 1e-12


@given(small_problems(max_tasks=7))
@settings(max_examples=60, deadline=None)
def test_every_solver_gives_a_valid_schedule_and_the_ensemble_the_best(p):
    results = {name: solve(name, p, budget=SearchBudget(max_nodes=5000), seed=3) for name in SOLVERS}
    for result in results.values():
        assert_valid(p, result)
        assert result.makespan >= schedule_lower_bound(p) - 1e-12
    for weaker in ("naive", "lb", "greedy"):
        assert results["ensemble"].makespan <= results[weaker].makespan + 1e-12
    assert results["dfs"].makespan <= min(results["naive"].makespan, results["lb"].makespan) + 1e-12


def random_problem(seed: int, n: int) -> ScheduleProblem:
    rng = random.Random(seed)
    tasks = []
    for _ in range(n):
        senders = tuple(sorted(rng.sample(range(3), rng.randint(1, 3))))
        tasks.append((senders, tuple(rng.choice([1.0, 1.3, 2.1, 2.9]) for _ in senders),
                      tuple(sorted(rng.sample(range(10, 14), rng.randint(1, 2))))))
    return problem(tasks)


def test_greedy_is_reproducible_for_a_seed():
    p = random_problem(1, 30)
    first, second = greedy(p, seed=5), greedy(p, seed=5)
    assert first.schedule == second.schedule and first.stopped_by == "done"


def test_dfs_stops_at_its_node_budget_and_at_its_clock():
    p = random_problem(2, 14)
    unbounded = dfs(p, budget=SearchBudget(max_nodes=20_000))
    assert unbounded.nodes > 600                          # the stop below must happen mid-search
    by_nodes = dfs(p, budget=SearchBudget(max_nodes=300))
    assert by_nodes.stopped_by == "nodes" and not by_nodes.optimal and by_nodes.nodes == 300
    assert_valid(p, by_nodes)
    now = [0.0]

    def clock():
        now[0] += 10.0
        return now[0]

    by_time = dfs(p, budget=SearchBudget(seconds=5.0, max_nodes=10**6, clock=clock))
    assert by_time.stopped_by == "time" and by_time.nodes == 256
    assert_valid(p, by_time)


def test_dfs_without_an_incumbent_and_a_tiny_budget_still_schedules_everything():
    p = random_problem(3, 12)
    result = dfs(p, budget=SearchBudget(max_nodes=3))
    assert sorted(result.schedule.order) == list(range(12))
    assert_valid(p, result)


def test_unknown_solver():
    with pytest.raises(ValueError, match="unknown load-balance algorithm 'fifo'"):
        solve("fifo", CASE3)
