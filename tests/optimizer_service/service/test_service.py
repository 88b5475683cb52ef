"""The service end to end over real gRPC: a real server on port 0, a real
SQLite store, ranks that speak the real protocol in-process
(tests/support/participants.py), the admin API, health and reflection, tokens."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from optimizer_service.control.coordinator import Timing
from optimizer_service.control.policy import PolicyConfig
from optimizer_service.plan import Plan
from optimizer_service.plan.proto_codec import plan_to_proto
from optimizer_service.service import planning, search_record
from optimizer_service.service.replanning import ReplanConfig
from optimizer_service.service.server import Service, ServiceConfig
from optimizer_service.wire.credentials import bearer
from p2.v1 import enforcer_link_pb2 as link
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc, plan_pb2
from tests.optimizer_service.syndicate.test_live_search import TOPOLOGY as LIVE_TOPOLOGY
from tests.optimizer_service.syndicate.test_live_search import passthrough_traces
from tests.support.participants import SimRank, run_rank

FAST = Timing(vote_timeout=3.0, resend_interval=0.2, switch_margin=2)


def config(tmp_path: Path, **changes) -> ServiceConfig:
    values = dict(listen="127.0.0.1:0", store_url=f"sqlite:///{tmp_path / 'service.db'}", timing=FAST,
                  tick_seconds=0.05)
    values.update(changes)
    return ServiceConfig(**values)


class Harness:
    """A running service, an admin stub, and simulated ranks of one job."""

    def __init__(self, service: Service, token: str | None = None) -> None:
        self.service = service
        self.token = token
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
        self.admin = optimizer_pb2_grpc.OptimizerStub(self.channel)
        self.stop_ranks = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    async def join(self, job: str, world: int, refuse: dict[int, str] | None = None) -> list[SimRank]:
        ranks = [SimRank(job, r, world, refuse=(refuse or {}).get(r, "")) for r in range(world)]
        for sim in ranks:
            self.tasks.append(asyncio.ensure_future(run_rank(sim, self.channel, self.token, self.stop_ranks)))
        await asyncio.wait_for(asyncio.gather(*(sim.registered.wait() for sim in ranks)), 10)
        return ranks

    async def call(self, method: str, request):
        return await getattr(self.admin, method)(request, metadata=bearer(self.token), timeout=10)

    async def until(self, predicate, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            assert loop.time() < deadline, "timed out waiting"
            await asyncio.sleep(0.02)

    async def plan_when(self, job: str, version: int, predicate, timeout: float = 10.0) -> api.PlanRecord:
        """GetPlan until ``predicate(record)`` holds (the service applies acks after the ranks send them)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            record = await self.call("GetPlan", api.GetPlanRequest(job_id=job, version=version))
            if predicate(record):
                return record
            assert loop.time() < deadline, f"timed out; last record: {record}"
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        self.stop_ranks.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.channel.close()
        await self.service.stop(grace=0.5)


def run(scenario, cfg: ServiceConfig):
    async def main():
        service = Service(cfg)
        await service.start()
        harness = Harness(service, cfg.token)
        try:
            return await scenario(harness)
        finally:
            await harness.close()
    return asyncio.run(main())


def empty_plan(world: int) -> plan_pb2.Plan:
    return plan_to_proto(Plan(1, world, {0: None}, ()))


def test_a_job_registers_goes_live_and_a_plan_commits_on_every_rank(tmp_path, store_url):
    async def scenario(h: Harness):
        ranks = await h.join("job-a", 4)
        job = await h.call("GetJob", api.GetJobRequest(job_id="job-a"))
        assert job.state == api.LIVE and len(job.ranks) == 4 and all(r.connected for r in job.ranks)
        record = await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-a", plan=empty_plan(4)))
        assert record.version == 1 and record.state == api.PREPARING
        await h.until(lambda: all(1 in sim.acked for sim in ranks))
        shown = await h.plan_when("job-a", 1, lambda r: all(x.state == "acked_commit" for x in r.ranks))
        assert shown.state == api.COMMITTED and shown.plan.world_size == 4
        assert [r.state for r in shown.ranks] == ["acked_commit"] * 4
        listed = await h.call("ListPlans", api.ListPlansRequest(job_id="job-a"))
        assert [p.version for p in listed.plans] == [1] and not listed.plans[0].HasField("plan")
        job = await h.call("GetJob", api.GetJobRequest(job_id="job-a"))
        assert job.committed_version == 1
        second = await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-a", plan=empty_plan(4)))
        assert second.version == 2
        await h.until(lambda: all(2 in sim.acked for sim in ranks))
    run(scenario, config(tmp_path, store_url=store_url))


def test_a_rank_that_cannot_prepare_aborts_the_plan_everywhere(tmp_path):
    async def scenario(h: Harness):
        ranks = await h.join("job-b", 4, refuse={3: "channel 1 needs nic1, which this host lacks"})
        await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-b", plan=empty_plan(4)))
        await h.until(lambda: all(1 in sim.aborted for sim in ranks))
        shown = await h.plan_when("job-b", 1, lambda r: r.state == api.ABORTED)
        assert shown.state == api.ABORTED and "nic1" in shown.reason
        assert not any(sim.acked for sim in ranks)
        assert dict((r.rank, r.state) for r in shown.ranks)[3] in ("voted_no", "acked_abort")
        job = await h.call("GetJob", api.GetJobRequest(job_id="job-b"))
        assert job.committed_version == 0
    run(scenario, config(tmp_path))


@pytest.mark.parametrize("request_, code, words", [
    (api.SubmitPlanRequest(job_id="nope", plan=plan_to_proto(Plan(1, 2, {0: None}, ()))), grpc.StatusCode.NOT_FOUND,
     "no job 'nope'"),
    (api.SubmitPlanRequest(job_id="bad id!", plan=plan_to_proto(Plan(1, 2, {0: None}, ()))),
     grpc.StatusCode.INVALID_ARGUMENT, "job_id"),
    (api.SubmitPlanRequest(job_id="job-c"), grpc.StatusCode.INVALID_ARGUMENT, "plan: missing"),
    (api.SubmitPlanRequest(job_id="job-c", plan=plan_to_proto(Plan(1, 8, {0: None}, ()))),
     grpc.StatusCode.FAILED_PRECONDITION, "8"),
])
def test_bad_submissions_are_refused_with_one_line_and_change_nothing(tmp_path, request_, code, words):
    async def scenario(h: Harness):
        await h.join("job-c", 2)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await h.call("SubmitPlan", request_)
        assert error.value.code() == code and words in error.value.details()
        assert "\n" not in error.value.details()
        listed = await h.call("ListPlans", api.ListPlansRequest(job_id="job-c"))
        assert list(listed.plans) == []
    run(scenario, config(tmp_path))


@pytest.mark.parametrize("request_, code, words", [
    (api.ListDecisionsRequest(job_id="job-c", limit=10_001), grpc.StatusCode.INVALID_ARGUMENT, "limit: 10001"),
    (api.ListDecisionsRequest(job_id="bad id!"), grpc.StatusCode.INVALID_ARGUMENT, "job_id"),
    (api.ListDecisionsRequest(job_id="nope"), grpc.StatusCode.NOT_FOUND, "no job 'nope'"),
])
def test_bad_decision_listings_are_one_line(tmp_path, request_, code, words):
    async def scenario(h: Harness):
        await h.join("job-c", 2)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await h.call("ListDecisions", request_)
        assert error.value.code() == code and words in error.value.details(), error.value.details()
        assert "\n" not in error.value.details()
        listed = await h.call("ListDecisions", api.ListDecisionsRequest(job_id="job-c"))
        assert list(listed.decisions) == []              # replanning is off in this harness: nothing decided
    run(scenario, config(tmp_path))


def test_a_job_that_is_not_live_refuses_plans(tmp_path):
    async def scenario(h: Harness):
        ranks = [SimRank("job-d", 0, 2)]
        h.tasks.append(asyncio.ensure_future(run_rank(ranks[0], h.channel, None, h.stop_ranks)))
        await asyncio.wait_for(ranks[0].registered.wait(), 10)
        job = await h.call("GetJob", api.GetJobRequest(job_id="job-d"))
        assert job.state == api.REGISTERING
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-d", plan=empty_plan(2)))
        assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    run(scenario, config(tmp_path))


def test_a_restarted_service_recovers_its_jobs_with_a_higher_epoch(tmp_path, store_url):
    async def first(h: Harness):
        ranks = await h.join("job-e", 2)
        await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-e", plan=empty_plan(2)))
        await h.until(lambda: all(1 in sim.acked for sim in ranks))
        await h.plan_when("job-e", 1, lambda r: all(x.state == "acked_commit" for x in r.ranks))
        return (await h.call("GetJob", api.GetJobRequest(job_id="job-e"))).epoch

    async def second(h: Harness):
        job = await h.call("GetJob", api.GetJobRequest(job_id="job-e"))
        assert job.committed_version == 1 and job.state == api.DEGRADED
        ranks = await h.join("job-e", 2)
        # Fresh ranks (a restarted job) get the committed plan again.
        await h.until(lambda: all(1 in sim.acked for sim in ranks))
        return job.epoch

    epoch_before = run(first, config(tmp_path, store_url=store_url))
    epoch_after = run(second, config(tmp_path, store_url=store_url))
    assert epoch_after > epoch_before


def test_tokens_health_and_reflection(tmp_path):
    async def scenario(h: Harness):
        health = health_pb2_grpc.HealthStub(h.channel)
        answer = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)   # no token: probes
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        for metadata in ([], bearer("wrong")):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await h.admin.ListJobs(api.ListJobsRequest(), metadata=metadata, timeout=5)
            assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        intruder = SimRank("job-f", 0, 1)
        await run_rank(intruder, h.channel, "wrong", h.stop_ranks)
        assert intruder.error is not None and intruder.error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert (await h.call("ListJobs", api.ListJobsRequest())).jobs == []
        reflect = reflection_pb2_grpc.ServerReflectionStub(h.channel)
        names = set()
        async for reply in reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(
                list_services="")]), metadata=bearer(h.token)):
            names |= {s.name for s in reply.list_services_response.service}
        assert {"p2.v1.Optimizer", "p2.v1.EnforcerLink", "grpc.health.v1.Health"} <= names
    run(scenario, config(tmp_path, token="s3cret"))


def test_telemetry_with_motif_timings_reaches_the_replanning_policy_per_channel(tmp_path):
    """Each iteration's motif seconds are summed per channel, averaged over the ranks, and fed to
    the job's policy (its channel-drift check); the ranks' streams stay open."""
    policy = PolicyConfig(first_plan_after=1000, warmup=0, window=20, min_samples=2, evaluate=20)

    async def scenario(h: Harness):
        ranks = await h.join("job-t", 2)
        replanner = h.service.core.replanner
        # the topology is read off the event loop; iterations fed before it is known would be measured
        # in the cluster state it then replaces (and dropped with it): wait for it first
        await h.until(lambda: replanner.topology_yaml(h.service.core.jobs["job-t"]) != "")
        for iteration in range(1, 4):
            for sim in ranks:
                motifs = [link.MotifTiming(op_seq=0, order=k, channel=k % 2, duration_seconds=0.01 * (sim.rank + 1))
                          for k in range(3)]          # channel 0 twice, channel 1 once
                sim.send(link.RankMessage(telemetry=link.Telemetry(
                    job_id="job-t", iteration=iteration, duration_seconds=0.1, motifs=motifs)))
        await h.until(lambda: len(replanner.policy("job-t").measurement.channel_window) >= 2)
        assert all(sim.error is None for sim in ranks)
        policy = replanner.policy("job-t")
        return policy.measurement.channel_window[0], policy.channel_medians()

    first, medians = run(scenario, config(tmp_path, replan=ReplanConfig(policy=policy, topology="hgx2-4n")))
    assert first == ((0, pytest.approx(0.03)), (1, pytest.approx(0.015)))     # mean over ranks of 0.02/0.04, 0.01/0.02
    assert medians == {0: pytest.approx(0.03), 1: pytest.approx(0.015)}



def test_without_replanning_a_job_is_measured_over_the_policys_window_and_its_plan_records_it(tmp_path):
    """One measured iteration time: with --no-replan the same window the policy would keep (warm-up
    after the switch, the last ``window``, ``min_samples`` needed) is what the plan record, the
    prediction and the dashboard read."""
    policy = PolicyConfig(first_plan_after=1000, warmup=2, window=4, min_samples=3, evaluate=3)

    async def scenario(h: Harness):
        ranks = await h.join("job-m", 2)
        await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-m", plan=empty_plan(2)))
        await h.until(lambda: all(1 in sim.acked for sim in ranks))
        core = h.service.core
        job = core.job("job-m")
        for iteration in range(1, 11):          # passthrough for 3 iterations, then v1 at iteration/10 s
            for sim in ranks:
                sim.send(link.RankMessage(telemetry=link.Telemetry(
                    job_id="job-m", iteration=iteration, duration_seconds=iteration / 10,
                    running_version=0 if iteration <= 3 else 1)))
            if iteration == 5:
                await h.until(lambda: job.live.history and job.live.history[-1].index == 5)
                assert core.iteration_time(job).seconds is None     # 2 warm-up iterations of v1, none measured
        await h.until(lambda: job.live.history and job.live.history[-1].index == 10)
        return core.iteration_time(job), job.plans[1], core.prediction(job)

    measured, record, prediction = run(scenario, config(tmp_path, replan=ReplanConfig(enabled=False, policy=policy)))
    assert (measured.version, measured.iterations) == (1, 4)
    assert measured.seconds == pytest.approx(0.85)          # median of 0.7, 0.8, 0.9, 1.0
    assert (record.measured_seconds, record.measured_iterations) == (measured.seconds, 4)
    assert prediction["running_version"] == 1 and prediction["measured_seconds"] == measured.seconds


def test_each_plan_and_passthrough_are_shown_beside_the_bound_and_a_restart_keeps_it(tmp_path):
    """The lower bound a plan carries (``p2 optimize --plan``'s, a search's) is its record's;
    passthrough's is the first plan's; GetJob and ListPlans carry measured, predicted and bound."""
    policy = PolicyConfig(first_plan_after=1000, warmup=1, window=4, min_samples=2, evaluate=2)
    bounded = plan_to_proto(Plan(1, 2, {0: None}, (), predicted_iteration_seconds=0.09, bound_iteration_seconds=0.05))

    async def first(h: Harness):
        ranks = await h.join("job-b", 2)
        core = h.service.core
        job = core.job("job-b")

        async def iterations(indices, seconds: float, version: int) -> None:
            for iteration in indices:
                for sim in ranks:
                    sim.send(link.RankMessage(telemetry=link.Telemetry(
                        job_id="job-b", iteration=iteration, duration_seconds=seconds, running_version=version)))
            await h.until(lambda: job.live.history and job.live.history[-1].index == indices[-1])

        await iterations(range(1, 5), 0.1, 0)               # passthrough: measured, no bound yet
        shown = await h.call("GetJob", api.GetJobRequest(job_id="job-b"))
        assert shown.passthrough_measured_seconds == pytest.approx(0.1)
        assert not shown.HasField("passthrough_bound_seconds")
        assert core.prediction(job)["bound_iteration_seconds"] is None
        await h.call("SubmitPlan", api.SubmitPlanRequest(job_id="job-b", plan=bounded))
        await h.until(lambda: all(1 in sim.acked for sim in ranks))
        await iterations(range(5, 10), 0.08, 1)
        await h.until(lambda: job.plans[1].measured_seconds is not None)
        record = (await h.call("ListPlans", api.ListPlansRequest(job_id="job-b"))).plans[0]
        shown = await h.call("GetJob", api.GetJobRequest(job_id="job-b"))
        await h.until(lambda: not job.plans[1].dirty)       # the record is stored on the next tick
        return record, shown, core.prediction(job)

    record, shown, prediction = run(first, config(tmp_path, replan=ReplanConfig(enabled=False, policy=policy)))
    assert (record.predicted_seconds, record.bound_iteration_seconds) == (0.09, 0.05)
    assert record.measured_seconds == pytest.approx(0.08)
    assert shown.passthrough_bound_seconds == 0.05 and shown.passthrough_measured_seconds == pytest.approx(0.1)
    assert prediction["bound_iteration_seconds"] == 0.05 and prediction["ratio_to_bound"] == pytest.approx(1.6)

    async def second(h: Harness):
        record = await h.call("GetPlan", api.GetPlanRequest(job_id="job-b", version=1))
        return record, await h.call("GetJob", api.GetJobRequest(job_id="job-b"))

    record, shown = run(second, config(tmp_path, replan=ReplanConfig(enabled=False, policy=policy)))
    assert record.bound_iteration_seconds == 0.05 and record.plan.bound_iteration_seconds == 0.05
    assert shown.passthrough_bound_seconds == 0.05          # passthrough's measured time is not stored
    assert not shown.HasField("passthrough_measured_seconds")


def test_a_jobs_latest_search_shows_its_fitted_model_and_bound_and_a_restart_reads_it_back(tmp_path):
    """A real search (ranks answer the trace request, the worker process plans): GetJob carries the
    job's latest ``searched`` decision with the model fitted to the job's telemetry, each fitted
    value's effect and the bound; ListJobs leaves it out; a restarted service reads it from the store.
    The search's record (``record_dir``) holds the windows it read: searched again, they give its plan."""
    traces = passthrough_traces([0.02] * 8)
    records = tmp_path / "searches"
    replan = ReplanConfig(policy=PolicyConfig(first_plan_after=100_000), topology=LIVE_TOPOLOGY.to_yaml(),
                          record_dir=str(records))

    async def first(h: Harness):
        ranks = await h.join("job-f", 4)
        for sim, trace in zip(ranks, traces):
            sim.trace = trace
        core = h.service.core
        job = core.job("job-f")
        before = await h.call("GetJob", api.GetJobRequest(job_id="job-f"))
        assert before.latest_search == ""
        for iteration in range(1, 4):
            for sim in ranks:
                sim.send(link.RankMessage(telemetry=link.Telemetry(job_id="job-f", iteration=iteration,
                                                                   duration_seconds=0.2)))
        await h.until(lambda: job.live.history and job.live.history[-1].index == 3)
        assert core.replan_now("job-f", "test")["phase"] == "searching"
        await h.until(lambda: job.latest_search is not None, timeout=60)
        await h.until(lambda: (records / f"job-f-v{job.latest_search['version']}.json").is_file(), timeout=10)
        shown = await h.call("GetJob", api.GetJobRequest(job_id="job-f"))
        listed = await h.call("ListJobs", api.ListJobsRequest())
        stored = await core.decisions("job-f", 100)
        return shown, listed, stored

    shown, listed, stored = run(first, config(tmp_path, replan=replan))
    decision = json.loads(shown.latest_search)
    assert decision == next(d for d in reversed(stored) if d["kind"] == "searched")      # the stored document
    assert [j.latest_search for j in listed.jobs] == [""]
    search = decision["search"]
    fit, bound = search["fit"], search["bound"]
    assert fit["channels"]["0"]["fitted"] == ["rate", "motif_seconds", "latency"] and fit["channels"]["0"]["samples"]
    assert fit["channels"]["0"]["rate_bytes_per_s"] < fit["channels"]["0"]["calibrated_rate_bytes_per_s"]
    effects = {e["parameter"]: e["predicted_seconds_without"] for e in fit["effects"]}
    assert {"channel 0 motif_seconds", "channel 0 latency", "channel 0 rate"} <= set(effects)
    # every fitted value is a cost: back at its calibrated value the chosen plan is predicted faster, or as fast
    # where it runs nothing that value prices (the first search chooses by every reading of the window)
    assert all(without <= fit["fit_predicted_seconds"] for without in effects.values())
    assert any(without < fit["fit_predicted_seconds"] for without in effects.values())
    assert all(entry["scale"] == 1.0 for entry in fit["other_reading"]["channels"].values())     # links as calibrated
    assert 0 < bound["seconds"] == search["bound_seconds"] <= search["predicted_seconds"] and bound["binding"]

    async def second(h: Harness):
        return await h.call("GetJob", api.GetJobRequest(job_id="job-f"))

    again = run(second, config(tmp_path, replan=replan))
    assert json.loads(again.latest_search) == decision

    record = search_record.read(records / f"job-f-v{decision['version']}.json")
    assert (record.job_id, record.version, record.prior_fit, record.running_plan_json) == \
        ("job-f", decision["version"], None, None)
    assert len(record.traces) == 4 and record.outcome == search
    replayed = planning.search(record.traces, record.topology_yaml, record.seed, record.running_plan_json,
                               record.evaluations, record.prior_fit)
    assert replayed.plan_json == record.plan_json and replayed.predicted_seconds == search["predicted_seconds"]
