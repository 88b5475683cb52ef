"""The gRPC server (the two servicers, health, reflection, auth, limits) and,
on its own port, the HTTP dashboard with ``/metrics`` (served by :mod:`.http_server`)
— one process, one event loop, one service core.

:class:`Service` builds everything from a :class:`ServiceConfig` value and
starts I/O only in :meth:`Service.start` (which returns the bound port, so
tests listen on port 0; :attr:`Service.http_port` is the dashboard's).
``p2 serve`` runs :func:`serve`, which stops cleanly on SIGTERM or SIGINT: it
stops taking calls, closes the ranks' streams and the store, whose every write
was already durable.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from optimizer_service.control.coordinator import Timing
from optimizer_service.errors import InvalidInputError
from optimizer_service.metrics import ServiceMetrics
from optimizer_service.p2.planner import Limits
from optimizer_service.service.admin_servicer import OptimizerServicer
from optimizer_service.service.auth import TokenInterceptor, server_credentials
from optimizer_service.service.core import ServiceCore
from optimizer_service.service.exposure import exposure_warning, listen_host
from optimizer_service.service.grpc_guard import RequestGuard
from optimizer_service.service.http_server import (DashboardServer, HttpLimits, allowed_hosts, bind, dashboard_url,
                                                   server_ssl_context)
from optimizer_service.service.link_servicer import EnforcerLinkServicer
from optimizer_service.service.replanning import ReplanConfig
from optimizer_service.service.request_metrics import RequestMetricsInterceptor
from optimizer_service.service.store.url import open_store
from optimizer_service.wire.channel import MESSAGE_OPTIONS, SERVER_MIN_PING_INTERVAL_MS
from p2.v1 import enforcer_link_pb2, enforcer_link_pb2_grpc, optimizer_pb2, optimizer_pb2_grpc

log = logging.getLogger("p2.service")
HANDSHAKE_TIMEOUT_MS = 10_000

SERVICE_NAMES = (optimizer_pb2.DESCRIPTOR.services_by_name["Optimizer"].full_name,
                 enforcer_link_pb2.DESCRIPTOR.services_by_name["EnforcerLink"].full_name)
#: Keepalive pings find ranks whose host died without closing its stream. The receive limit is the
#: largest any method takes (each method's own is checked by the RequestGuard); a connection that has not
#: finished its TLS handshake and HTTP/2 preface within the handshake timeout is closed (grpc's default
#: waits 120 s, holding a descriptor per idle socket).
OPTIONS = [*MESSAGE_OPTIONS,
           ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
           ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
           ("grpc.keepalive_permit_without_calls", 1),
           ("grpc.http2.min_ping_interval_without_data_ms", SERVER_MIN_PING_INTERVAL_MS),
           ("grpc.so_reuseport", 0)]


@dataclass(frozen=True)
class ServiceConfig:
    listen: str = "127.0.0.1:50051"
    store_url: str | None = None            # None: SQLite under default_store_path
    default_store_path: Path | None = None
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    timing: Timing = Timing()
    tick_seconds: float = 0.2
    crash_at: str | None = None             # fault injection for the crash tests (P2_CRASH_AT)
    replan: ReplanConfig | None = None      # None: no live replanning (plans come from operators only)
    http: str | None = None                 # the dashboard's HOST:PORT (None: no HTTP port)
    dashboard_public: bool = True           # the dashboard's pages and /metrics readable without the token
    http_fallback: bool = False             # http is only the default: when its port is taken, take a free one
    http_fd: int | None = None              # serve the dashboard on this inherited, bound socket instead
    http_limits: HttpLimits = HttpLimits()  # its connection cap, header and idle timeouts (P2_HTTP_*)
    dashboard_hosts: tuple[str, ...] = ()   # Host names it answers besides its own address (P2_DASHBOARD_HOSTS)
    limits: Limits = Limits()               # the P² explorer's bounds
    max_jobs: int = 1_000                   # most jobs the service holds (P2_MAX_JOBS)


class Service:
    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.core = ServiceCore(lambda: open_store(config.store_url, default_path=config.default_store_path),
                                timing=config.timing, tick_seconds=config.tick_seconds, crash_at=config.crash_at,
                                replan=config.replan, metrics=self.metrics, max_jobs=config.max_jobs)
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0
        self.http_port = 0
        self.http_url = ""
        self._http_note = ""            # said once the service runs (a failed start says one line only)
        self._dashboard: DashboardServer | None = None
        self._http_socket: socket.socket | None = None

    async def start(self) -> int:
        credentials = server_credentials(self.config.tls_cert, self.config.tls_key, self.config.tls_ca)
        # The dashboard speaks TLS with gRPC's certificate; its socket first: a bad --http touches no store.
        self._http_tls = server_ssl_context(self.config.tls_cert, self.config.tls_key, self.config.tls_ca)
        if self.config.http_fd is not None:
            self._http_socket = socket.socket(fileno=self.config.http_fd)
        elif self.config.http:
            self._http_socket, self._http_note = bind(self.config.http, self.config.http_fallback)
        await self.core.start()
        # Outermost first: count every call; refuse one without the token from its metadata alone (before
        # grpc reads its body); then each request message's size checked and decoded by the guard.
        interceptors = [RequestMetricsInterceptor(self.metrics)]
        interceptors += [TokenInterceptor(self.config.token)] if self.config.token else []
        interceptors += [RequestGuard()]
        self.server = grpc.aio.server(interceptors=interceptors, options=OPTIONS)
        optimizer_pb2_grpc.add_OptimizerServicer_to_server(OptimizerServicer(self.core), self.server)
        enforcer_link_pb2_grpc.add_EnforcerLinkServicer_to_server(EnforcerLinkServicer(self.core), self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self.server)
        try:
            if credentials is None:
                self.port = self.server.add_insecure_port(self.config.listen)
            else:
                self.port = self.server.add_secure_port(self.config.listen, credentials)
        except RuntimeError as error:
            await self._abandon()
            raise InvalidInputError(f"cannot listen on {self.config.listen}: {error}") from None
        if self.port == 0:
            await self._abandon()
            raise InvalidInputError(f"cannot listen on {self.config.listen}: the address is in use or not local; "
                                    "give another with --listen HOST:PORT")
        await self.server.start()
        if self._http_socket is not None:
            try:
                await self._start_http()
            except BaseException:
                await self.server.stop(0)
                await self.core.stop()
                raise
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("service: listening on %s (port %d)%s%s", self.config.listen, self.port,
                 ", TLS" if credentials else "", ", token required" if self.config.token else "")
        grpc_host = listen_host(self.config.listen)
        listeners = {} if grpc_host is None else {"gRPC": grpc_host}
        if self._http_socket is not None:
            listeners["the dashboard"] = self._http_socket.getsockname()[0]
        warning = exposure_warning(listeners, token=bool(self.config.token), tls=credentials is not None)
        if warning:
            log.warning("%s", warning)
        return self.port

    async def _abandon(self) -> None:
        """A start that failed before serving: stop the core, let the dashboard's socket go."""
        if self._http_socket is not None:
            self._http_socket.close()
            self._http_socket = None
        await self.core.stop()

    async def _start_http(self) -> None:
        """The dashboard on ``config.http`` (or the inherited socket ``config.http_fd``), served on this
        event loop with its connections capped and timed (:mod:`.http_server`)."""
        from optimizer_service.dashboard.app import DashboardConfig, create_app

        sock = self._http_socket
        self.http_port = sock.getsockname()[1]
        self.http_url = dashboard_url(sock, tls=self._http_tls is not None)
        app = create_app(self.core, DashboardConfig(token=self.config.token, public=self.config.dashboard_public,
                                                    limits=self.config.limits, tls=self._http_tls is not None,
                                                    allowed_hosts=allowed_hosts(sock) + self.config.dashboard_hosts))
        self._dashboard = DashboardServer(app, sock, self.config.http_limits, self._http_tls)
        await self._dashboard.start()
        if self._http_note:
            log.warning("%s", self._http_note)
        log.info("service: dashboard on %s (at most %d connections)", self.http_url, self._dashboard.cap)

    async def _stop_http(self) -> None:
        if self._dashboard is not None:
            await self._dashboard.stop()
            self._dashboard = None

    async def stop(self, grace: float = 2.0) -> None:
        await self.health.enter_graceful_shutdown()
        await self._stop_http()
        if self.server is not None:
            stopping = self.server.stop(grace)
            for job in self.core.jobs.values():       # end the ranks' streams so the grace period is not waited out
                for session in list(job.sessions.values()):
                    session.close()
            await stopping
        await self.core.stop()


async def serve(config: ServiceConfig, ready: Callable[[Service], None] | None = None) -> None:
    """Run the service until SIGTERM or SIGINT, or until a newer service takes
    its store over (then it raises the :class:`StoreFencedError` after stopping)."""
    service = Service(config)
    await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(service)
    signalled = loop.create_task(stop.wait())
    fenced = loop.create_task(service.core.fenced.wait())
    await asyncio.wait((signalled, fenced), return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    fenced.cancel()
    log.info("service: stopping")
    await service.stop()
    if service.core.fenced_by is not None:
        raise service.core.fenced_by
