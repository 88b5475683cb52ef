"""Issue 30, items 5-7 of the core: registration all or nothing (a store that
refuses the write leaves no phantom rank), telemetry bounded before anything
acts on it, versions only for accepted plans, a cap on jobs, deleting a job,
and paginated job lists.

Real components throughout: ``p2 serve`` processes or an in-process
:class:`Service` on a real gRPC port, real SQLite and a real ``redis-server``
(filled with ``maxmemory`` so its writes fail like a full disk), and simulated
ranks speaking the real protocol (tests/support/participants.py)."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import math
import os
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest
import redis

from optimizer_service.control.coordinator import Timing
from optimizer_service.plan import Plan
from optimizer_service.plan.proto_codec import plan_to_proto
from optimizer_service.service.server import Service, ServiceConfig
from optimizer_service.service.store import open_store
from p2.v1 import enforcer_link_pb2 as link
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc, plan_pb2
from tests.support.participants import SimRank, run_rank
from tests.support.responsiveness import HealthProbe
from tests.support.service_process import ServeProcess

FAST = Timing(vote_timeout=3.0, resend_interval=0.2, switch_margin=2)


def empty_plan(world: int) -> plan_pb2.Plan:
    return plan_to_proto(Plan(1, world, {0: None}, ()))


class Rank:
    """One simulated rank with its own stream (and its own stop), so a test can
    connect and drop ranks one at a time and see how each stream ended."""

    def __init__(self, channel: grpc.aio.Channel, job: str, rank: int, world: int) -> None:
        self.sim = SimRank(job, rank, world)
        self.channel = channel
        self.stop = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def connect(self, timeout: float = 10.0) -> Rank:
        """Open the stream; return once it registered or ended (refused)."""
        self.task = asyncio.ensure_future(run_rank(self.sim, self.channel, None, self.stop))
        registered = asyncio.ensure_future(self.sim.registered.wait())
        await asyncio.wait({self.task, registered}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        registered.cancel()
        assert self.task.done() or self.sim.registered.is_set(), "the rank neither registered nor was refused"
        return self

    async def ended(self, timeout: float = 10.0) -> grpc.RpcError | None:
        """Wait for the service to end the stream; how it ended (None: OK)."""
        await asyncio.wait_for(asyncio.shield(self.task), timeout)
        return self.sim.error

    async def close(self) -> None:
        self.stop.set()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)

    @property
    def prepared(self) -> list[int]:
        return [m.prepare.version for m in self.sim.received if m.WhichOneof("body") == "prepare"]


async def until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        assert loop.time() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


def one_line_error(error: grpc.RpcError | None, code: grpc.StatusCode, *words: str) -> str:
    assert error is not None, "the call succeeded"
    details = error.details() or ""
    assert error.code() == code, (error.code(), details)
    assert details and "\n" not in details and "Traceback" not in details, details
    for word in words:
        assert word in details, details
    return details


async def call_error(coroutine) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        await coroutine
    return caught.value


async def jobs_of(admin) -> dict[str, api.Job]:
    reply = await admin.ListJobs(api.ListJobsRequest(), timeout=10)
    return {job.job_id: job for job in reply.jobs}


class Watcher:
    """Every job event the service publishes (Watch on all jobs), in order."""

    def __init__(self, admin) -> None:
        self.events: list[api.JobEvent] = []
        self.call = admin.Watch(api.WatchRequest())
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            async for event in self.call:
                self.events.append(event)
        except (grpc.RpcError, asyncio.CancelledError):
            pass

    def of(self, job: str, kind: str, rank: int | None = None) -> list[api.JobEvent]:
        return [e for e in self.events
                if e.job_id == job and e.kind == kind and (rank is None or (e.has_rank and e.rank == rank))]

    async def close(self) -> None:
        self.call.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


# --------------------------------------------------------- item 5: registration is all or nothing
def _redis_full(server_url: str, full: bool) -> None:
    """Make the Redis server refuse every write (as a full disk refuses SQLite's), or take it back."""
    client = redis.Redis.from_url(server_url)
    try:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "1" if full else "0")
    finally:
        client.close()


async def _phantom_scenario(address: str, fill, empty) -> None:
    """The shared scenario: a job with rank 0 of 2 connected, then the store refuses writes."""
    async with grpc.aio.insecure_channel(address) as channel:
        admin = optimizer_pb2_grpc.OptimizerStub(channel)
        watcher = Watcher(admin)
        rank0 = await Rank(channel, "held", 0, 2).connect()
        assert rank0.sim.registered.is_set(), rank0.sim.error
        rank1, fresh = Rank(channel, "held", 1, 2), Rank(channel, "fresh", 0, 1)
        fill()
        try:
            await asyncio.sleep(0.3)
            seen = len(watcher.events)
            for rank in (rank1, fresh):
                await rank.connect()
                one_line_error(await rank.ended(), grpc.StatusCode.UNAVAILABLE, "store")
            jobs = await jobs_of(admin)
            assert set(jobs) == {"held"}, "a new job whose write failed must not exist"
            held = jobs["held"]
            assert held.state == api.REGISTERING
            assert [(r.rank, r.connected) for r in held.ranks] == [(0, True)], held.ranks
            refused = await call_error(admin.SubmitPlan(api.SubmitPlanRequest(job_id="held", plan=empty_plan(2)),
                                                        timeout=10))
            one_line_error(refused, grpc.StatusCode.FAILED_PRECONDITION, "not connected")
            await asyncio.sleep(0.3)
            late = [e for e in watcher.events[seen:] if e.kind in ("registered", "live", "joined")]
            assert not late, late
            assert rank0.task is not None and not rank0.task.done(), "rank 0's stream must stay open"
        finally:
            empty()
        for rank in (rank1, fresh):
            rank.sim.error = None
            await rank.connect()
            assert rank.sim.registered.is_set(), rank.sim.error
        jobs = await jobs_of(admin)
        assert jobs["held"].state == api.LIVE and jobs["fresh"].state == api.LIVE
        assert rank0.prepared == [] and rank1.prepared == [], "no plan was prepared while rank 1 was refused"
        record = await admin.SubmitPlan(api.SubmitPlanRequest(job_id="held", plan=empty_plan(2)), timeout=10)
        assert record.version == 1
        await until(lambda: _true(1 in rank0.sim.acked and 1 in rank1.sim.acked))
        assert watcher.of("held", "registered", 1) and watcher.of("fresh", "registered", 0)
        await watcher.close()
        for rank in (rank0, rank1, fresh):
            await rank.close()


async def _true(value: bool) -> bool:
    return value


@pytest.mark.slow
def test_a_register_that_redis_refuses_leaves_no_job_rank_or_session(tmp_path, redis_server):
    store = f"{redis_server.url}?prefix=t-{uuid.uuid4().hex[:12]}:"
    serve = ServeProcess(tmp_path, "--no-replan", "--http", "off", store=store, env={"P2_VOTE_TIMEOUT": "3"})
    try:
        with HealthProbe(serve.address) as probe:
            asyncio.run(_phantom_scenario(serve.address, lambda: _redis_full(redis_server.url, True),
                                          lambda: _redis_full(redis_server.url, False)))
        assert probe.worst() < 1.0, probe.summary()
    finally:
        _redis_full(redis_server.url, False)
        code, log = serve.stop()
    assert code == 0, log
    assert "Traceback" not in log and "internal error" not in log, log


_CLONE_NEWNS, _MS_REC, _MS_PRIVATE = 0x00020000, 0x4000, 1 << 18


def _private_tmpfs(mount_point: Path, size: str):
    """A ``preexec`` for ``p2 serve``: a mount namespace of its own with a small tmpfs at
    ``mount_point`` (the test reaches it through /proc/PID/root)."""
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "unshare/mount --make-rprivate")
        if libc.mount(b"tmpfs", str(mount_point).encode(), b"tmpfs", 0, f"size={size}".encode()) != 0:
            raise OSError(ctypes.get_errno(), f"mount tmpfs on {mount_point}")
    return preexec


def _can_mount_tmpfs(tmp_path: Path) -> str:
    """'' where a private tmpfs can be mounted here, else why not."""
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs in a private mount namespace"
    probe = tmp_path / "probe"
    probe.mkdir()
    pid = os.fork()
    if pid == 0:
        try:
            _private_tmpfs(probe, "64k")()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return "" if os.waitstatus_to_exitcode(status) == 0 else "cannot mount a tmpfs in a private mount namespace"


def _fill(folder: Path) -> Path:
    """Write a file into ``folder`` until its filesystem is full; the file."""
    filler = folder / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC, error
    return filler


@pytest.mark.slow
def test_a_register_on_a_full_sqlite_disk_leaves_no_job_rank_or_session(tmp_path):
    why = _can_mount_tmpfs(tmp_path)
    if why:
        pytest.skip(why)
    disk = tmp_path / "disk"
    disk.mkdir()
    serve = ServeProcess(tmp_path, "--no-replan", "--http", "off", store=f"sqlite:///{disk / 'service.db'}",
                         env={"P2_VOTE_TIMEOUT": "3"}, preexec=_private_tmpfs(disk, "2m"))
    inside = Path(f"/proc/{serve.process.pid}/root") / str(disk).lstrip("/")
    fillers: list[Path] = []
    try:
        asyncio.run(_phantom_scenario(serve.address, lambda: fillers.append(_fill(inside)),
                                      lambda: [f.unlink() for f in fillers]))
    finally:
        code, log = serve.stop()
    assert code == 0, log
    assert "Traceback" not in log and "internal error" not in log, log


# --------------------------------------------------------- item 6: telemetry within physical bounds
def _telemetry(iteration: int = 1, **changes) -> link.RankMessage:
    message = link.Telemetry(job_id="t", iteration=iteration, duration_seconds=0.1, wait_seconds=0.01,
                             running_version=0)
    message.ops.add(seq=0, kind="all_reduce", bytes=4096, group=[0, 1], issue_seconds=0.0, complete_seconds=0.05)
    message.motifs.add(op_seq=0, order=0, channel=0, wait_seconds=0.0, start_seconds=0.0, duration_seconds=0.04)
    for path, value in changes.items():
        target, *rest = path.split(".")
        if rest:
            setattr(getattr(message, target)[0], rest[0], value)
        else:
            setattr(message, target, value)
    return link.RankMessage(telemetry=message)


BAD_TELEMETRY = [
    ("duration_seconds", 1.7e308), ("duration_seconds", math.inf), ("wait_seconds", math.nan),
    ("duration_seconds", -1.0), ("duration_seconds", 8 * 24 * 3600.0), ("iteration", 2**63),
    ("running_version", 2**60), ("ops.bytes", 2**62), ("ops.complete_seconds", 1e300),
    ("motifs.duration_seconds", 1.7e308), ("motifs.wait_seconds", math.inf),
]


@pytest.mark.slow
def test_huge_and_non_finite_telemetry_is_refused_in_one_line_and_harms_nothing(tmp_path):
    http_port = tmp_path / "http-port"
    serve = ServeProcess(tmp_path, "--no-replan", "--http", "127.0.0.1:0", "--http-port-file", str(http_port))

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(serve.address) as channel:
            for field, value in BAD_TELEMETRY:
                ranks = [await Rank(channel, "t", r, 2).connect() for r in range(2)]
                for rank in ranks:            # from both ranks: the pair that overflowed the mean before
                    assert rank.sim.registered.is_set(), rank.sim.error
                    rank.sim.send(_telemetry(**{field: value}))
                named = "telemetry." + field.replace(".", "[0].", 1)       # telemetry.ops[0].bytes
                for rank in ranks:
                    one_line_error(await rank.ended(), grpc.StatusCode.INVALID_ARGUMENT, named)
            ranks = [await Rank(channel, "t", r, 2).connect() for r in range(2)]
            for iteration in range(1, 4):
                for rank in ranks:
                    rank.sim.send(_telemetry(iteration))
            await asyncio.sleep(2.5)            # the service stores a telemetry summary every second
            for rank in ranks:
                assert not rank.task.done(), rank.sim.error
                await rank.close()

    try:
        with HealthProbe(serve.address) as probe:
            asyncio.run(scenario())
        assert probe.worst() < 1.0, probe.summary()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{http_port.read_text().strip()}/metrics",
                                         timeout=10).read().decode()
        values = [line.rsplit(" ", 1)[-1].lower() for line in metrics.splitlines()
                  if line.startswith("p2_") and not line.startswith("#")]
        assert values and not [v for v in values if v in ("nan", "+inf", "-inf", "inf")], metrics
        assert "p2_iteration_seconds_count" in metrics
    finally:
        code, log = serve.stop()
    assert code == 0, log
    for words in ("Traceback", "overflow", "storing telemetry failed", "internal error"):
        assert words not in log, log
    with open_store(f"sqlite:///{tmp_path / 'service.db'}") as store:
        summaries = store.recent_telemetry("t")
    assert summaries and all(math.isfinite(s["mean_iteration_seconds"]) and s["mean_iteration_seconds"] < 1
                             for s in summaries), summaries


# --------------------------------------------------------- in-process services for the rest
def config(tmp_path: Path, **changes) -> ServiceConfig:
    values = dict(listen="127.0.0.1:0", store_url=f"sqlite:///{tmp_path / 'service.db'}", timing=FAST,
                  tick_seconds=0.05)
    values.update(changes)
    return ServiceConfig(**values)


def run(scenario, cfg: ServiceConfig):
    async def main():
        service = Service(cfg)
        await service.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
        try:
            return await scenario(service, channel, optimizer_pb2_grpc.OptimizerStub(channel))
        finally:
            await channel.close()
            await service.stop(grace=0.5)
    return asyncio.run(main())


# --------------------------------------------------------- item 7: versions only for accepted plans
def test_refused_submissions_use_up_no_version(tmp_path, store_url):
    async def scenario(service, channel, admin):
        rank0 = await Rank(channel, "v", 0, 2).connect()
        for _ in range(3):       # not live: rank 1 is missing
            error = await call_error(admin.SubmitPlan(api.SubmitPlanRequest(job_id="v", plan=empty_plan(2))))
            one_line_error(error, grpc.StatusCode.FAILED_PRECONDITION, "not connected")
        rank1 = await Rank(channel, "v", 1, 2).connect()
        error = await call_error(admin.SubmitPlan(api.SubmitPlanRequest(job_id="v", plan=empty_plan(3))))
        one_line_error(error, grpc.StatusCode.FAILED_PRECONDITION, "3 ranks")
        first = await admin.SubmitPlan(api.SubmitPlanRequest(job_id="v", plan=empty_plan(2)))
        assert first.version == 1
        await until(lambda: _true(1 in rank0.sim.acked and 1 in rank1.sim.acked))
        await until(lambda: _true(service.core.jobs["v"].coordinator.everyone_holds_committed()))
        second = await admin.SubmitPlan(api.SubmitPlanRequest(job_id="v", plan=empty_plan(2)))
        assert second.version == 2
        listed = await admin.ListPlans(api.ListPlansRequest(job_id="v"))
        assert [p.version for p in listed.plans] == [1, 2]
        for rank in (rank0, rank1):
            await rank.close()
    run(scenario, config(tmp_path, store_url=store_url))


# --------------------------------------------------------- item 7: a cap on jobs
def test_a_register_beyond_the_job_cap_is_refused_until_a_job_is_deleted(tmp_path):
    async def scenario(service, channel, admin):
        a = await Rank(channel, "a", 0, 2).connect()
        b = await Rank(channel, "b", 0, 1).connect()
        over = await Rank(channel, "c", 0, 1).connect()
        one_line_error(await over.ended(), grpc.StatusCode.FAILED_PRECONDITION, "2 jobs", "P2_MAX_JOBS=2",
                       "p2 jobs delete")
        assert set(await jobs_of(admin)) == {"a", "b"}
        a1 = await Rank(channel, "a", 1, 2).connect()         # a rank of a job the service holds still joins
        assert a1.sim.registered.is_set(), a1.sim.error
        await b.close()
        await until(lambda: _true(not service.core.jobs["b"].sessions))
        await admin.DeleteJob(api.DeleteJobRequest(job_id="b"))
        again = await Rank(channel, "c", 0, 1).connect()
        assert again.sim.registered.is_set(), again.sim.error
        assert set(await jobs_of(admin)) == {"a", "c"}
        for rank in (a, a1, again):
            await rank.close()
    run(scenario, config(tmp_path, max_jobs=2))


# --------------------------------------------------------- item 7: deleting a job
def test_delete_refuses_connected_ranks_and_force_drops_everything_stored(tmp_path, store_url):
    async def scenario(service, channel, admin):
        ranks = [await Rank(channel, "d", r, 2).connect() for r in range(2)]
        other = await Rank(channel, "d-other", 0, 1).connect()
        await admin.SubmitPlan(api.SubmitPlanRequest(job_id="d", plan=empty_plan(2)))
        await until(lambda: _true(all(1 in rank.sim.acked for rank in ranks)))
        for rank in ranks:
            rank.sim.send(_telemetry(1))
        service.core.store_event("d", {"unix": 1.0, "kind": "note", "version": 1, "reason": "a test's"})
        store = open_store(store_url)
        try:
            async def stored() -> bool:
                return bool(store.recent_telemetry("d") and store.get_plan_state("d", 1) is not None)
            await until(stored)
            assert store.get_job("d") and store.list_plans("d") and store.read_log("d") and store.recent_events("d")

            refused = await call_error(admin.DeleteJob(api.DeleteJobRequest(job_id="d")))
            one_line_error(refused, grpc.StatusCode.FAILED_PRECONDITION, "connected", "--force")
            one_line_error(await call_error(admin.DeleteJob(api.DeleteJobRequest(job_id="ghost"))),
                           grpc.StatusCode.NOT_FOUND, "ghost")
            one_line_error(await call_error(admin.DeleteJob(api.DeleteJobRequest(job_id="bad id!"))),
                           grpc.StatusCode.INVALID_ARGUMENT, "job_id")
            assert store.get_job("d") is not None

            await admin.DeleteJob(api.DeleteJobRequest(job_id="d", force=True))
            for rank in ranks:                  # their streams are closed
                assert await rank.ended() is None
            assert set(await jobs_of(admin)) == {"d-other"}
            one_line_error(await call_error(admin.GetJob(api.GetJobRequest(job_id="d"))), grpc.StatusCode.NOT_FOUND)
            await asyncio.sleep(0.3)            # ticks and flushes after the delete write nothing back
            assert store.get_job("d") is None and store.list_plans("d") == [] and store.read_log("d") == []
            assert store.get_plan_state("d", 1) is None and store.recent_telemetry("d") == []
            assert store.recent_events("d") == []
            assert store.get_job("d-other") is not None

            again = [await Rank(channel, "d", r, 2).connect() for r in range(2)]   # the id registers anew
            record = await admin.SubmitPlan(api.SubmitPlanRequest(job_id="d", plan=empty_plan(2)))
            assert record.version == 2, "a version number is never given twice, across a delete too"
            for rank in (*again, other):
                await rank.close()
        finally:
            store.close()
    run(scenario, config(tmp_path, store_url=store_url))


def test_a_replaced_service_deletes_nothing(tmp_path):
    async def scenario(service, channel, admin):
        rank = await Rank(channel, "f", 0, 1).connect()
        await rank.close()
        await until(lambda: _true(not service.core.jobs["f"].sessions))
        # A newer leader takes the next epoch (as after this one's lease ran out while it was paused;
        # a second service on this SQLite file is refused, see test_leadership.py).
        with open_store(f"sqlite:///{tmp_path / 'service.db'}") as store:
            assert store.next_epoch() == service.core.epoch + 1
        error = await call_error(admin.DeleteJob(api.DeleteJobRequest(job_id="f")))
        one_line_error(error, grpc.StatusCode.ABORTED, "newer service")
        assert service.core.fenced.is_set()
        with open_store(f"sqlite:///{tmp_path / 'service.db'}") as store:
            assert store.get_job("f") is not None
    run(scenario, config(tmp_path))


# --------------------------------------------------------- item 7: paginated lists
def test_jobs_are_listed_a_page_at_a_time(tmp_path, store_url):
    names = [f"job-{i}" for i in (3, 0, 6, 1, 5, 2, 4)]

    async def scenario(service, channel, admin):
        ranks = [await Rank(channel, name, 0, 1).connect() for name in names]
        pages, token = [], ""
        while True:
            reply = await admin.ListJobs(api.ListJobsRequest(page_size=3, page_token=token))
            pages.append([job.job_id for job in reply.jobs])
            if not reply.next_page_token:
                break
            assert reply.next_page_token == pages[-1][-1]
            token = reply.next_page_token
        assert pages == [["job-0", "job-1", "job-2"], ["job-3", "job-4", "job-5"], ["job-6"]]
        everything = await admin.ListJobs(api.ListJobsRequest())        # 0: the default page of 100
        assert [job.job_id for job in everything.jobs] == sorted(names) and everything.next_page_token == ""
        exact = await admin.ListJobs(api.ListJobsRequest(page_size=7))
        assert len(exact.jobs) == 7 and exact.next_page_token == ""
        past = await admin.ListJobs(api.ListJobsRequest(page_token="zzz"))
        assert list(past.jobs) == [] and past.next_page_token == ""
        one_line_error(await call_error(admin.ListJobs(api.ListJobsRequest(page_size=1001))),
                       grpc.StatusCode.INVALID_ARGUMENT, "page_size", "1000")
        one_line_error(await call_error(admin.ListJobs(api.ListJobsRequest(page_token="not a job id"))),
                       grpc.StatusCode.INVALID_ARGUMENT, "page_token")
        page, cursor = service.core.jobs_page("job-4", 10)
        assert [job.job_id for job in page] == ["job-5", "job-6"] and cursor == ""
        for rank in ranks:
            await rank.close()
    run(scenario, config(tmp_path, store_url=store_url))
