"""The coordinator's driver: every job's two-phase commit, carried out in order.

Every job has a :class:`~optimizer_service.control.coordinator.Coordinator`
(pure decisions, :mod:`optimizer_service.control`). An event (a vote, an ack,
a rank joining or leaving, a tick, a submitted plan) goes through
``coordinator.step`` under the job's lock, and the actions come out in order:
``Persist`` is written to the store and awaited — so a decision is durable
before the ``Send`` that follows it leaves — ``Send`` puts messages in the
ranks' outboxes, ``Emit`` publishes a job event, ``Refuse`` refuses the submit.
When a ``Persist`` fails (the store is down) the job keeps its previous state
and nothing after it is sent. What the driver observed of each plan (its
decision, each rank's part) is the plan's
:class:`~optimizer_service.service.jobs.PlanState`.

**Start.** The driver takes a new epoch from the store (higher than any
before) and recovers every stored job from its decision log
(``coordinator.recover``): a plan prepared without a decision is aborted, a
decided commit is re-sent to the ranks as they reconnect.

**Fencing.** Every log append carries the service's epoch and the store refuses
it once a newer service took a higher one (:class:`StoreFencedError`). A
replaced service that is still running therefore cannot make a decision
durable, so it never sends the Commit or Abort behind it; it sets
:attr:`CoordinatorDriver.fenced`, closes its ranks' streams (they reconnect, to
the newer service) and :func:`~optimizer_service.service.server.serve` exits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from collections.abc import Callable

from optimizer_service.control import coordinator as control
from optimizer_service.control.coordinator import AckIn, Emit, Persist, Refuse, Send, Submit, Timing, VoteIn
from optimizer_service.control.messages import Ack, Prepare, Vote
from optimizer_service.control.wire import to_service_message
from optimizer_service.metrics import ServiceMetrics
from optimizer_service.plan import Plan
from optimizer_service.service import requests
from optimizer_service.service.errors import RefusedError
from optimizer_service.service.events import EventBus
from optimizer_service.service.jobs import Job, PlanState, RankInfo
from optimizer_service.service.store.base import StoreFencedError
from optimizer_service.service.store_worker import StoreWorker

log = logging.getLogger("p2.service")


class CoordinatorDriver:
    """Steps the jobs' coordinators and carries out their actions (see the module docstring).

    ``jobs`` is the service's table of jobs (recovered jobs are added to it);
    ``decided(job, record)`` hears every decision once it is durable."""

    def __init__(self, worker: StoreWorker, jobs: dict[str, Job], events: EventBus, metrics: ServiceMetrics, *,
                 clock: Callable[[], float], timing: Timing, crash_at: str | None = None,
                 decided: Callable[[Job, dict], None] | None = None) -> None:
        self.worker, self.jobs, self.events, self.metrics = worker, jobs, events, metrics
        self.clock, self.timing, self.crash_at, self._decided = clock, timing, crash_at, decided
        self.epoch = 0
        self.fenced = asyncio.Event()
        self.fenced_by: StoreFencedError | None = None

    # ------------------------------------------------------------- start
    async def start(self, epoch: int | None = None) -> None:
        """Take a new epoch from the store (or lead with ``epoch``, taken with the leadership
        lease) and recover every job stored there."""
        store = self.worker.store
        self.epoch = epoch if epoch is not None else await self.worker.run(store.next_epoch)
        for document in await self.worker.run(store.list_jobs):
            await self._recover(document)

    async def _recover(self, document: dict) -> None:
        job_id, store = document["job_id"], self.worker.store
        log_records = await self.worker.run(store.read_log, job_id)
        versions = sorted({record["version"] for record in log_records if "version" in record})
        plans: dict[int, Plan] = {}
        for version in versions:
            stored = await self.worker.run(store.get_plan, job_id, version)
            if stored is not None:
                plans[version] = Plan.parse(stored.plan_json)
        state, actions = control.recover(job_id, document["world_size"], document["switch_every"], log_records,
                                         plans, self.epoch, self.clock(), self.timing)
        job = Job(job_id, document["world_size"], document["switch_every"], document["created_unix"], state,
                  ranks={int(rank): RankInfo.from_dict(info) for rank, info in document.get("ranks", {}).items()},
                  was_live=document.get("was_live", False), topology=document.get("topology", ""))
        for version in versions:
            saved = await self.worker.run(store.get_plan_state, job_id, version)
            if saved is not None:
                job.plans[version] = PlanState.from_dict(saved)
        for record in log_records:          # the log, not the saved states, says what was decided
            self._observe_record(job, record)
        self.jobs[job_id] = job
        self.metrics.on_plan_version(job_id, job.coordinator.committed)
        self.metrics.on_connected(job_id, 0)
        async with job.lock:
            await self._execute(job, actions)

    # ------------------------------------------------------------- events (the job's lock held)
    async def step(self, job: Job, event) -> list:
        """One coordinator step and its actions, in order."""
        state, actions = control.step(job.coordinator, event, self.clock())
        await self.adopt(job, state, actions)
        return actions

    async def adopt(self, job: Job, state: control.Coordinator, actions: list) -> None:
        """Make ``state`` the job's and carry out ``actions``; if one fails (a Persist
        the store refused), the job keeps its previous state and nothing later is sent."""
        before, job.coordinator = job.coordinator, state
        try:
            await self._execute(job, actions)
        except Exception:
            job.coordinator = before
            raise

    async def vote(self, job: Job, vote: Vote) -> None:
        """A rank's vote on a prepared plan (the rank's part is recorded when it is for this epoch)."""
        if vote.version in job.plans and vote.epoch == self.epoch:
            self._rank_state(job, vote.version, vote.rank, "voted_yes" if vote.yes else "voted_no",
                             requests.reason(vote.reason))
        await self.step(job, VoteIn(vote))

    async def ack(self, job: Job, ack: Ack) -> None:
        """A rank's acknowledgement of a decision."""
        if ack.version in job.plans and ack.have_plan:
            self._rank_state(job, ack.version, ack.rank, "acked_commit" if ack.committed else "acked_abort")
        await self.step(job, AckIn(ack))

    def check(self, job: Job, plan: Plan) -> None:
        """Refuse (:class:`RefusedError`, a "refused" event) what the coordinator would refuse
        now, whatever version the plan gets: asked with the lowest version it could take."""
        probe = dataclasses.replace(plan, version=job.coordinator.highest_version + 1)
        _, actions = control.step(job.coordinator, Submit(probe), self.clock())
        refused = [a for a in actions if isinstance(a, Refuse)]
        if refused:
            self.events.publish(job.job_id, "refused", 0, refused[0].reason)
            raise RefusedError(refused[0].reason)

    def submission(self, job: Job, plan: Plan) -> tuple[control.Coordinator, list]:
        """The coordinator's state and actions once it took ``plan`` (to :meth:`adopt`);
        :class:`RefusedError` when it refuses it."""
        state, actions = control.step(job.coordinator, Submit(plan), self.clock())
        refused = [a for a in actions if isinstance(a, Refuse)]
        if refused:
            self.events.publish(job.job_id, "refused", plan.version, refused[0].reason)
            raise RefusedError(refused[0].reason)
        return state, actions

    # ------------------------------------------------------------- actions
    async def _execute(self, job: Job, actions: list) -> None:
        for action in actions:
            if isinstance(action, Persist):
                kind = action.record.get("type")
                await self._fault(f"before-{kind}-persisted")
                try:
                    await self.worker.write(job, self.worker.store.append_log, job.job_id, action.record, self.epoch)
                except StoreFencedError as error:
                    self.fence(error)
                    raise
                self._observe_record(job, action.record)
                if kind == "decision":
                    self.metrics.on_decision(job.job_id, action.record["decision"], job.coordinator.committed)
                    if self._decided is not None:
                        self._decided(job, action.record)
                await self._fault(f"{kind}-persisted")
            elif isinstance(action, Send):
                message = to_service_message(action.message)
                what = type(action.message).__name__.lower()
                for index, rank in enumerate(action.ranks):
                    session = job.sessions.get(rank)
                    if session is not None:
                        session.send(message)
                    if isinstance(action.message, Prepare):
                        self._rank_state(job, action.message.version, rank, "prepare_sent")
                    if index == 0:
                        await self._fault(f"{what}-sent-to-one")
                await self._fault(f"{what}-sent")
            elif isinstance(action, Emit):
                self.events.publish(job.job_id, action.kind, action.version, action.message, action.rank)
            elif isinstance(action, Refuse):
                pass            # the caller reads it from the returned actions

    def fence(self, error: StoreFencedError) -> None:
        """A newer service owns the store: decide nothing more, let the ranks go."""
        if self.fenced_by is None:
            self.fenced_by = error
            log.error("service: %s", error)
            for job in self.jobs.values():
                for session in list(job.sessions.values()):
                    session.close()
        self.fenced.set()

    async def _fault(self, point: str) -> None:
        """Fault injection for the crash tests (``P2_CRASH_AT``, never set in
        production): SIGKILL this process at ``point`` — after letting the event
        loop write what is already queued, so a message "sent" has left."""
        if self.crash_at == point:
            await asyncio.sleep(0.2)
            log.warning("service: crashing at %s (P2_CRASH_AT)", point)
            os.kill(os.getpid(), signal.SIGKILL)

    # ------------------------------------------------------------- what was observed
    def _observe_record(self, job: Job, record: dict) -> None:
        version = record.get("version")
        if version is None:
            return
        plan = job.plans.setdefault(version, PlanState(version, self.clock()))
        if record.get("type") == "prepare":
            plan.switch_iteration = record.get("switch_iteration", 0)
            plan.epoch = record.get("epoch", 0)
        elif record.get("type") == "decision":
            plan.decision = record["decision"]
            plan.reason = record.get("reason", "")
            plan.decided_unix = record.get("time", self.clock())
            plan.epoch = record.get("epoch", plan.epoch)
        plan.dirty = True

    def _rank_state(self, job: Job, version: int, rank: int, state: str, reason: str = "") -> None:
        plan = job.plans.setdefault(version, PlanState(version, self.clock()))
        if plan.ranks.get(rank) != (state, reason):
            plan.ranks[rank] = (state, reason)
            plan.dirty = True
