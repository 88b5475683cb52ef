"""The replanner sees the service core only as a ``ReplanHost``: driven here with a
host that has nothing else, no gRPC and no store."""

from __future__ import annotations

import asyncio

from optimizer_service.control.coordinator import Coordinator, Timing
from optimizer_service.control.policy import PolicyConfig
from optimizer_service.metrics import ServiceMetrics
from optimizer_service.service.jobs import Job
from optimizer_service.service.live import JobIteration
from optimizer_service.service.replanning import ReplanConfig, Replanner

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
