"""The HTML pages: server-rendered (readable without JavaScript), then kept live by
``static/dashboard.js`` polling the same ``/api/`` routes the pages are built from.

Logging in exchanges the service's token, once, for a session (:mod:`.sessions`):
the browser keeps only the session's id (an ``HttpOnly`` cookie) and the page
only its CSRF value (a ``<meta>`` the script reads); the token itself never
reaches a page, a cookie or the browser's storage."""

from __future__ import annotations

from pathlib import Path as FilePath
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from optimizer_service.dashboard import api, svg, views
from optimizer_service.dashboard.auth import COOKIE, AuthError
from optimizer_service.dashboard.sessions import LIFETIME_SECONDS, csrf_matches
from optimizer_service.errors import InvalidInputError
from optimizer_service.service import explore as explorer
from optimizer_service.service import requests, search_view

HERE = FilePath(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["sparkline"] = svg.sparkline
templates.env.filters["ms"] = lambda s: views.duration(s)
templates.env.filters["pct"] = lambda r: "–" if r is None else f"{r * 100:+.0f} %"
templates.env.filters["times"] = lambda r: "–" if r is None else f"{r:.2f}×"
templates.env.filters["rate"] = views.rate
templates.env.globals["ago"] = views.ago
templates.env.globals["fit_rows"] = search_view.fit_rows
templates.env.globals["other_readings"] = search_view.other_readings

router = APIRouter(include_in_schema=False)
MAX_LOGIN_FORM = 8 * 1024
LEGACY_COOKIE = "p2_token"          # what older versions put the token itself in: cleared at login and logout


def page(request: Request, name: str, title: str, status_code: int = 200, headers: dict | None = None,
         **context) -> HTMLResponse:
    state = request.app.state
    session = state.access.session(request)
    return templates.TemplateResponse(request, name, {
        "title": title, "charts": state.charts, "writable": state.access.token is not None,
        "session": session is not None, "csrf": session.csrf if session else "", **context},
        status_code=status_code, headers=headers)


def _readable(request: Request) -> RedirectResponse | None:
    if not request.app.state.access.can_read(request):
        return RedirectResponse(f"/login?next={request.url.path}", status_code=303)
    return None


def _local(target: str) -> str:
    """A redirect target on this dashboard (never another site: ``//host``, ``/\\host``)."""
    ok = target.startswith("/") and not target.startswith(("//", "/\\")) and "\\" not in target
    return target if ok and not any(ord(c) < 32 for c in target) else "/"


@router.get("/", response_class=HTMLResponse)
async def jobs_page(request: Request, after: str = Query("", max_length=128, pattern=f"^$|{api.JOB_ID_REGEX}")):
    if (redirect := _readable(request)) is not None:
        return redirect
    listing = views.jobs_page(request.app.state.core, *requests.page(0, after))
    return page(request, "jobs.html", "Jobs", jobs=listing["jobs"], next=listing["next"], after=after)


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
    offloader = request.app.state.offloader
    job = core.job(job_id)
    detail = await views.plan_detail(core, job, version, offloader)
    diff = await views.diff(core, job, version, None, offloader)
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
                        job: str = Query("", max_length=128)):
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
    view = await api.topology(request, text)
    return page(request, "topology.html", "Topology", topology=view, source=source, presets=presets,
                jobs=sorted(core.jobs)[:requests.DEFAULT_PAGE])


@router.get("/explore", response_class=HTMLResponse)
async def explore_page(request: Request, topology: str = Query("", max_length=api.MAX_TOPOLOGY_QUERY),
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


# ------------------------------------------------------------------ sessions
@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request, next: str = Query("/", max_length=512)):
    return page(request, "login.html", "Log in", next=_local(next), error=None)


def _login_refused(request: Request, status: int, message: str, next: str, headers: dict | None = None):
    return page(request, "login.html", "Log in", status_code=status, headers=headers, next=next, error=message)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request):
    """The token, once, for a session. Rate-limited per client address and in all *before* the
    form is read; refused cross-site (Origin); the answer sets only the session's id."""
    access = request.app.state.access
    access.check_origin(request)
    wait = request.app.state.login_limiter.check(request.client.host if request.client else "")
    if wait:
        return _login_refused(request, 429, f"too many login attempts; try again in {wait} s", "/",
                              {"Retry-After": str(wait)})
    form = parse_qs((await api.read_body(request, MAX_LOGIN_FORM)).decode("utf-8", "replace"),
                    max_num_fields=4)
    token, next = (form.get("token") or [""])[0], _local((form.get("next") or ["/"])[0][:512])
    if access.token is None:
        return _login_refused(request, 403, "this service has no token, so there is nothing to log in to: its "
                                            "pages are open to everyone", next)
    if not access.matches(token):
        return _login_refused(request, 401, "wrong token", next)
    session_id, _ = access.sessions.create()
    response = RedirectResponse(next, 303)
    response.set_cookie(COOKIE, session_id, max_age=int(LIFETIME_SECONDS), httponly=True, samesite="strict",
                        secure=request.app.state.tls or request.url.scheme == "https", path="/")
    response.delete_cookie(LEGACY_COOKIE, path="/")
    return response


@router.post("/logout")
async def logout(request: Request):
    """End the session (the form carries its CSRF value: another site cannot log you out)."""
    access = request.app.state.access
    access.check_origin(request)
    session = access.session(request)
    if session is not None:
        form = parse_qs((await api.read_body(request, MAX_LOGIN_FORM)).decode("utf-8", "replace"), max_num_fields=4)
        if not csrf_matches(session, (form.get("csrf") or [None])[0]):
            raise AuthError(403, "log out from the dashboard's own page (its form carries the CSRF value)", "csrf")
        access.sessions.end(request.cookies.get(COOKIE))
    response = RedirectResponse("/", 303)
    response.delete_cookie(COOKIE, path="/")
    response.delete_cookie(LEGACY_COOKIE, path="/")
    return response
