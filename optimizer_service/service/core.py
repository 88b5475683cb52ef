"""The service's transport-agnostic core: jobs, membership, plans and their
history. The gRPC servicers and the dashboard only decode, call a method here
and encode.

Each job's two-phase commit is carried out by the coordinator's driver
(:mod:`optimizer_service.service.driver`: decisions durable before they are
sent, recovery at start, fencing by a newer service); all store I/O runs on one
thread (:mod:`optimizer_service.service.store_worker`); replanning, when on, is
the :class:`~optimizer_service.service.replanning.Replanner`'s, which sees this
core as a :class:`~optimizer_service.service.replan_host.ReplanHost`. A job's
measured iteration time is one figure (:meth:`ServiceCore.iteration_time`).

**Registration** is all or nothing: the job document a Register leaves is
written before anything in memory changes, so a write the store refuses (a full
disk, Redis out of memory) leaves no session, no rank, no job and no event, and
the rank retries later. At most ``max_jobs`` jobs (``P2_MAX_JOBS``); operators
delete finished ones (:meth:`ServiceCore.delete_job`, ``p2 jobs delete``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping

from optimizer_service.control import coordinator as control
from optimizer_service.control.coordinator import Joined, Left, Progress, Tick, Timing
from optimizer_service.control.policy import PolicyConfig
from optimizer_service.control.wire import ack_from_proto, vote_from_proto
from optimizer_service.metrics import ServiceMetrics
from optimizer_service.plan import Plan
from optimizer_service.service import requests
from optimizer_service.service.driver import CoordinatorDriver
from optimizer_service.service.errors import NotFoundError, RefusedError
from optimizer_service.service.events import EventBus
from optimizer_service.service.iteration_time import IterationTime, of_history, of_policy
from optimizer_service.service.jobs import LIVE, Job, PlanState, RankInfo, RankSession, ratio_to_bound
from optimizer_service.service.live import JobIteration, channel_waits, op_counts
from optimizer_service.service.planning import usable_topology
from optimizer_service.service.replanning import ReplanConfig, Replanner
from optimizer_service.service.store.base import PlanStore, StoredPlan, StoreFencedError
from optimizer_service.service.store_worker import StoreWorker
from optimizer_service.service.traces import TRACE_ITERATIONS, TRACE_TIMEOUT_SECONDS, TraceRequestError
from optimizer_service.wire.limits import MAX_TRACE_BYTES
from p2.v1 import enforcer_link_pb2 as link

log = logging.getLogger("p2.service")

DEFAULT_MAX_JOBS = 1_000
#: A job's newest stored decisions read back at start for its latest search (:attr:`Job.latest_search`;
#: a search takes a handful of decisions: one further back shows again after the job's next search).
RECOVERED_DECISIONS = 200
#: The decision kind of a search (its details carry ``search``: the outcome with its fit and bound).
SEARCHED = "searched"


class ServiceCore:
    def __init__(self, store_factory: Callable[[], PlanStore], *, timing: Timing = Timing(),
                 tick_seconds: float = 0.2, clock: Callable[[], float] = time.time,
                 crash_at: str | None = None, replan: ReplanConfig | None = None,
                 metrics: ServiceMetrics | None = None, max_jobs: int = DEFAULT_MAX_JOBS) -> None:
        self.max_jobs = max_jobs
        self.metrics = metrics or ServiceMetrics()
        self.worker = StoreWorker(store_factory)
        self.timing = timing
        self.tick_seconds = tick_seconds
        self.clock = clock
        self.events = EventBus(clock=clock)
        self.jobs: dict[str, Job] = {}
        # New jobs whose first registration is writing them (in self.jobs once a write succeeded),
        # and how many registrations of each are in flight.
        self._creating: dict[str, Job] = {}
        self._creating_refs: dict[str, int] = {}
        self._ticker: asyncio.Task | None = None
        #: A job without a policy is measured with the window a policy would use (iteration_time).
        self.policy_config = replan.policy if replan is not None else PolicyConfig()
        self.replanner = Replanner(replan, self, self.metrics) if replan is not None and replan.enabled else None
        self.driver = CoordinatorDriver(self.worker, self.jobs, self.events, self.metrics, clock=clock,
                                        timing=timing, crash_at=crash_at, decided=self._decided)

    @property
    def store(self) -> PlanStore | None:
        return self.worker.store

    @property
    def epoch(self) -> int:
        """The service's epoch, taken from the store at start (higher than any service's before)."""
        return self.driver.epoch

    @property
    def fenced(self) -> asyncio.Event:
        """Set once a newer service took the store (see :mod:`.driver`): serve() exits."""
        return self.driver.fenced

    @property
    def fenced_by(self) -> StoreFencedError | None:
        return self.driver.fenced_by

    # ------------------------------------------------------------- lifecycle
    async def start(self, epoch: int | None = None) -> None:
        """Open the store and recover its jobs, deciding with ``epoch`` (None: the store's next)."""
        await self.worker.open()
        await self.driver.start(epoch)
        for job in self.jobs.values():
            decisions = await self.worker.run(self.store.recent_events, job.job_id, RECOVERED_DECISIONS)
            job.latest_search = next((d for d in reversed(decisions) if d.get("kind") == SEARCHED), None)
        log.info("service: epoch %d, store %s, %d job(s) recovered", self.epoch, self.store.url, len(self.jobs))
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def stop(self) -> None:
        if self.replanner is not None:
            self.replanner.close()
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
        for job in self.jobs.values():
            for session in job.sessions.values():
                session.close()
            await self._flush_telemetry(job)
            try:
                await self._save_plan_states(job)
            except Exception as error:
                log.warning("job %s: storing the plans' states failed: %s", job.job_id, error)
        await self.worker.close()

    def _decided(self, job: Job, record: dict) -> None:
        """The driver made a decision durable: the replanning policy hears it."""
        if self.replanner is not None:
            self.replanner.decided(job, record["version"], record["decision"], record.get("reason", ""))

    async def _save_plan_states(self, job: Job) -> None:
        """Write the plans' observed 2PC state (for operators; off the commit's
        critical path: the tick loop calls it, so votes and acks never wait for it)."""
        for plan in list(job.plans.values()):
            if plan.dirty and not job.deleted:
                plan.dirty = False
                await self.worker.write(job, self.store.put_plan_state, job.job_id, plan.version, plan.to_dict())

    async def _tick_loop(self) -> None:
        flushed = self.clock()
        while True:
            await asyncio.sleep(self.tick_seconds)
            for job in list(self.jobs.values()):
                try:
                    async with job.lock:
                        if job.deleted:
                            continue
                        await self.driver.step(job, Tick())
                    await self._save_plan_states(job)
                except Exception as error:          # the store is down: try again next tick
                    log.warning("job %s: tick failed: %s", job.job_id, error)
            if self.clock() - flushed >= 1.0:
                flushed = self.clock()
                for job in list(self.jobs.values()):
                    await self._flush_telemetry(job)
                    if self.replanner is not None and not job.deleted:
                        self.replanner.tick(job)

    # ------------------------------------------------------------ enforcer link
    async def register(self, message: link.Register) -> RankSession:
        """A rank's stream opened with ``message``: its session (the Registered
        answer is the first message in its outbox).

        All or nothing: the job document the registration leaves is written
        first; when the store refuses it, the job (or its absence), its ranks,
        topology and ``was_live``, the rank's old stream and the coordinator are
        as they were, nothing was published or sent, and the error (UNAVAILABLE)
        tells the rank to retry."""
        requests.register(message)
        while True:
            job = self._job_for(message)
            creating = job.job_id not in self.jobs
            if creating:
                self._creating_refs[job.job_id] = self._creating_refs.get(job.job_id, 0) + 1
            try:
                async with job.lock:
                    if not job.deleted:         # else: deleted while this waited; register with a new job
                        return await self._register_locked(job, message)
            finally:
                if creating:
                    self._release_creating(job)

    def _job_for(self, message: link.Register) -> Job:
        """The job ``message`` registers with: known, being created, or new (within ``max_jobs``)."""
        job = self.jobs.get(message.job_id) or self._creating.get(message.job_id)
        if job is None:
            held = len(self.jobs) + len(self._creating)
            if held >= self.max_jobs:
                raise RefusedError(f"register.job_id: the service already holds {held} jobs, its limit "
                                   f"(P2_MAX_JOBS={self.max_jobs}); delete finished ones with 'p2 jobs delete JOB' "
                                   "or raise P2_MAX_JOBS")
            job = Job(message.job_id, message.world_size, message.switch_every, self.clock(),
                      control.Coordinator.new(message.job_id, message.world_size, self.epoch, message.switch_every,
                                              self.timing))
            self._creating[job.job_id] = job
        elif job.world_size != message.world_size:
            raise requests.RequestError("register.world_size", f"job {job.job_id} has {job.world_size} ranks, this "
                                        f"rank says {message.world_size}; give the new run its own id with P2_JOB")
        elif job.switch_every != message.switch_every:
            raise requests.RequestError("register.switch_every", f"job {job.job_id} switches every "
                                        f"{job.switch_every} iterations, this rank says {message.switch_every}; "
                                        "set P2_SWITCH_EVERY alike on every rank")
        return job

    def _release_creating(self, job: Job) -> None:
        """A registration of a job that was new ended: the last one forgets a job that no write made."""
        left = self._creating_refs.get(job.job_id, 1) - 1
        if left > 0:
            self._creating_refs[job.job_id] = left
            return
        self._creating_refs.pop(job.job_id, None)
        if self._creating.get(job.job_id) is job:
            del self._creating[job.job_id]

    async def _register_locked(self, job: Job, message: link.Register) -> RankSession:
        now = self.clock()
        old = job.sessions.get(message.rank)
        info = RankInfo(message.host, message.local_rank, message.backend, message.torch_version,
                        message.enforcer_version, True, message.running_version, message.iteration, now)
        ranks = {**job.ranks, message.rank: info}
        topology = message.topology or job.topology
        was_live = job.was_live or sum(1 for r in ranks.values() if r.connected) == job.world_size
        new = job.job_id not in self.jobs
        if new or old is None or was_live != job.was_live or topology != job.topology:
            # The one write a registration needs, before anything changes: if it fails, nothing did.
            await self.worker.write(job, self.store.put_job, job.job_id,
                                    job.to_document(ranks=ranks, was_live=was_live, topology=topology))
        if new:
            self.jobs[job.job_id] = job
            self._creating.pop(job.job_id, None)
            self.metrics.on_plan_version(job.job_id, 0)
        if old is not None:             # one stream per rank: the old one is over (PROTOCOL.md)
            old.close()
            await self.driver.step(job, Left(message.rank))    # Left persists nothing: it cannot fail on the store
        session = RankSession(job.job_id, message.rank)
        job.sessions[message.rank] = session
        job.ranks[message.rank] = info
        previous_topology, job.topology, job.was_live = job.topology, topology, was_live
        try:
            if previous_topology and topology != previous_topology:
                self.events.publish(job.job_id, "topology", 0, "the ranks report a changed topology", message.rank)
            self.metrics.on_connected(job.job_id, job.connected)
            if self.replanner is not None:
                self.replanner.registered(job, topology_changed=topology != previous_topology)
            session.send(link.ServiceMessage(registered=link.Registered(
                job_id=job.job_id, epoch=self.epoch, committed_version=job.coordinator.committed)))
            self.events.publish(job.job_id, "registered", message.running_version,
                                f"host {message.host or '?'}, {message.backend or '?'}", message.rank)
            if job.state == LIVE:
                self.events.publish(job.job_id, "live", 0, f"all {job.world_size} ranks connected")
            await self.driver.step(job, Joined(message.rank, message.running_version, tuple(message.held_versions),
                                               message.iteration))
        except BaseException:
            await self._lose(job, session, "registration failed")     # the servicer's cleanup, done here
            raise
        return session

    async def on_rank_message(self, session: RankSession, message: link.RankMessage) -> None:
        job = self.jobs.get(session.job_id)
        if job is None or job.sessions.get(session.rank) is not session:
            return          # a stream that a newer one of the same rank replaced, or of a deleted job
        info = job.ranks[session.rank]
        info.last_seen_unix = self.clock()
        body = message.WhichOneof("body")
        if body == "vote":
            vote = vote_from_proto(message.vote, session.rank)
            async with job.lock:
                await self.driver.vote(job, vote)
        elif body == "ack":
            ack = ack_from_proto(message.ack, session.rank)
            async with job.lock:
                await self.driver.ack(job, ack)
        elif body == "telemetry":
            telemetry = message.telemetry
            requests.telemetry(telemetry, job.world_size)
            done = job.observe(session.rank, telemetry, info.last_seen_unix)
            self.metrics.on_telemetry(job.job_id, session.rank, channel_waits(telemetry), op_counts(telemetry))
            if done:
                self._completed(job, done)
            if telemetry.iteration > job.coordinator.iteration:
                async with job.lock:
                    await self.driver.step(job, Progress(session.rank, telemetry.iteration))
        elif body == "trace_chunk":
            requests.trace_chunk(message.trace_chunk)
            job.traces.chunk(session.rank, message.trace_chunk)
        elif body == "register":
            raise requests.RequestError("register", "a stream registers once, in its first message")

    async def disconnect(self, session: RankSession) -> None:
        job = self.jobs.get(session.job_id)
        if job is None or job.sessions.get(session.rank) is not session:
            return          # replaced by a newer stream of the same rank, or the job was deleted
        async with job.lock:
            if job.sessions.get(session.rank) is session:
                await self._lose(job, session, "stream closed")

    async def _lose(self, job: Job, session: RankSession, why: str) -> None:
        """The rank's stream is over (call with the job's lock held): the coordinator and
        the store learn it; a store that fails here is logged, the rank is gone all the same."""
        if job.sessions.get(session.rank) is session:
            del job.sessions[session.rank]
        if session.rank in job.ranks:
            job.ranks[session.rank].connected = False
        self.metrics.on_connected(job.job_id, job.connected)
        session.close()
        job.traces.fail_rank(session.rank, "disconnected")
        self.events.publish(job.job_id, "lost", 0, why, session.rank)
        if job.was_live:
            self.events.publish(job.job_id, "degraded", 0, f"rank {session.rank} lost")
        try:
            await self.driver.step(job, Left(session.rank))
            await self.worker.write(job, self.store.put_job, job.job_id, job.to_document())
        except Exception as error:
            log.warning("job %s: recording the loss of rank %d failed: %s", job.job_id, session.rank, error)

    async def _flush_telemetry(self, job: Job) -> None:
        window = job.telemetry
        if not window.messages or job.deleted:
            return
        job.telemetry = type(window)()
        try:
            await self.worker.write(job, self.store.add_telemetry, job.job_id, window.summary(self.clock()))
        except Exception as error:
            log.warning("job %s: storing telemetry failed: %s", job.job_id, error)

    async def collect_traces(self, job_id: str, iterations: int = TRACE_ITERATIONS,
                             timeout: float = TRACE_TIMEOUT_SECONDS) -> list[dict]:
        """Every rank's trace of its last ``iterations`` finished iterations (rank
        order), asked over the ranks' streams; :class:`RefusedError` when a rank
        is not connected, sends a bad trace or none within ``timeout``."""
        job = self.job(job_id)
        missing = sorted(set(range(job.world_size)) - set(job.sessions))
        if missing:
            raise RefusedError(f"job {job_id}: rank(s) {missing} not connected; a trace window needs every rank")
        request_id, future = job.traces.open(job.world_size)
        ask = link.ServiceMessage(request_trace=link.RequestTrace(request_id=request_id, max_bytes=MAX_TRACE_BYTES,
                                                                  iterations=iterations))
        for session in list(job.sessions.values()):
            session.send(ask)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise RefusedError(f"job {job_id}: not every rank sent its trace within {timeout:g} s") from None
        except TraceRequestError as error:
            raise RefusedError(f"job {job_id}: {error}") from None
        finally:
            job.traces.close(request_id)

    # ------------------------------------------------------------------ admin
    def job(self, job_id: str) -> Job:
        requests.job_id(job_id)
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id!r}; 'p2 jobs list' shows the jobs the service knows")
        return job

    async def submit_plan(self, job_id: str, plan: Plan, *, origin: str = "",
                          predicted_seconds: float | None = None) -> tuple[PlanState, StoredPlan]:
        """Give ``plan`` the job's next version and start its two-phase commit.

        The coordinator is asked first whether it would take a plan now; only then
        is a version reserved, so a refused submission uses up no number and the
        next accepted plan gets the next one. (The job's lock is held throughout:
        nothing changes the coordinator between the question and the submission.)"""
        job = self.job(job_id)
        if predicted_seconds is None:
            predicted_seconds = plan.predicted_iteration_seconds
        async with job.lock:
            self.driver.check(job, plan)
            version = await self.worker.write(job, self.store.next_version, job_id)
            plan = dataclasses.replace(plan, version=version, predicted_iteration_seconds=predicted_seconds)
            state, actions = self.driver.submission(job, plan)
            stored = StoredPlan(job_id, version, plan.to_json(), self.clock())
            await self.worker.write(job, self.store.add_plan, job_id, version, stored.plan_json, stored.submitted_unix)
            job.plans[version] = PlanState(version, stored.submitted_unix, origin=origin,
                                           predicted_seconds=predicted_seconds,
                                           bound_seconds=plan.bound_iteration_seconds, dirty=bool(origin))
            await self.driver.adopt(job, state, actions)
            return job.plans[version], stored

    async def store_plan(self, job_id: str, plan: Plan, *, origin: str,
                         predicted_seconds: float | None = None) -> PlanState:
        """Store ``plan`` under the job's next version without committing it (the
        replanning loop's search results, which the policy may or may not commit;
        :meth:`submit_stored` commits)."""
        job = self.job(job_id)
        version = await self.worker.write(job, self.store.next_version, job_id)
        plan = dataclasses.replace(plan, version=version, predicted_iteration_seconds=predicted_seconds)
        now = self.clock()
        await self.worker.write(job, self.store.add_plan, job_id, version, plan.to_json(), now)
        state = job.plans[version] = PlanState(version, now, origin=origin, predicted_seconds=predicted_seconds,
                                               bound_seconds=plan.bound_iteration_seconds, dirty=True)
        return state

    async def submit_stored(self, job_id: str, version: int) -> None:
        """Start the two-phase commit of the stored plan ``version``."""
        job = self.job(job_id)
        _, stored = await self.plan(job_id, version)
        plan = Plan.parse(stored.plan_json)
        async with job.lock:
            state, actions = self.driver.submission(job, plan)
            await self.driver.adopt(job, state, actions)

    def jobs_page(self, after: str = "", limit: int = requests.DEFAULT_PAGE) -> tuple[list[Job], str]:
        """The jobs whose id sorts after ``after``, by id, at most ``limit`` (validated by
        :func:`requests.page`), and the cursor of the next page ("" after the last)."""
        limit, after = requests.page(limit, after)
        following = sorted(job_id for job_id in self.jobs if job_id > after)
        page = [self.jobs[job_id] for job_id in following[:limit]]
        return page, page[-1].job_id if len(following) > limit else ""

    async def delete_job(self, job_id: str, force: bool = False) -> None:
        """Forget a job: its document, plans, plan states, decision log, telemetry and
        events leave the store in one atomic, fenced write (a service a newer one
        replaced deletes nothing), then the service's memory. Refused while ranks are
        connected unless ``force``, which closes their streams (ranks that still run
        reconnect and register the job anew, from no plan)."""
        job = self.job(job_id)
        async with job.lock:
            if job.deleted or self.jobs.get(job_id) is not job:
                raise NotFoundError(f"no job {job_id!r}; 'p2 jobs list' shows the jobs the service knows")
            connected = sorted(job.sessions)
            if connected and not force:
                raise RefusedError(f"job {job_id}: rank(s) {_ranks(connected)} are connected; stop the job first, "
                                   "or delete it anyway with --force (force=true), which closes their streams")
            if self.fenced_by is not None:
                raise self.fenced_by

            def drop() -> None:             # on the store's thread: writes queued after it see the job deleted
                self.store.delete_job(job_id, self.epoch)
                job.deleted = True
            try:
                await self.worker.run(drop)
            except StoreFencedError as error:
                self.driver.fence(error)
                raise
            del self.jobs[job_id]
            for session in list(job.sessions.values()):
                job.traces.fail_rank(session.rank, "the job was deleted")
                session.close()
            job.sessions.clear()
            if self.replanner is not None:
                self.replanner.forget(job_id)
            self.metrics.on_connected(job_id, 0)
            closed = f"; the streams of rank(s) {_ranks(connected)} closed" if connected else ""
            self.events.publish(job_id, "deleted", 0, f"job deleted{closed}")
        log.info("job %s: deleted%s", job_id, closed)

    def store_event(self, job_id: str, document: dict) -> None:
        """Store a job event (a replanning decision with its reason) on the store's
        thread, in call order, without waiting; a failure is logged."""
        job = self.jobs.get(job_id)
        if job is None:
            return              # deleted: its events went with it

        def write() -> None:
            if job.deleted:
                return
            try:
                self.store.add_event(job_id, document)
            except Exception as error:
                log.warning("job %s: storing event %s failed: %s", job_id, document.get("kind"), error)
        self.worker.post(write)

    async def plan(self, job_id: str, version: int) -> tuple[PlanState, StoredPlan]:
        job = self.job(job_id)
        stored = await self.worker.run(self.store.get_plan, job_id, version)
        if stored is None:
            raise NotFoundError(f"job {job_id!r} has no plan version {version}; 'p2 plan list --job {job_id}' "
                                "shows its plans")
        return job.plans.get(version) or PlanState(version, stored.submitted_unix), stored

    async def plans(self, job_id: str) -> list[PlanState]:
        job = self.job(job_id)
        return [job.plans[v] for v in sorted(job.plans)]

    async def decisions(self, job_id: str, limit: int) -> list[dict]:
        """The job's last ``limit`` replanning events from the store, newest last (NotFound for an unknown job)."""
        self.job(job_id)
        return await self.worker.run(self.store.recent_events, job_id, limit)

    # ------------------------------------------------------------------ measuring
    def _completed(self, job: Job, done: list[JobIteration]) -> None:
        """Iterations of the job completed (in index order): the metrics, the replanning
        policy, and the measured time on the record of the plan that ran them."""
        for iteration in done:
            self.metrics.on_iteration(job.job_id, iteration.seconds)
            if self.replanner is not None:
                self.replanner.iteration(job, iteration)
            measured = self.iteration_time(job)
            state = job.plans.get(measured.version)
            if state is not None and measured.seconds is not None:
                state.measured_seconds, state.measured_iterations = measured.seconds, measured.iterations
                state.dirty = True
            elif measured.version == 0 and measured.seconds is not None:
                job.passthrough_measured_seconds = measured.seconds
        self.metrics.on_running(job.job_id, done[-1].version, self.prediction(job, measured)["error_ratio"])

    def iteration_time(self, job: Job) -> IterationTime:
        """The job's measured iteration time, the one figure the dashboard, the metrics and the
        plan records show: its replanning policy's window median, or without one (replanning
        off) the same window over the same iterations (:mod:`.iteration_time`)."""
        policy = self.replanner.policy(job.job_id) if self.replanner is not None else None
        if policy is not None:
            return of_policy(policy)
        return of_history(job.live.history, self.policy_config)

    def prediction(self, job: Job, measured: IterationTime | None = None) -> dict:
        """The running plan's predicted and measured iteration time (``measured``: the job's
        :meth:`iteration_time` when the caller has it already), the error ratio measured / predicted - 1,
        the lower bound beside the plan (:meth:`Job.bound_seconds`; passthrough's is the first search's)
        and measured / bound."""
        running = job.live.history[-1].version if job.live.history else job.coordinator.committed
        state = job.plans.get(running)
        predicted = state.predicted_seconds if state is not None else None
        if measured is None:
            measured = self.iteration_time(job)
        seconds = measured.seconds if measured.version == running else None
        error = seconds / predicted - 1 if predicted and seconds is not None else None
        if error is not None and not math.isfinite(error):
            error = None            # a plan predicting a vanishing time: no meaningful ratio
        bound = job.bound_seconds(running)
        return {"running_version": running, "predicted_seconds": predicted, "measured_seconds": seconds,
                "error_ratio": error, "bound_iteration_seconds": bound,
                "ratio_to_bound": ratio_to_bound(seconds, bound)}

    # ------------------------------------------------------------------ replanning
    def record(self, job_id: str, kind: str, version: int, reason: str, details: Mapping[str, object]) -> None:
        """A replanning decision: published as a job event and stored with ``details``; a
        search's is also the job's :attr:`~Job.latest_search` (what ``p2 jobs show`` and the
        dashboard show of its fitted model and bound)."""
        event = self.events.publish(job_id, kind, version, reason)
        document = {"unix": event.unix, "kind": kind, "version": version, "reason": reason, **details}
        job = self.jobs.get(job_id)
        if kind == SEARCHED and job is not None:
            job.latest_search = document
        self.store_event(job_id, document)

    def topology_yaml(self, job: Job) -> str:
        """The job's topology as YAML ('' when neither its ranks nor ``--topology`` give a usable one)."""
        if self.replanner is not None:
            return self.replanner.topology_yaml(job)
        return usable_topology(job.topology)

    def _replanner(self) -> Replanner:
        if self.replanner is None:
            raise RefusedError("this service does not replan (it runs with --no-replan); plans come from operators")
        return self.replanner

    def pause_replanning(self, job_id: str, paused: bool, reason: str = "") -> dict:
        """An operator paused or resumed the job's replanning; the policy's state after it."""
        job = self.job(job_id)
        return self._replanner().pause(job, paused, reason)

    def replan_now(self, job_id: str, reason: str = "") -> dict:
        """An operator asked for a search of the job now; the policy's state after it
        (its phase is ``searching`` when the search started, else a note says why not)."""
        job = self.job(job_id)
        return self._replanner().replan_now(job, reason)


def _ranks(ranks: list[int]) -> str:
    """Ranks for a message: the first few and how many more."""
    shown = ", ".join(map(str, ranks[:8]))
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
