"""The HTML pages: server-rendered (readable without JavaScript), then kept live by
``static/dashboard.js`` polling the same ``/api/`` routes the pages are built from."""

from __future__ import annotations

from pathlib import Path as FilePath

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from optimizer_service.dashboard import api, svg, views
from optimizer_service.dashboard.auth import COOKIE
from optimizer_service.errors import InvalidInputError
from optimizer_service.service import explore as explorer

HERE = FilePath(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["sparkline"] = svg.sparkline
templates.env.filters["ms"] = lambda s: views.duration(s)
templates.env.filters["pct"] = lambda r: "–" if r is None else f"{r * 100:+.0f} %"
templates.env.globals["ago"] = views.ago

router = APIRouter(include_in_schema=False)


def page(request: Request, name: str, title: str, **context) -> HTMLResponse:
    state = request.app.state
    return templates.TemplateResponse(request, name, {"title": title, "charts": state.charts,
                                                      "writable": state.access.token is not None, **context})


def _readable(request: Request) -> RedirectResponse | None:
    if not request.app.state.access.can_read(request):
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
    return None


@router.get("/", response_class=HTMLResponse)
async def jobs_page(request: Request):
    return _readable(request) or page(request, "jobs.html", "Jobs", jobs=views.jobs(request.app.state.core))


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job_page(request: Request, job_id: str = api.JOB):
    if (redirect := _readable(request)) is not None:
        return redirect
    core = request.app.state.core
    job = core.job(job_id)
    return page(request, "job.html", f"Job {job_id}", job=views.job_detail(core, job),
                events=await views.events(core, job, 100))


@router.get("/jobs/{job_id}/plans/{version}", response_class=HTMLResponse)
async def plan_page(request: Request, job_id: str = api.JOB, version: int = api.VERSION,
                    rank: int = Query(0, ge=0, le=1 << 20)):
    if (redirect := _readable(request)) is not None:
        return redirect
    core = request.app.state.core
    job = core.job(job_id)
    detail, plan = await views.plan_detail(core, job, version)
    diff = views.plan_diff(await views.previous_plan(core, job, version), plan)
    timelines = views.gantt(core, job, version, rank)
    horizon = max([r["end"] for r in timelines["predicted"] + (timelines["measured"] or [])] or [0.0]) or None
    charts = {"predicted": svg.gantt(timelines["predicted"], "predicted (the search's schedule)", horizon),
              "measured": svg.gantt(timelines["measured"] or [], f"measured (rank {rank}, iteration "
                                    f"{timelines['measured_iteration']})", horizon)
              if timelines["measured"] else ""}
    return page(request, "plan.html", f"Plan v{version} of {job_id}", job_id=job_id, detail=detail, diff=diff,
                timelines=timelines, gantt=charts, rank=rank)


@router.get("/topology", response_class=HTMLResponse)
async def topology_page(request: Request, name: str = Query("", max_length=128),
                        job: str = Query("", max_length=256)):
    if (redirect := _readable(request)) is not None:
        return redirect
    core = request.app.state.core
    presets = explorer.topology_choices()
    source, text = name, name
    if job:
        text = core.topology_yaml(core.job(job))
        source = f"job {job}"
        if not text:
            raise InvalidInputError(f"job {job} names no usable topology (P2_TOPOLOGY on its ranks or "
                                    "--topology to p2 serve)")
    elif not name:
        jobs_with = [j for j in sorted(core.jobs) if core.topology_yaml(core.jobs[j])]
        if jobs_with:
            text, source = core.topology_yaml(core.jobs[jobs_with[0]]), f"job {jobs_with[0]}"
        else:
            text = source = presets[0]
    view = explorer.topology_view(explorer.load(text))
    return page(request, "topology.html", "Topology", topology=view, source=source, presets=presets,
                jobs=sorted(core.jobs))


@router.get("/explore", response_class=HTMLResponse)
async def explore_page(request: Request, topology: str = Query("", max_length=65536),
                       axes: str = Query("", max_length=256), reduce: str = Query("", max_length=256),
                       max_size: int = Query(4, ge=1, le=10), placements: int = Query(4, ge=1, le=32),
                       programs: int = Query(3, ge=1, le=16)):
    if (redirect := _readable(request)) is not None:
        return redirect
    presets = explorer.topology_choices()
    form = {"topology": topology or presets[0], "axes": axes, "reduce": reduce, "max_size": max_size,
            "placements": placements, "programs": programs}
    result, error = None, None
    if axes and reduce:
        try:
            result = await api.explore_request(request, form["topology"], axes, reduce, max_size, placements,
                                               programs)
        except InvalidInputError as failure:
            error = " ".join(str(failure).split())
    return page(request, "explore.html", "P² explorer", presets=presets, form=form, result=result, error=error)


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str = Query("/", max_length=512)):
    return page(request, "login.html", "Log in", next=next if next.startswith("/") else "/", error=None)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, token: str = Form(..., min_length=1, max_length=4096),
                next: str = Form("/", max_length=512)):
    access = request.app.state.access
    if access.token is None or not access.matches(token):
        return templates.TemplateResponse(request, "login.html", {"title": "Log in", "next": next, "charts": False,
                                                                  "writable": False, "error": "wrong token"},
                                          status_code=401)
    response = RedirectResponse(next if next.startswith("/") and not next.startswith("//") else "/", 303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response
