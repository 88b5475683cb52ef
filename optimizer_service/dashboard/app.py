"""The FastAPI app: pages, ``/api/``, ``/metrics``, ``/healthz`` over one service core.

:func:`create_app` builds it from values; ``p2 serve`` runs it with uvicorn on
the service's event loop (:mod:`optimizer_service.service.server`), so every
handler calls the core directly, as the gRPC servicers do. Errors map to
statuses in one place (:func:`_install_errors`): a page gets an error page,
``/api/`` (and ``/metrics``, ``/openapi.json``) a JSON ``{"error", "field"}`` —
FastAPI's and Starlette's own errors (``{"detail"}``) included. Every request
passes :class:`~.guard.GuardMiddleware` first (the Host allowlist, the
security headers), then, while the service is a standby,
:class:`~.standby.StandbyGate` (only ``/metrics`` and ``/healthz`` are served).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from optimizer_service.dashboard import api, pages
from optimizer_service.dashboard.auth import Access, AuthError
from optimizer_service.dashboard.body_limit import BodyLimitMiddleware
from optimizer_service.dashboard.guard import GuardMiddleware
from optimizer_service.dashboard.hosts import LOOPBACK, HostAllowlist
from optimizer_service.dashboard.offload import DEADLINE_SECONDS, Offloader, OverloadedError
from optimizer_service.dashboard.sessions import LoginLimiter, LoginRate, SessionStore
from optimizer_service.dashboard.standby import Role, StandbyGate, always_leading, names_leader, standby_health
from optimizer_service.errors import InvalidInputError
from optimizer_service.metrics import CONTENT_TYPE, Stopwatch
from optimizer_service.service.core import ServiceCore
from optimizer_service.service.errors_map import status_of
from optimizer_service.service.explore import Limits
from optimizer_service.service.requests import RequestError
from optimizer_service.service.store.base import StoreError
from optimizer_service.service.token_source import TokenSource

log = logging.getLogger("p2.service")
STATIC = Path(__file__).resolve().parent / "static"
#: uPlot (from the npm registry, put here by scripts/setup.sh; not committed).
VENDOR = STATIC / "vendor"


@dataclass(frozen=True)
class DashboardConfig:
    token: str | None = None        # the service's token: mutations need it (none: the dashboard is read-only)
    tokens: TokenSource | None = None   # the same, rotated from its file (p2 serve); None: ``token`` as given
    public: bool = True             # reads without the token (P2_DASHBOARD_PUBLIC)
    limits: Limits = Limits()       # the P² explorer's bounds (Settings.limits())
    #: The Host names (``NAME`` or ``NAME:PORT``; ``*``: any) the dashboard answers to; a browser's
    #: Origin must be one of them too. ``p2 serve`` passes its bound address and the loopback names,
    #: plus P2_DASHBOARD_HOSTS.
    allowed_hosts: tuple[str, ...] = LOOPBACK
    tls: bool = False               # served over TLS: the session cookie is 'Secure'
    deadline_seconds: float = DEADLINE_SECONDS     # request work (parsing, synthesis) past this answers 503
    login_rate: LoginRate = LoginRate()


def charts_available() -> bool:
    return (VENDOR / "uPlot.iife.min.js").is_file() and (VENDOR / "uPlot.min.css").is_file()


def create_app(core: ServiceCore, config: DashboardConfig = DashboardConfig(), role: Role = always_leading) -> FastAPI:
    """The app over ``core``; ``role()`` says whether the service leads (a standby's core has not started:
    :mod:`.standby`)."""
    app = FastAPI(title="p2 optimizer service", version="1", docs_url=None, redoc_url=None,
                  description="Jobs, plans, telemetry and the P² explorer of one optimizer service. "
                  "Mutations need the service's token as 'Authorization: Bearer TOKEN'.")
    app.state.core = core
    app.state.access = Access(config.token, config.public, HostAllowlist(config.allowed_hosts), SessionStore(),
                              config.tokens)
    app.state.login_limiter = LoginLimiter(config.login_rate)
    app.state.offloader = Offloader(deadline=config.deadline_seconds)
    app.state.tls = config.tls
    app.state.limits = config.limits
    app.state.charts = charts_available()
    app.state.explore_lock = asyncio.Lock()
    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    app.add_middleware(BodyLimitMiddleware)     # inside `measure` below: refused bodies are counted too

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Swagger UI from the files the setup fetched (no CDN), set up by a script file (the CSP allows
        no inline script); the bare OpenAPI JSON without them."""
        if not (VENDOR / "swagger-ui-bundle.js").is_file():
            return HTMLResponse('<p>The API is described at <a href="/openapi.json">/openapi.json</a> (run '
                                "scripts/setup.sh for the Swagger UI page).</p>")
        return HTMLResponse(SWAGGER_PAGE)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response((STATIC / "favicon.svg").read_bytes(), media_type="image/svg+xml")

    @app.get("/healthz", response_class=PlainTextResponse,
             summary="Liveness: 'ok' on the leader; on a standby {status: standby, leader} (JSON)",
             responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}})
    async def healthz(request: Request) -> Response:
        leading, leader = role()
        if leading:
            return PlainTextResponse("ok")
        return JSONResponse(standby_health(leader, names_leader(app.state.access, request)))

    @app.get("/metrics", summary="Prometheus metrics of the service and its jobs",
             responses={200: {"content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}}},
                        **api.errors(401)})
    async def metrics(request: Request) -> Response:
        app.state.access.check_read(request)
        return Response(core.metrics.exposition(), media_type=CONTENT_TYPE)

    @app.middleware("http")
    async def measure(request: Request, call_next):
        with Stopwatch() as watch:
            response = await call_next(request)
        route = request.scope.get("route")
        name = getattr(route, "path", None) or ("static" if request.url.path.startswith("/static/") else "unknown")
        core.metrics.on_request("http", f"{request.method} {name}", watch.seconds,
                                str(response.status_code) if response.status_code >= 400 else None)
        return response

    # Outside `measure`, inside the Host check: a standby answers its refusals before anything reads.
    app.add_middleware(StandbyGate, role=role, access=app.state.access, json_answer=_json_answer)
    _install_errors(app)
    app.add_middleware(GuardMiddleware, hosts=app.state.access.hosts)     # outermost: before anything reads
    return app


SWAGGER_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>p2 optimizer service API</title>
<link rel="stylesheet" href="/static/vendor/swagger-ui.css"><link rel="icon" href="/static/favicon.svg">
</head><body><div id="swagger-ui"></div>
<script src="/static/vendor/swagger-ui-bundle.js"></script><script src="/static/swagger-init.js"></script>
</body></html>"""


#: The gRPC status the service gives an error (service/errors_map.py, the one mapping) as an HTTP status.
HTTP_STATUS = {grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.FAILED_PRECONDITION: 409,
               grpc.StatusCode.ABORTED: 409, grpc.StatusCode.UNAVAILABLE: 503,
               grpc.StatusCode.INVALID_ARGUMENT: 422}


def _status(error: Exception) -> int:
    if isinstance(error, AuthError):
        return error.status
    for kind, status in ((api.BodyError, 400), (api.BodyTooLargeError, 413), (api.BusyError, 429),
                         (OverloadedError, 503)):
        if isinstance(error, kind):
            return status
    return HTTP_STATUS.get(status_of(error), 500)


def _json_answer(path: str) -> bool:
    return path.startswith("/api/") or path in ("/metrics", "/openapi.json")


def _install_errors(app: FastAPI) -> None:
    def answer(request: Request, status: int, message: str, field: str | None = None,
               headers: dict[str, str] | None = None):
        message = " ".join(message.split())
        if _json_answer(request.url.path):
            body = {"error": message} | ({"field": field} if field else {})
            return JSONResponse(body, status_code=status, headers=headers)
        html = pages.templates.get_template("error.html").render(
            request=request, title=f"{status}", status=status, message=message, field=field, charts=False,
            writable=False)
        return HTMLResponse(html, status_code=status, headers=headers)

    @app.exception_handler(AuthError)
    @app.exception_handler(InvalidInputError)
    @app.exception_handler(StoreError)
    async def known(request: Request, error: Exception):
        field = getattr(error, "field", None) if isinstance(error, (RequestError, AuthError)) else None
        status = _status(error)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if isinstance(error, (OverloadedError, api.BusyError)):
            headers = {"Retry-After": "1"}
        return answer(request, status, str(error), field, headers)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError):
        first = error.errors()[0] if error.errors() else {}
        where = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "form")]
        field = ".".join(where) or None
        return answer(request, 422, f"{field or 'request'}: {first.get('msg', 'invalid')}", field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        """Starlette's and FastAPI's own refusals (no route, a method the route lacks, …) in our shape."""
        if error.status_code == 404:
            message = f"no page {request.url.path[:200]}; the jobs are at /, the API at /docs"
        else:
            message = f"{error.detail}" if isinstance(error.detail, str) else f"HTTP {error.status_code}"
            if error.status_code == 405:
                message = f"{request.method} is not a method of {request.url.path[:200]} ({message})"
        return answer(request, error.status_code, message, None, dict(error.headers or {}) or None)

    @app.exception_handler(Exception)
    async def internal(request: Request, error: Exception):
        """A bug: logged with its traceback (by the server), answered in one line."""
        return answer(request, 500, "internal error of the dashboard; the service's log has the details")
