"""The replanner sees the service core only as a ``ReplanHost``: driven here with a
host that has nothing else, no gRPC and no store."""

from __future__ import annotations

import asyncio

import pytest

from optimizer_service.control.coordinator import Coordinator, Timing
from optimizer_service.control.policy import PolicyConfig
from optimizer_service.metrics import ServiceMetrics
from optimizer_service.service.jobs import Job
from optimizer_service.service.live import JobIteration
from optimizer_service.service.replanning import JobLoop, ReplanConfig, Replanner

POLICY = PolicyConfig(first_plan_after=6, warmup=1, window=4, min_samples=3, evaluate=3)


class RecordingHost:
    """A ReplanHost that records the job events and has no plans, traces or commits to give."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, int, dict]] = []

    def clock(self) -> float:
        return 100.0

    def record(self, job_id, kind, version, reason, details) -> None:
        self.records.append((job_id, kind, version, dict(details)))

    async def collect_traces(self, job_id, iterations):
        raise AssertionError("a search without a topology asks the ranks for nothing")

    async def store_plan(self, job_id, plan, *, origin, predicted_seconds=None):
        raise AssertionError("no search finished")

    async def submit_stored(self, job_id, version):
        raise AssertionError("nothing to commit")

    async def submit_plan(self, job_id, plan, *, origin="", predicted_seconds=None):
        raise AssertionError("nothing to roll back")

    async def plan(self, job_id, version):
        raise AssertionError("no stored plan is read")


def test_the_replanner_runs_a_jobs_policy_through_its_host_and_answers_through_public_reads():
    host, metrics = RecordingHost(), ServiceMetrics()

    async def scenario() -> Replanner:
        replanner = Replanner(ReplanConfig(policy=POLICY), host, metrics)
        job = Job("j", 2, 4, 0.0, Coordinator.new("j", 2, 1, 4, Timing()))
        assert replanner.policy("j") is None and replanner.timeline("j", 1) == ()     # reads start no loop
        replanner.registered(job, topology_changed=False)
        for index in range(6):
            replanner.iteration(job, JobIteration(index, float(index), 0.1, 0.0, 0))
        for _ in range(5):
            await asyncio.sleep(0)              # the search fails at once: the job has no topology
        assert replanner.policy("j").phase == "waiting" and replanner.topology_error("j").startswith("no topology")
        assert replanner.pause(job, True, "incident")["paused"] is True
        return replanner

    replanner = asyncio.run(scenario())
    kinds = [kind for _, kind, _, _ in host.records]
    assert kinds == ["replan", "search-failed", "paused"]
    assert host.records[0][3]["trigger"] == "first" and host.records[0][3]["iteration"] == 5
    assert 'p2_replans_total{job_id="j",reason="first"} 1.0' in metrics.exposition().decode()
    replanner.forget("j")
    assert replanner.policy("j") is None and replanner.topology_error("j") == ""
    replanner.close()


class TracingHost(RecordingHost):
    """A ReplanHost whose ranks answer a trace request with ``traces``."""

    def __init__(self, traces: list[dict]) -> None:
        super().__init__()
        self.traces, self.asked = traces, 0

    async def collect_traces(self, job_id, iterations):
        self.asked += 1
        return self.traces


def test_a_rolled_back_plans_motif_times_are_fitted_in_the_worker_and_kept_for_its_cluster_state():
    """The rollback path (JobLoop._fit_tried): the tried plan's traces, fitted by the real worker,
    become the fit the next search in the same cluster state starts from, with a ``fitted`` event."""
    from optimizer_service.service.planning import Planner
    from optimizer_service.syndicate.telemetry_fit import TelemetryFit
    from tests.optimizer_service.syndicate.test_telemetry_fit import TOPOLOGY, TRUE, job_plan, recorded

    plan = job_plan()
    host, planner = TracingHost(recorded(plan)), Planner()

    async def scenario() -> tuple[dict | None, dict | None, int]:
        job = Job("j", 4, 4, 0.0, Coordinator.new("j", 4, 1, 4, Timing()), topology=TOPOLOGY.to_yaml())
        loop = JobLoop(host, ServiceMetrics(), planner, ReplanConfig(policy=POLICY), job)
        await loop._topology_known()
        cluster = loop.policy.cluster
        await loop._fit_tried(plan, cluster)
        kept = loop._prior_fit(cluster)
        # a drift state of it (the job measured the change) starts from the kept values, without their shapes
        drifted = loop._prior_fit(f"{cluster}~d1")
        assert drifted["channels"]["1"]["scale"] == kept["channels"]["1"]["scale"] and kept["channels"]["1"]["shapes"]
        assert not drifted["channels"]["1"]["shapes"] and loop._prior_fit("another~d1") is None
        # a fit that finishes after the cluster changed is not kept for the new state
        await loop._fit_tried(plan, "another state")
        assert loop._prior_fit("another state") is None
        # traces that hold none of the plan's motifs (another version ran): nothing kept, no event
        host.traces = [dict(t, switches=[{"iteration": 0, "version": 7, "at": 0.0}]) for t in recorded(plan)]
        loop._fit = None
        await loop._fit_tried(plan, cluster)
        return kept, loop._prior_fit(cluster), host.asked

    try:
        kept, after_foreign, asked = asyncio.run(scenario())
    finally:
        planner.close()
    assert asked == 3 and after_foreign is None
    fit = TelemetryFit.from_dict(kept)
    assert (fit.channels[1].motif_seconds, fit.channels[1].scale) == pytest.approx((TRUE[1][0], TRUE[1][2]), rel=0.02)
    fitted = [record for record in host.records if record[1] == "fitted"]
    assert len(fitted) == 1 and fitted[0][2] == plan.version and "iteration" in fitted[0][3]
