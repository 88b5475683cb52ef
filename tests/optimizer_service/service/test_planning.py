"""A live job planned in the planner's worker process: the plan, its
prediction and FIFO's for the traced DAG; bad input and an overrun are one line."""

from __future__ import annotations

import asyncio
import operator
import os
import time

import pytest
from pydantic import ValidationError

from optimizer_service.catalog import load_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan import Plan
from optimizer_service.service import planning
from optimizer_service.service.planning import Planner, PlanningError
from optimizer_service.settings import Settings
from tests.support.traces import op, trace

GROUP = list(range(8))


def traces(group: list[int] = GROUP) -> list[dict]:
    def iteration(t: float) -> list[dict]:
        return [op("all_to_all_single", 8 * 4096, t + 0.001, t + 0.003, group),
                op("all_reduce", 4 * 10**6, t + 0.004, t + 0.009, group)]
    return [trace(iteration(0.0), iteration(0.01), iteration(0.02), rank=rank, world_size=len(group))
            for rank in range(2)]


def test_a_traced_job_is_planned_in_the_worker_process():
    planner = Planner()
    try:
        outcome = asyncio.run(planner.plan(traces(), load_topology("hgx2-4n").to_yaml(), budget=1.0))
    finally:
        planner.close()
    plan = Plan.parse(outcome.plan_json)
    assert {o.key.kind for o in plan.ops} == {"all_reduce", "all_to_all"} and outcome.planned_ops == 2
    assert outcome.measured_seconds == pytest.approx(0.01)
    assert 0 < outcome.predicted_seconds <= outcome.fifo_seconds        # Syndicate never worse than FIFO
    assert set(outcome.systems) == {"FIFO", "BS+", "HO", "S-Exec", "S-Sched", "Syndicate"}
    assert outcome.to_dict()["comm_ops"] == 2


def test_the_running_plan_is_priced_alike_fifo_for_passthrough_and_the_plan_itself_when_it_runs():
    topology = load_topology("hgx2-4n").to_yaml()
    first = planning.search(traces(), topology, seed=0)
    assert first.running_seconds == first.fifo_seconds
    again = planning.search(traces(), topology, seed=0, running_plan_json=first.plan_json)
    assert again.running_seconds == pytest.approx(first.predicted_seconds)     # same traces, same model
    assert again.to_dict()["running_seconds"] == again.running_seconds

def test_a_bad_topology_or_trace_is_one_line():
    planner = Planner()
    try:
        with pytest.raises(PlanningError, match="cannot plan this job") as bad_yaml:
            asyncio.run(planner.plan(traces(), "levels: [", budget=0.5))
        topology = load_topology("dgx-h100")
        with pytest.raises(PlanningError, match=f"has {topology.device_count} devices") as too_small:
            asyncio.run(planner.plan(traces(list(range(topology.device_count + 1))), topology.to_yaml(),
                                     budget=0.5))
    finally:
        planner.close()
    assert "\n" not in str(bad_yaml.value) and "\n" not in str(too_small.value)


def test_a_search_that_overruns_is_stopped_with_its_worker(monkeypatch):
    monkeypatch.setattr(planning, "GRACE_SECONDS", 0.0)
    planner = Planner()
    try:
        with pytest.raises(PlanningError, match="did not finish within its budget"):
            asyncio.run(planner.plan(traces(), load_topology("hgx2-4n").to_yaml(), budget=0.05))
        assert planner._pool is None                                     # the next search starts a new worker
        monkeypatch.undo()
        again = asyncio.run(planner.plan(traces(), load_topology("hgx2-4n").to_yaml(), budget=0.5))
        assert again.planned_ops == 2
    finally:
        planner.close()


def test_a_cancelled_search_stops_the_worker_and_a_waiting_call_of_another_job_runs_on_the_next():
    """The policy drops a search for an old cluster state: the worker must not finish it first."""
    planner = Planner()

    async def scenario() -> tuple[int, int, bool]:
        running = asyncio.create_task(planner._run("the search", 600, time.sleep, 600))   # in the worker
        while planner._pool is None or not any(p.is_alive() for p in planner._pool._processes.values()):
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)                          # the worker has taken the call (spawned, imported)
        waiting = asyncio.create_task(planner._run("another job's search", 600, operator.add, 1, 2))
        await asyncio.sleep(0.2)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        other = await asyncio.wait_for(waiting, 120)  # a worker still sleeping its 600 s would time this out
        mine = await asyncio.wait_for(planner._run("the next search", 600, operator.add, 2, 3), 120)
        return other, mine, running.cancelled()

    try:
        assert asyncio.run(scenario()) == (3, 5, True)
    finally:
        planner.close()


def test_a_jobs_topology_is_a_preset_or_a_yaml_document_never_a_path(tmp_path):
    from optimizer_service.service.planning import resolve_topology

    preset = resolve_topology("hgx2-4n")
    assert "name: hgx2-4n" in preset
    assert resolve_topology(preset) == preset                           # a document, as the ranks send it
    path = tmp_path / "t.yaml"
    path.write_text(preset)
    for bad, words in [("nowhere", "unknown topology 'nowhere'"), (str(path), "unknown topology"),
                       ("name: x\nlevels: [\n", "not valid")]:
        with pytest.raises(PlanningError, match=words):
            resolve_topology(bad)


def test_a_tried_plan_is_fitted_in_the_worker_from_its_motif_times_and_the_next_search_keeps_them():
    """What a rolled-back plan measured is kept for its cluster state: passthrough's next window runs
    channel 0 alone, and without the tried plan's fit channel 1 and the host would be priced as calibrated."""
    from optimizer_service.syndicate.telemetry_fit import TelemetryFit, fit_samples, passthrough_samples
    from tests.optimizer_service.syndicate.test_telemetry_fit import TOPOLOGY, TRUE, job_plan, recorded

    plan, topology_yaml = job_plan(), TOPOLOGY.to_yaml()
    planner = Planner()
    try:
        fitted = asyncio.run(planner.fit(recorded(plan), topology_yaml, plan.to_json(), None, 30.0))
        # traces of another version hold none of its motifs: nothing to keep
        other = [dict(t, switches=[{"iteration": 0, "version": 7, "at": 0.0}]) for t in recorded(plan)]
        assert asyncio.run(planner.fit(other, topology_yaml, plan.to_json(), None, 30.0)) is None
    finally:
        planner.close()
    fit = TelemetryFit.from_dict(fitted)
    assert (fit.channels[1].motif_seconds, fit.channels[1].scale) == pytest.approx(
        (TRUE[1][0], TRUE[1][2]), rel=0.02)
    # the next window: passthrough on channel 0 only; channel 1 comes from the tried plan's fit
    group = [0, 1, 2, 3]
    window = [trace(*[[op("all_reduce", 4_000 * (1 + i % 4), 1.0 * i, 1.0 * i + 0.01 * (1 + i % 4), group)]
                      for i in range(12)], rank=rank, world_size=4) for rank in group]
    assert passthrough_samples(TOPOLOGY, window)
    after = fit_samples(passthrough_samples(TOPOLOGY, window), TOPOLOGY.channels, prior=fit)
    assert after.channels[1].earlier and after.channels[1].scale == pytest.approx(TRUE[1][2], rel=0.02)


def test_the_worker_runs_its_nice_value_below_the_service_and_a_bad_one_is_refused():
    """A search on a host shared with the job takes the cores its training loops leave idle."""
    planner = Planner(nice=7)
    try:
        worker = asyncio.run(planner._run("reading the worker's priority", 30.0, os.nice, 0))
    finally:
        planner.close()
    assert worker == min(os.nice(0) + 7, planning.MAX_NICE)
    with pytest.raises(InvalidInputError, match="0..19, not 20"):
        Planner(nice=20)


def test_p2_search_nice_sets_the_workers_priority_within_0_to_19(monkeypatch):
    monkeypatch.setenv("P2_SEARCH_NICE", "3")
    assert Settings().search_nice == 3
    monkeypatch.setenv("P2_SEARCH_NICE", "20")
    with pytest.raises(ValidationError, match="search_nice"):
        Settings()
    monkeypatch.delenv("P2_SEARCH_NICE")
    assert Settings().search_nice == planning.DEFAULT_NICE
