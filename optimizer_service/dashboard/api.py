"""``/api/``: the JSON behind every dashboard page (documented at ``/docs`` by FastAPI's OpenAPI).

Reads call the service core and :mod:`.views`; mutations
(:func:`submit_plan`, :func:`replan_now`, :func:`replanning`,
:func:`delete_job`) check the token (or the session and its CSRF value) and
the origin first (:mod:`.auth`) and only then read their bodies
(:func:`read_body`), so a client without the token costs the service no
parsing. Work that grows with what a client sent (YAML, synthesis, plan
documents) runs off the event loop with a deadline (:mod:`.offload`).

Every error is ``{"error": ONE LINE, "field": NAME?}`` (:class:`ErrorBody`),
and every route's OpenAPI entry lists the statuses it answers (:func:`errors`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field, ValidationError

from optimizer_service.dashboard import views
from optimizer_service.dashboard.offload import Offloader
from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan import Plan
from optimizer_service.service import explore as explorer
from optimizer_service.service import requests
from optimizer_service.service.errors import NotFoundError
from optimizer_service.service.requests import RequestError
from optimizer_service.service.store.validation import JOB_ID_PATTERN

router = APIRouter(prefix="/api")

#: A job id as the store accepts it (service/store/validation.py), anchored for OpenAPI's search semantics.
JOB_ID_REGEX = f"^{JOB_ID_PATTERN.pattern}$"
JOB = Path(..., min_length=1, max_length=128, pattern=JOB_ID_REGEX,
           description="The job's id (P2_JOB of its ranks): 1-128 characters of A-Z a-z 0-9 . _ : - starting "
                       "with a letter or digit.")
VERSION = Path(..., ge=1, le=2**53 - 1, description="A plan version of the job.")
#: What explorer.parse_int_list reads: whole numbers separated by commas or spaces, optionally in brackets.
INT_LIST = r"^\s*[\[(]?\s*[0-9]{1,9}([,\s]+[0-9]{1,9})*\s*[\])]?\s*$"
MAX_PLAN_BYTES = 64 * 1024 * 1024           # a plan document (as the store's limit)
MAX_TOPOLOGY_QUERY = 8192                   # characters of topology YAML in a URL (a request head is at most 16 KiB)
MAX_SMALL_BODY = 64 * 1024                  # every other body


class ErrorBody(BaseModel):
    """What every error answers (4xx, 5xx), API and ``/metrics`` alike."""

    error: str = Field(description="One line: what is wrong and what to do about it.")
    field: str | None = Field(None, description="The request's field (or header) at fault, where there is one.")


class BusyError(InvalidInputError):
    """The explorer already runs a synthesis (429)."""


class BodyError(RequestError):
    """A body that is not JSON (400)."""


class BodyTooLargeError(RequestError):
    """A body over its route's limit (413)."""


_WHY = {400: "The body is not JSON.",
        401: "The service's token is needed (Authorization: Bearer TOKEN, or a login session).",
        403: "Refused: a service without a token, a cross-site Origin, or a session's request without its "
             "X-P2-CSRF header.",
        404: "No such job or plan.",
        409: "The service refuses this now (e.g. the job is not live, or it runs).",
        413: "The body is larger than this route accepts.",
        421: "The request's Host is not one this dashboard answers to (P2_DASHBOARD_HOSTS).",
        422: "A malformed parameter or body; 'field' names it.",
        429: "Too many requests of this kind right now; try again later.",
        503: "The service cannot answer now: its store is unavailable, it is busy, or the work ran past its "
             "deadline."}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of these error statuses (always with 413, 421, 503: the body limit,
    the Host allowlist and an unavailable store or deadline can answer any route)."""
    every = sorted({*statuses, 413, 421, 503})
    return {status: {"model": ErrorBody, "description": _WHY[status]} for status in every}


READ = errors(401, 422)
READ_JOB = errors(401, 404, 422)
WRITE = errors(400, 401, 403, 404, 409, 422)


def _json_body(schema: dict, description: str, required: bool = True) -> dict:
    """``openapi_extra`` for a body the handler reads itself (after its checks)."""
    return {"requestBody": {"required": required, "description": description,
                            "content": {"application/json": {"schema": schema}}}}


def _core(request: Request):
    request.app.state.access.check_read(request)
    return request.app.state.core


def _job(request: Request, job_id: str):
    return _core(request).job(job_id)


def _offloader(request: Request) -> Offloader:
    return request.app.state.offloader


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (413) as soon as it passes ``limit`` bytes: called only
    after the request's checks, so nobody without the right to act makes the service read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError("body", f"{int(declared)} bytes, more than the {limit} this route accepts")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError("body", f"more than the {limit} bytes this route accepts")
        chunks.append(chunk)
    return b"".join(chunks)


def load_json(body: bytes, empty: Any = None) -> Any:
    """A body's JSON value (``empty`` for no body at all, when that is allowed)."""
    if not body.strip() and empty is not None:
        return empty
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError) as error:
        raise BodyError("body", f"not JSON ({' '.join(str(error).split())[:120]}); send a JSON object") from None


def validated(model: type[BaseModel], value: Any) -> BaseModel:
    """``value`` as ``model``, or 422 naming the first bad field."""
    if not isinstance(value, dict):
        raise RequestError("body", f"a JSON object is needed, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first.get("loc", ())) or "body"
        raise RequestError(field, first.get("msg", "invalid")) from None


# ----------------------------------------------------------------------- reads
@router.get("/jobs", summary="One page of the jobs (by id): state, ranks, plan, iteration time, prediction",
            responses=READ)
async def list_jobs(request: Request,
                    limit: int = Query(0, ge=0, le=requests.MAX_PAGE,
                                       description=f"Jobs on the page (0: {requests.DEFAULT_PAGE})."),
                    after: str = Query("", max_length=128, pattern=f"^$|{JOB_ID_REGEX}",
                                       description="The cursor: the 'next' of the page before ('' for the first).")
                    ) -> dict:
    return views.jobs_page(_core(request), *requests.page(limit, after))


@router.get("/jobs/{job_id}", summary="One job: ranks, dispatcher waits, plans, replanning state",
            responses=READ_JOB)
async def get_job(request: Request, job_id: str = JOB) -> dict:
    return views.job_detail(request.app.state.core, _job(request, job_id))


@router.get("/jobs/{job_id}/telemetry", summary="Iterations after `since` (for the live chart)", responses=READ_JOB)
async def get_telemetry(request: Request, job_id: str = JOB,
                        since: int = Query(-1, ge=-1, le=2**53 - 1,
                                           description="The last iteration the client has.")) -> dict:
    return views.telemetry(request.app.state.core, _job(request, job_id), since)


@router.get("/jobs/{job_id}/events", summary="The job's event log and its stored replanning decisions",
            responses=READ_JOB)
async def get_events(request: Request, job_id: str = JOB, limit: int = Query(100, ge=1, le=1000)) -> dict:
    return await views.events(request.app.state.core, _job(request, job_id), limit)


@router.get("/jobs/{job_id}/plans", summary="The job's plans and their two-phase-commit state", responses=READ_JOB)
async def list_plans(request: Request, job_id: str = JOB) -> dict:
    job = _job(request, job_id)
    return {"job_id": job_id, "plans": [views.plan_state(s) for s in await request.app.state.core.plans(job.job_id)]}


@router.get("/jobs/{job_id}/plans/{version}", summary="A plan: per comm-op its motifs and predicted costs",
            responses=READ_JOB)
async def get_plan(request: Request, job_id: str = JOB, version: int = VERSION) -> dict:
    core = request.app.state.core
    return await views.plan_detail(core, _job(request, job_id), version, _offloader(request))


@router.get("/jobs/{job_id}/plans/{version}/diff", summary="What the plan changes against another",
            responses=READ_JOB)
async def get_diff(request: Request, job_id: str = JOB, version: int = VERSION,
                   against: int | None = Query(None, ge=0, le=2**53 - 1,
                                               description="Default: the plan committed before it; 0: passthrough.")
                   ) -> dict:
    core = request.app.state.core
    return await views.diff(core, _job(request, job_id), version, against, _offloader(request))


@router.get("/jobs/{job_id}/plans/{version}/gantt", summary="Predicted and measured timelines of one iteration",
            responses=READ_JOB)
async def get_gantt(request: Request, job_id: str = JOB, version: int = VERSION,
                    rank: int = Query(0, ge=0, le=1 << 20)) -> dict:
    core = request.app.state.core
    job = _job(request, job_id)
    await core.plan(job_id, version)            # 404 for a version the job does not have
    return views.gantt(core, job, version, rank)


@router.get("/jobs/{job_id}/topology", summary="The job's topology: levels and links with their values",
            responses=READ_JOB)
async def job_topology(request: Request, job_id: str = JOB) -> dict:
    core = request.app.state.core
    job = _job(request, job_id)
    text = core.topology_yaml(job)
    if not text:
        raise RequestError("topology", f"job {job_id} names no usable topology (P2_TOPOLOGY on its ranks or "
                                       "--topology to p2 serve)")
    return await topology(request, text)


@router.get("/topologies", summary="The topology presets", responses=errors(401))
async def list_topologies(request: Request) -> dict:
    _core(request)
    return {"presets": explorer.topology_choices()}


@router.get("/topologies/{name}", summary="A preset topology: levels and links with their values",
            responses=errors(401, 404, 422))
async def get_topology(request: Request,
                       name: str = Path(..., min_length=1, max_length=128, description="A preset's name.",
                                        json_schema_extra={"enum": explorer.topology_choices()})) -> dict:
    _core(request)
    if name not in explorer.topology_choices():     # a preset's name only: YAML goes to /api/explore
        raise NotFoundError(f"no topology preset {name[:128]!r}; the presets are "
                            f"{', '.join(explorer.topology_choices())}")
    return await topology(request, name)


def _topology_view(name_or_yaml: str) -> dict:
    return explorer.topology_view(explorer.load(name_or_yaml))


async def topology(request: Request, name_or_yaml: str) -> dict:
    """A preset or YAML topology's view, loaded off the event loop (YAML is client input)."""
    return await _offloader(request).run("loading the topology", _topology_view, name_or_yaml)


def _explore(limits, topology_text: str, axes: str, reduce: str, max_size: int, placements: int,
             programs: int) -> dict:
    loaded = explorer.load(topology_text)
    return explorer.explore(loaded, explorer.parse_int_list(axes, "axes"), explorer.parse_int_list(reduce, "reduce"),
                            limits=limits, max_size=max_size, placements_limit=placements, programs_limit=programs)


async def explore_request(request: Request, topology_text: str, axes: str, reduce: str, max_size: int,
                          placements: int, programs: int) -> dict:
    """Run the P² explorer (parsing included) off the event loop with a deadline, one synthesis at a time."""
    lock = request.app.state.explore_lock
    if lock.locked():
        raise BusyError("the explorer is busy with another synthesis; try again in a moment")
    async with lock:
        return await _offloader(request).run("the synthesis", _explore, request.app.state.limits, topology_text,
                                             axes, reduce, max_size, placements, programs)


@router.get("/explore", summary="P² explorer: placements and reduction programs ranked, with lowered steps",
            responses=errors(401, 422, 429))
async def explore(request: Request,
                  topology: str = Query(..., min_length=1, max_length=MAX_TOPOLOGY_QUERY,
                                        description="A preset name or topology YAML (the whole request head, "
                                                    "URL-encoded, must stay under 16 KiB)."),
                  axes: str = Query(..., min_length=1, max_length=256, pattern=INT_LIST,
                                    description="Parallelism axes, e.g. 4,16."),
                  reduce: str = Query(..., min_length=1, max_length=256, pattern=INT_LIST,
                                      description="Indices of the axes to reduce over, e.g. 1."),
                  max_size: int = Query(5, ge=1, le=10),
                  placements: int = Query(8, ge=1, le=32), programs: int = Query(5, ge=1, le=16)) -> dict:
    _core(request)
    return await explore_request(request, topology, axes, reduce, max_size, placements, programs)


# ------------------------------------------------------------------- mutations
class ReplanBody(BaseModel):
    reason: str = Field("", max_length=200, description="Why (goes to the job's event log).")


class ReplanningBody(BaseModel):
    paused: bool = Field(description="true: pause the job's replanning; false: resume it.")
    reason: str = Field("", max_length=200, description="Why (goes to the job's event log).")


PLAN_SCHEMA = {"type": "object", "description": "A plan document (p2enforcer-plan format; its version is "
               "assigned by the service).", "required": ["format", "world_size", "ops"],
               "properties": {"format": {"type": "string", "enum": ["p2enforcer-plan"]},
                              "version": {"type": "integer"}, "world_size": {"type": "integer", "minimum": 1},
                              "ops": {"type": "array", "items": {"type": "object"}},
                              "channels": {"type": "object"}, "topology": {"type": ["string", "null"]},
                              "predicted_iteration_seconds": {"type": ["number", "null"]},
                              "bound_iteration_seconds": {"type": ["number", "null"]}}}


def _parse_plan(body: bytes) -> Plan:
    """A submitted plan document (off the event loop: up to 64 MiB of JSON)."""
    document = load_json(body)
    if not isinstance(document, dict):
        raise RequestError("plan", f"a plan is a JSON object, got {type(document).__name__}")
    document["version"] = 1                 # the service assigns the version
    try:
        return Plan.parse(json.dumps(document))
    except PlanError as error:
        raise RequestError("plan", str(error)) from None


@router.post("/jobs/{job_id}/plans", status_code=202,
             summary="Submit a plan (its JSON document) and start its two-phase commit; needs the token",
             responses=WRITE, openapi_extra=_json_body(PLAN_SCHEMA, "A plan document (p2enforcer-plan format)."))
async def submit_plan(request: Request, job_id: str = JOB) -> dict:
    request.app.state.access.check_write(request)
    core = request.app.state.core
    core.job(job_id)
    body = await read_body(request, MAX_PLAN_BYTES)
    parsed = await _offloader(request).run("reading the plan", _parse_plan, body)
    state, _ = await core.submit_plan(job_id, parsed)
    return views.plan_state(state)


@router.post("/jobs/{job_id}/replan", summary="Search for a plan now; needs the token", responses=WRITE,
             openapi_extra=_json_body(ReplanBody.model_json_schema(), "Why (optional).", required=False))
async def replan_now(request: Request, job_id: str = JOB) -> dict:
    request.app.state.access.check_write(request)
    body = validated(ReplanBody, load_json(await read_body(request, MAX_SMALL_BODY), empty={}))
    return {"job_id": job_id, "policy": request.app.state.core.replan_now(job_id, body.reason or "from the dashboard")}


@router.post("/jobs/{job_id}/replanning", summary="Pause or resume the job's replanning; needs the token",
             responses=WRITE, openapi_extra=_json_body(ReplanningBody.model_json_schema(), "Pause or resume."))
async def replanning(request: Request, job_id: str = JOB) -> dict:
    request.app.state.access.check_write(request)
    body = validated(ReplanningBody, load_json(await read_body(request, MAX_SMALL_BODY), empty={}))
    policy = request.app.state.core.pause_replanning(job_id, body.paused, body.reason or "from the dashboard")
    return {"job_id": job_id, "policy": policy}


@router.delete("/jobs/{job_id}", summary="Delete a job, its plans and its telemetry; needs the token",
               responses=errors(401, 403, 404, 409, 422))
async def delete_job(request: Request, job_id: str = JOB,
                     force: bool = Query(False, description="Also a job whose ranks are still connected.")) -> dict:
    request.app.state.access.check_write(request)
    await request.app.state.core.delete_job(job_id, force=force)
    return {"job_id": job_id, "deleted": True}
