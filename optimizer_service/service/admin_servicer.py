"""``p2.v1.Optimizer``: jobs, plans and their two-phase-commit state, job events.

Each method decodes, calls the core and encodes; errors become status codes in
:mod:`optimizer_service.service.errors_map`.
"""

from __future__ import annotations

import functools
import json
import logging

import grpc

from optimizer_service.errors import PlanError
from optimizer_service.plan import Plan
from optimizer_service.plan.proto_codec import plan_from_proto, plan_to_proto
from optimizer_service.service import requests
from optimizer_service.service.core import ServiceCore
from optimizer_service.service.errors_map import one_line, status_of
from optimizer_service.service.jobs import DEGRADED, LIVE, REGISTERING, Job, PlanState
from optimizer_service.service.traces import TRACE_ITERATIONS, TRACE_TIMEOUT_SECONDS
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc

log = logging.getLogger("p2.service")

_JOB_STATES = {REGISTERING: api.REGISTERING, LIVE: api.LIVE, DEGRADED: api.DEGRADED}
_PLAN_STATES = {"preparing": api.PREPARING, "committed": api.COMMITTED, "aborted": api.ABORTED}


def _errors(method):
    """Map the core's errors to status codes (unary methods)."""
    @functools.wraps(method)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        try:
            return await method(self, request, context)
        except Exception as error:
            code = status_of(error)
            if code is None:
                log.error("internal error in %s: %s", method.__name__, one_line(error), exc_info=error)
                code = grpc.StatusCode.INTERNAL
            await context.abort(code, one_line(error))
    return wrapper


def job_to_proto(job: Job, with_search: bool = False) -> api.Job:
    """The job as ``p2.v1.Job``; ``with_search``: with its latest search's decision as JSON
    (GetJob's; ListJobs leaves it out: a search's document is kilobytes)."""
    ranks = [api.RankInfo(rank=rank, host=info.host, local_rank=info.local_rank, backend=info.backend,
                          torch_version=info.torch_version, enforcer_version=info.enforcer_version,
                          connected=info.connected, running_version=info.running_version, iteration=info.iteration,
                          last_seen_unix=info.last_seen_unix)
             for rank, info in sorted(job.ranks.items())]
    return api.Job(job_id=job.job_id, world_size=job.world_size, state=_JOB_STATES[job.state], ranks=ranks,
                   committed_version=job.coordinator.committed, epoch=job.coordinator.epoch,
                   created_unix=job.created_unix, switch_every=job.switch_every,
                   passthrough_measured_seconds=job.passthrough_measured_seconds,
                   passthrough_bound_seconds=job.passthrough_bound_seconds,
                   latest_search=json.dumps(job.latest_search, separators=(",", ":"))
                   if with_search and job.latest_search is not None else "")


def plan_record(job_id: str, state: PlanState, plan: Plan | None = None) -> api.PlanRecord:
    record = api.PlanRecord(job_id=job_id, version=state.version, state=_PLAN_STATES[state.state],
                            reason=state.reason, submitted_unix=state.submitted_unix, decided_unix=state.decided_unix,
                            switch_iteration=state.switch_iteration, epoch=state.epoch,
                            ranks=[api.RankPlanState(rank=rank, state=value[0], reason=value[1])
                                   for rank, value in sorted(state.ranks.items())],
                            predicted_seconds=state.predicted_seconds, measured_seconds=state.measured_seconds,
                            bound_iteration_seconds=state.bound_seconds)
    if plan is not None:
        record.plan.CopyFrom(plan_to_proto(plan))
    return record


def decision_to_proto(event: dict) -> api.Decision:
    iteration = event.get("iteration")
    return api.Decision(unix=float(event.get("unix", 0.0)), kind=str(event.get("kind", "")),
                        version=int(event.get("version") or 0), iteration=-1 if iteration is None else int(iteration),
                        reason=str(event.get("reason", "")), document=json.dumps(event, separators=(",", ":")))


class OptimizerServicer(optimizer_pb2_grpc.OptimizerServicer):
    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    @_errors
    async def ListJobs(self, request, context):
        limit, after = requests.list_jobs(request)
        jobs, cursor = self.core.jobs_page(after, limit)
        return api.ListJobsResponse(jobs=[job_to_proto(job) for job in jobs], next_page_token=cursor)

    @_errors
    async def DeleteJob(self, request, context):
        await self.core.delete_job(request.job_id, force=request.force)
        return api.DeleteJobResponse(job_id=request.job_id)

    @_errors
    async def GetJob(self, request, context):
        return job_to_proto(self.core.job(request.job_id), with_search=True)

    @_errors
    async def SubmitPlan(self, request, context):
        requests.job_id(request.job_id)
        if not request.HasField("plan"):
            raise requests.RequestError("plan", "missing; send the plan to commit")
        try:
            plan = plan_from_proto(_with_version(request.plan))
        except PlanError as error:
            raise requests.RequestError("plan", str(error)) from None
        state, stored = await self.core.submit_plan(request.job_id, plan)
        return plan_record(request.job_id, state, Plan.parse(stored.plan_json))

    @_errors
    async def GetPlan(self, request, context):
        state, stored = await self.core.plan(request.job_id, request.version)
        return plan_record(request.job_id, state, Plan.parse(stored.plan_json))

    @_errors
    async def ListPlans(self, request, context):
        return api.ListPlansResponse(plans=[plan_record(request.job_id, state)
                                            for state in await self.core.plans(request.job_id)])

    @_errors
    async def ListDecisions(self, request, context):
        job_id, limit = requests.list_decisions(request)
        return api.ListDecisionsResponse(decisions=[decision_to_proto(event)
                                                    for event in await self.core.decisions(job_id, limit)])

    async def GetTraces(self, request, context):
        try:
            iterations, timeout = requests.get_traces(request)
            traces = await self.core.collect_traces(request.job_id, iterations or TRACE_ITERATIONS,
                                                    timeout or TRACE_TIMEOUT_SECONDS)
        except Exception as error:
            code = status_of(error)
            if code is None:
                log.error("internal error in GetTraces: %s", one_line(error), exc_info=error)
            await context.abort(code or grpc.StatusCode.INTERNAL, one_line(error))
        for rank, trace in enumerate(traces):
            yield api.TraceFile(rank=rank, data=json.dumps(trace, separators=(",", ":")).encode())

    async def Watch(self, request, context):
        if request.job_id:
            try:
                self.core.job(request.job_id)
            except Exception as error:
                await context.abort(status_of(error) or grpc.StatusCode.INTERNAL, one_line(error))
        queue = self.core.events.subscribe()
        try:
            while True:
                event = await queue.get()
                if request.job_id and event.job_id != request.job_id:
                    continue
                yield api.JobEvent(unix=event.unix, job_id=event.job_id, kind=event.kind, version=event.version,
                                   message=event.message, rank=event.rank or 0, has_rank=event.rank is not None)
        finally:
            self.core.events.unsubscribe(queue)


def _with_version(message):
    """The service assigns versions: whatever the submitted plan says (0 too) is replaced."""
    copy = type(message)()
    copy.CopyFrom(message)
    copy.version = 1
    return copy
