"""``/api/``: the JSON behind every dashboard page (documented at ``/docs`` by FastAPI's OpenAPI).

Reads call the service core and :mod:`.views`; mutations
(:func:`submit_plan`, :func:`replan_now`, :func:`replanning`) check the
token and the origin first (:mod:`.auth`). Errors are ``{"error": ONE LINE,
"field": NAME?}`` with 401/403 (auth), 404 (no such job or plan), 409 (the
service refuses now), 422 (malformed input), 429 (the explorer is busy).
"""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Body, Path, Query, Request

from optimizer_service.dashboard import views
from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan import Plan
from optimizer_service.service import explore as explorer
from optimizer_service.service.requests import RequestError

router = APIRouter(prefix="/api")

JOB = Path(..., min_length=1, max_length=256, description="The job's id (P2_JOB of its ranks).")
VERSION = Path(..., ge=1, le=2**62, description="A plan version of the job.")
MAX_PLAN_BYTES = 64 * 1024 * 1024


class BusyError(InvalidInputError):
    """The explorer already runs a synthesis (429)."""


def _core(request: Request):
    request.app.state.access.check_read(request)
    return request.app.state.core


def _job(request: Request, job_id: str):
    return _core(request).job(job_id)


@router.get("/jobs", summary="Every job: state, ranks, plan, iteration time, prediction")
async def list_jobs(request: Request) -> dict:
    return {"jobs": views.jobs(_core(request))}


@router.get("/jobs/{job_id}", summary="One job: ranks, dispatcher waits, plans, replanning state")
async def get_job(request: Request, job_id: str = JOB) -> dict:
    return views.job_detail(request.app.state.core, _job(request, job_id))


@router.get("/jobs/{job_id}/telemetry", summary="Iterations after `since` (for the live chart)")
async def get_telemetry(request: Request, job_id: str = JOB,
                        since: int = Query(-1, ge=-1, description="The last iteration the client has.")) -> dict:
    return views.telemetry(request.app.state.core, _job(request, job_id), since)


@router.get("/jobs/{job_id}/events", summary="The job's event log and its stored replanning decisions")
async def get_events(request: Request, job_id: str = JOB, limit: int = Query(100, ge=1, le=1000)) -> dict:
    return await views.events(request.app.state.core, _job(request, job_id), limit)


@router.get("/jobs/{job_id}/plans", summary="The job's plans and their two-phase-commit state")
async def list_plans(request: Request, job_id: str = JOB) -> dict:
    job = _job(request, job_id)
    return {"job_id": job_id, "plans": [views.plan_state(s) for s in await request.app.state.core.plans(job.job_id)]}


@router.get("/jobs/{job_id}/plans/{version}", summary="A plan: per comm-op its motifs and predicted costs")
async def get_plan(request: Request, job_id: str = JOB, version: int = VERSION) -> dict:
    return (await views.plan_detail(request.app.state.core, _job(request, job_id), version))[0]


@router.get("/jobs/{job_id}/plans/{version}/diff", summary="What the plan changes against another")
async def get_diff(request: Request, job_id: str = JOB, version: int = VERSION,
                   against: int | None = Query(None, ge=0, description="Default: the plan committed before it; "
                                               "0: passthrough.")) -> dict:
    return await views.diff(request.app.state.core, _job(request, job_id), version, against)


@router.get("/jobs/{job_id}/plans/{version}/gantt", summary="Predicted and measured timelines of one iteration")
async def get_gantt(request: Request, job_id: str = JOB, version: int = VERSION,
                    rank: int = Query(0, ge=0, le=1 << 20)) -> dict:
    core = request.app.state.core
    job = _job(request, job_id)
    await core.plan(job_id, version)            # 404 for a version the job does not have
    return views.gantt(core, job, version, rank)


@router.get("/jobs/{job_id}/topology", summary="The job's topology: levels and links with their values")
async def job_topology(request: Request, job_id: str = JOB) -> dict:
    core = request.app.state.core
    job = _job(request, job_id)
    text = core.topology_yaml(job)
    if not text:
        raise RequestError("topology", f"job {job_id} names no usable topology (P2_TOPOLOGY on its ranks or "
                                       "--topology to p2 serve)")
    return explorer.topology_view(explorer.load(text))


@router.get("/topologies", summary="The topology presets")
async def list_topologies(request: Request) -> dict:
    _core(request)
    return {"presets": explorer.topology_choices()}


@router.get("/topologies/{name}", summary="A preset topology: levels and links with their values")
async def get_topology(request: Request, name: str = Path(..., min_length=1, max_length=128)) -> dict:
    _core(request)
    return explorer.topology_view(explorer.load(name))


async def explore_request(request: Request, topology: str, axes: str, reduce: str, max_size: int,
                          placements: int, programs: int) -> dict:
    """Run the P² explorer off the event loop, one synthesis at a time."""
    loaded = explorer.load(topology)
    axes_values = explorer.parse_int_list(axes, "axes")
    reduce_values = explorer.parse_int_list(reduce, "reduce")
    lock: asyncio.Lock = request.app.state.explore_lock
    if lock.locked():
        raise BusyError("the explorer is busy with another synthesis; try again in a moment")
    async with lock:
        return await asyncio.to_thread(explorer.explore, loaded, axes_values, reduce_values,
                                       limits=request.app.state.limits, max_size=max_size,
                                       placements_limit=placements, programs_limit=programs)


@router.get("/explore", summary="P² explorer: placements and reduction programs ranked, with lowered steps")
async def explore(request: Request,
                  topology: str = Query(..., min_length=1, max_length=65536, description="A preset name or YAML."),
                  axes: str = Query(..., min_length=1, max_length=256, description="Parallelism axes, e.g. 4,16."),
                  reduce: str = Query(..., min_length=1, max_length=256,
                                      description="Indices of the axes to reduce over, e.g. 1."),
                  max_size: int = Query(5, ge=1, le=10),
                  placements: int = Query(8, ge=1, le=32), programs: int = Query(5, ge=1, le=16)) -> dict:
    _core(request)
    return await explore_request(request, topology, axes, reduce, max_size, placements, programs)


# ------------------------------------------------------------------ mutations
@router.post("/jobs/{job_id}/plans", status_code=202,
             summary="Submit a plan (its JSON document) and start its two-phase commit; needs the token")
async def submit_plan(request: Request, job_id: str = JOB,
                      plan: dict = Body(..., description="A plan document (p2enforcer-plan format)")) -> dict:
    request.app.state.access.check_write(request)
    core = request.app.state.core
    core.job(job_id)
    text = json.dumps(plan)
    if len(text) > MAX_PLAN_BYTES:
        raise RequestError("plan", f"{len(text)} bytes, more than {MAX_PLAN_BYTES}")
    try:
        parsed = Plan.parse(json.dumps(dict(plan, version=1)))
    except PlanError as error:
        raise RequestError("plan", str(error)) from None
    state, _ = await core.submit_plan(job_id, parsed)
    return views.plan_state(state)


@router.post("/jobs/{job_id}/replan", summary="Search for a plan now; needs the token")
async def replan_now(request: Request, job_id: str = JOB,
                     reason: str = Body("", embed=True, max_length=200)) -> dict:
    request.app.state.access.check_write(request)
    return {"job_id": job_id, "policy": request.app.state.core.replan_now(job_id, reason or "from the dashboard")}


@router.post("/jobs/{job_id}/replanning", summary="Pause or resume the job's replanning; needs the token")
async def replanning(request: Request, job_id: str = JOB, paused: bool = Body(..., embed=True),
                     reason: str = Body("", embed=True, max_length=200)) -> dict:
    request.app.state.access.check_write(request)
    policy = request.app.state.core.pause_replanning(job_id, paused, reason or "from the dashboard")
    return {"job_id": job_id, "policy": policy}
