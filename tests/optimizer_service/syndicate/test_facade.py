"""plan_job: the one entry point to the joint optimizer (CLI, benchmarks, service)."""

from __future__ import annotations

import itertools

import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import SYSTEMS
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.workloads import build
from tests.support.traces import op, trace

TOPOLOGY = load_topology("hgx2-4n")


def frozen() -> float:
    return 0.0


def test_a_workload_is_planned_by_every_system_and_exported():
    job = plan_job(build("cnn-dp", TOPOLOGY), TOPOLOGY, budget=5, seed=0, clock=frozen)
    assert [r.name for r in job.results] == list(SYSTEMS)
    assert job.chosen.name == "Syndicate" and job.measured_iteration_seconds is None
    assert Plan.parse(job.plan.to_json()) == job.plan and job.plan.ops
    assert job.chosen.seconds <= job.results[0].seconds      # never worse than FIFO


def test_same_seed_same_plan_on_the_injected_clock():
    first = plan_job(build("dlrm-a1", TOPOLOGY), TOPOLOGY, budget=5, seed=4, clock=frozen)
    again = plan_job(build("dlrm-a1", TOPOLOGY), TOPOLOGY, budget=5, seed=4, clock=frozen)
    assert first.chosen.choice == again.chosen.choice and first.plan == again.plan


def test_the_budget_is_measured_on_the_given_clock():
    ticks = itertools.count()
    job = plan_job(build("dlrm-a1", TOPOLOGY), TOPOLOGY, budget=20, seed=0, clock=lambda: float(next(ticks)))
    searched = [r.search for r in job.results if r.search is not None]
    assert searched and all(s.stopped_by == "budget" and s.evaluations <= 20 for s in searched)


def test_traces_are_planned_with_their_measured_iteration():
    iteration = [op("all_reduce", 4096, 0.010, 0.012), op("all_reduce", 4096, 0.013, 0.016)]
    later = [op("all_reduce", 4096, 0.030, 0.032), op("all_reduce", 4096, 0.033, 0.036)]
    traces = [trace(iteration, later, rank=r) for r in (0, 1)]
    job = plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen, name="two-ops", native=False)
    assert job.problem.dag.name == "two-ops" and job.problem.compiled is None
    assert job.measured_iteration_seconds is not None and job.measured_iteration_seconds > 0
    assert {o.key.kind for o in job.plan.ops} == {"all_reduce"}


def test_a_trace_wider_than_the_topology_is_one_line_of_error():
    wide = [op("all_reduce", 4096, 0.0, 0.001, group=range(40))]
    traces = [trace(wide, wide, rank=0, world_size=40)]
    with pytest.raises(InvalidInputError, match="uses rank 39 but topology 'hgx2-4n' has 32 devices"):
        plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen)
