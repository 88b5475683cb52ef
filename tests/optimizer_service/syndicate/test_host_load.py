"""Each host's CPU per iteration from the ranks' traces, and the bound's host term."""

from __future__ import annotations

import pytest

from optimizer_service.syndicate.bound import iteration_bound
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.host_load import HostLoad, host_loads
from optimizer_service.syndicate.trace_dag import dag_from_traces
from tests.optimizer_service.syndicate.test_bound import MB, TWO_BY_TWO
from tests.support.traces import op, trace


def cpu(*records):
    """``(iteration, wall, process, step thread)`` tuples as a trace's ``cpu`` records."""
    return [{"iteration": i, "wall": w, "process_cpu": p, "step_thread_cpu": s} for i, w, p, s in records]


def traced(rank, host, cores, records, world_size=4):
    iterations = [[op("all_reduce", 4 * MB, 0.010 + k, 0.050 + k, group=range(world_size))] for k in range(3)]
    return {**trace(*iterations, rank=rank, world_size=world_size), "host": {"id": host, "cores": cores},
            "cpu": cpu(*records)}


def test_a_hosts_ranks_add_up_per_iteration_and_the_window_keeps_the_median():
    a = [(1, 0.20, 0.15, 0.10), (2, 0.30, 0.20, 0.12), (3, 0.21, 0.16, 0.11)]
    b = [(1, 0.22, 0.15, 0.10), (2, 0.25, 0.20, 0.12), (3, 0.21, 0.14, 0.11), (4, 0.2, 0.1, 0.1)]
    traces = [traced(0, "boot-1", 2, a), traced(1, "boot-1", 2, b), traced(2, "boot-2", 8, a), traced(3, "boot-2", 8, a)]
    first, second = host_loads(traces)
    assert (first.host, first.ranks, first.cores, first.iterations) == ("boot-1", (0, 1), 2.0, 3)   # iteration 4: one rank
    assert first.wall_seconds == pytest.approx(0.22)                    # the longest rank's, median of .22 .30 .21
    assert first.process_cpu_seconds == pytest.approx(0.30)             # .30 .40 .30 summed per iteration
    assert first.step_thread_cpu_seconds == pytest.approx(0.22)
    assert first.seconds == pytest.approx(0.11) and first.busy == pytest.approx(0.30 / (2 * 0.22))
    assert second.ranks == (2, 3) and second.seconds == pytest.approx(0.22 / 8)
    assert HostLoad.from_dict(first.to_dict()) == first
    assert "host boot-1 (2 cores, ranks 0,1)" in str(first) and "busy" in str(first)


def test_traces_without_host_or_cpu_records_give_no_load_and_odd_records_are_left_out():
    bare = [trace([op("all_reduce", 4 * MB, 0.01, 0.05)], rank=r) for r in range(2)]
    assert host_loads(bare) == ()
    assert host_loads([{**t, "host": {"id": "x", "cores": 2}, "cpu": []} for t in bare]) == ()
    good = cpu((1, 0.2, 0.1, 0.05), (2, 0.2, 0.1, 0.05))
    odd = [{"iteration": 3, "wall": "slow", "process_cpu": 0.1, "step_thread_cpu": 0.0},
           {"iteration": 4, "wall": float("nan"), "process_cpu": 0.1, "step_thread_cpu": 0.0},
           {"iteration": 5, "wall": 0.2, "process_cpu": -1.0, "step_thread_cpu": 0.0}, "junk", {"iteration": "6"}]
    traces = [{**t, "host": {"id": "x" * 500, "cores": 2}, "cpu": good + odd} for t in bare]
    (load,) = host_loads(traces)
    assert load.iterations == 2 and len(load.host) == 64 and load.process_cpu_seconds == pytest.approx(0.2)
    for host in ({"id": "x", "cores": 0}, {"id": "x", "cores": "2"}, {"id": 7, "cores": 2}, {"cores": 2}, "x"):
        assert host_loads([{**t, "host": host, "cpu": good} for t in bare]) == ()


def test_the_hosts_cores_bind_when_the_training_loops_need_more_than_the_critical_path():
    # Four ranks on one host of 1 core, each loop 0.5 core-s per iteration: no plan beats 2 s,
    # though the traced compute chain is 1 s.
    records = [(1, 2.5, 0.6, 0.5), (2, 2.5, 0.6, 0.5)]
    traces = [traced(r, "one", 1, records) for r in range(4)]
    dag = dag_from_traces(traces)
    without = iteration_bound(dag, TWO_BY_TWO)
    bound = iteration_bound(dag, TWO_BY_TWO, host_loads(traces))
    assert without.host_seconds == 0.0 and without.hosts == () and without.seconds == pytest.approx(1.0)
    assert bound.host_seconds == pytest.approx(2.0) and bound.seconds == pytest.approx(2.0)
    assert bound.binding == "host one's 1 cores (its ranks' training loops)"
    assert "host cores 2" in str(bound)
    assert bound.to_dict()["hosts"][0]["busy"] == pytest.approx(2.4 / 2.5)
    # Plenty of cores: the term is there and another binds.
    roomy = iteration_bound(dag, TWO_BY_TWO, host_loads([traced(r, "big", 64, records) for r in range(4)]))
    assert roomy.binding == without.binding and roomy.host_seconds == pytest.approx(2.0 / 64)


def test_plan_job_reads_the_hosts_from_traces():
    records = [(1, 2.5, 0.6, 0.5), (2, 2.5, 0.6, 0.5)]
    traces = [traced(r, "one", 1, records) for r in range(4)]
    job = plan_job(traces, TWO_BY_TWO, budget=5, seed=0, clock=iter(range(10_000)).__next__)
    assert job.bound.host_seconds == pytest.approx(2.0) and job.plan.bound_iteration_seconds == job.bound.seconds
