"""The FastAPI app: pages, ``/api/``, ``/metrics``, ``/healthz`` over one service core.

:func:`create_app` builds it from values; ``p2 serve`` runs it with uvicorn on
the service's event loop (:mod:`optimizer_service.service.server`), so every
handler calls the core directly, as the gRPC servicers do. Errors map to
statuses in one place (:func:`_install_errors`): a page gets an error page,
``/api/`` a JSON ``{"error", "field"}``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from optimizer_service.dashboard import api, pages
from optimizer_service.dashboard.auth import Access, AuthError
from optimizer_service.errors import InvalidInputError
from optimizer_service.metrics import CONTENT_TYPE, Stopwatch
from optimizer_service.service.core import ServiceCore
from optimizer_service.service.errors_map import status_of
from optimizer_service.service.explore import Limits
from optimizer_service.service.requests import RequestError
from optimizer_service.service.store.base import StoreError

log = logging.getLogger("p2.service")
STATIC = Path(__file__).resolve().parent / "static"
#: uPlot (from the npm registry, put here by scripts/setup.sh; not committed).
VENDOR = STATIC / "vendor"


@dataclass(frozen=True)
class DashboardConfig:
    token: str | None = None        # the service's token: mutations need it (none: the dashboard is read-only)
    public: bool = True             # reads without the token (P2_DASHBOARD_PUBLIC)
    limits: Limits = Limits()       # the P² explorer's bounds (Settings.limits())


def charts_available() -> bool:
    return (VENDOR / "uPlot.iife.min.js").is_file() and (VENDOR / "uPlot.min.css").is_file()


def create_app(core: ServiceCore, config: DashboardConfig = DashboardConfig()) -> FastAPI:
    app = FastAPI(title="p2 optimizer service", version="1", docs_url=None, redoc_url=None,
                  description="Jobs, plans, telemetry and the P² explorer of one optimizer service. "
                  "Mutations need the service's token as 'Authorization: Bearer TOKEN'.")
    app.state.core = core
    app.state.access = Access(config.token, config.public)
    app.state.limits = config.limits
    app.state.charts = charts_available()
    app.state.explore_lock = asyncio.Lock()
    app.include_router(api.router)
    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Swagger UI from the files the setup fetched (no CDN); the bare OpenAPI JSON without them."""
        if not (VENDOR / "swagger-ui-bundle.js").is_file():
            return HTMLResponse('<p>The API is described at <a href="/openapi.json">/openapi.json</a> (run '
                                "scripts/setup.sh for the Swagger UI page).</p>")
        return get_swagger_ui_html(openapi_url="/openapi.json", title="p2 optimizer service API",
                                   swagger_js_url="/static/vendor/swagger-ui-bundle.js",
                                   swagger_css_url="/static/vendor/swagger-ui.css",
                                   swagger_favicon_url="/static/favicon.svg")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response((STATIC / "favicon.svg").read_bytes(), media_type="image/svg+xml")

    @app.get("/healthz", response_class=PlainTextResponse, summary="Liveness: 'ok' while the service runs")
    async def healthz() -> str:
        return "ok"

    @app.get("/metrics", summary="Prometheus metrics of the service and its jobs")
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
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return response

    _install_errors(app)
    return app


#: The gRPC status the service gives an error (service/errors_map.py, the one mapping) as an HTTP status.
HTTP_STATUS = {grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.FAILED_PRECONDITION: 409,
               grpc.StatusCode.ABORTED: 409, grpc.StatusCode.UNAVAILABLE: 503,
               grpc.StatusCode.INVALID_ARGUMENT: 422}


def _status(error: Exception) -> int:
    if isinstance(error, AuthError):
        return error.status
    if isinstance(error, api.BusyError):
        return 429
    return HTTP_STATUS.get(status_of(error), 500)


def _install_errors(app: FastAPI) -> None:
    def answer(request: Request, status: int, message: str, field: str | None = None):
        message = " ".join(message.split())
        if request.url.path.startswith("/api/") or request.url.path == "/metrics":
            body = {"error": message} | ({"field": field} if field else {})
            return JSONResponse(body, status_code=status)
        html = pages.templates.get_template("error.html").render(
            request=request, title=f"{status}", status=status, message=message, field=field, charts=False,
            writable=False)
        return HTMLResponse(html, status_code=status)

    @app.exception_handler(AuthError)
    @app.exception_handler(InvalidInputError)
    @app.exception_handler(StoreError)
    async def known(request: Request, error: Exception):
        field = error.field if isinstance(error, RequestError) else None
        return answer(request, _status(error), str(error), field)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError):
        first = error.errors()[0] if error.errors() else {}
        where = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path", "form")]
        field = ".".join(where) or None
        return answer(request, 422, f"{field or 'request'}: {first.get('msg', 'invalid')}", field)

    @app.exception_handler(404)
    async def not_found(request: Request, error: Exception):
        return answer(request, 404, f"no page {request.url.path}; the jobs are at /, the API at /docs")
