"""The gRPC server (the two servicers, health, reflection, auth, limits) and,
on its own port, the HTTP dashboard with ``/metrics`` — one process, one
event loop, one service core.

:class:`Service` builds everything from a :class:`ServiceConfig` value and
starts I/O only in :meth:`Service.start` (which returns the bound port, so
tests listen on port 0; :attr:`Service.http_port` is the dashboard's).
``p2 serve`` runs :func:`serve`, which stops cleanly on SIGTERM or SIGINT: it
stops taking calls, closes the ranks' streams and the store, whose every write
was already durable.
"""

from __future__ import annotations

import asyncio
import errno
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
from optimizer_service.service.link_servicer import EnforcerLinkServicer
from optimizer_service.service.replanning import ReplanConfig
from optimizer_service.service.request_metrics import RequestMetricsInterceptor
from optimizer_service.service.requests import MAX_MESSAGE_BYTES
from optimizer_service.service.store.url import open_store
from p2.v1 import enforcer_link_pb2, enforcer_link_pb2_grpc, optimizer_pb2, optimizer_pb2_grpc

log = logging.getLogger("p2.service")

SERVICE_NAMES = (optimizer_pb2.DESCRIPTOR.services_by_name["Optimizer"].full_name,
                 enforcer_link_pb2.DESCRIPTOR.services_by_name["EnforcerLink"].full_name)
#: Keepalive pings find ranks whose host died without closing its stream.
OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
           ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
           ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
           ("grpc.keepalive_permit_without_calls", 1),
           ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
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
    limits: Limits = Limits()               # the P² explorer's bounds


class Service:
    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.metrics = ServiceMetrics()
        self.core = ServiceCore(lambda: open_store(config.store_url, default_path=config.default_store_path),
                                timing=config.timing, tick_seconds=config.tick_seconds, crash_at=config.crash_at,
                                replan=config.replan, metrics=self.metrics)
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()
        self.port = 0
        self.http_port = 0
        self.http_url = ""
        self._http_note = ""            # said once the service runs (a failed start says one line only)
        self._http = None
        self._http_task: asyncio.Task | None = None
        self._http_socket: socket.socket | None = None

    async def start(self) -> int:
        credentials = server_credentials(self.config.tls_cert, self.config.tls_key, self.config.tls_ca)
        if self.config.http_fd is not None:       # the dashboard's socket first: a bad --http touches no store
            self._http_socket = socket.socket(fileno=self.config.http_fd)
        elif self.config.http:
            self._http_socket = self._bind_http()
        await self.core.start()
        interceptors = [RequestMetricsInterceptor(self.metrics)]
        interceptors += [TokenInterceptor(self.config.token)] if self.config.token else []
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
        return self.port

    async def _abandon(self) -> None:
        """A start that failed before serving: stop the core, let the dashboard's socket go."""
        if self._http_socket is not None:
            self._http_socket.close()
            self._http_socket = None
        await self.core.stop()

    async def _start_http(self) -> None:
        """The dashboard on ``config.http`` (or the inherited socket ``config.http_fd``), served by
        uvicorn on this event loop (no signal handlers of its own)."""
        import uvicorn

        from optimizer_service.dashboard.app import DashboardConfig, create_app

        sock = self._http_socket
        # Accepted sockets inherit TCP_NODELAY on Linux; without it a small answer written as head and
        # body waits ~40 ms for the client's delayed ACK (asyncio sets it only on sockets made as IPPROTO_TCP).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        host, self.http_port = sock.getsockname()[:2]
        self.http_url = f"http://{'localhost' if host in ('0.0.0.0', '::') else host}:{self.http_port}/"
        app = create_app(self.core, DashboardConfig(token=self.config.token, public=self.config.dashboard_public,
                                                    limits=self.config.limits))
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1)
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        self._http = server
        self._http_task = asyncio.get_running_loop().create_task(server.main_loop())
        if self._http_note:
            log.warning("%s", self._http_note)
        log.info("service: dashboard on %s", self.http_url)

    def _bind_http(self) -> socket.socket:
        host, port = split_address(self.config.http, "--http")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            try:
                sock = socket.create_server((host, port), family=family)
            except OSError as error:
                if not (self.config.http_fallback and error.errno == errno.EADDRINUSE):
                    raise
                sock = socket.create_server((host, 0), family=family)
                self._http_note = (f"service: port {port} is in use; the dashboard takes port "
                                   f"{sock.getsockname()[1]} (--http sets one)")
        except OSError as error:
            reason = (error.strerror or str(error)).split(" (while attempting")[0]
            raise InvalidInputError(f"cannot serve the dashboard on {self.config.http}: {reason}; give another "
                                    "address with --http HOST:PORT (port 0 picks a free one)") from None
        return sock

    async def _stop_http(self) -> None:
        if self._http is None:
            return
        self._http.should_exit = True
        if self._http_task is not None:
            await self._http_task
        await self._http.shutdown(sockets=[self._http_socket] if self._http_socket else None)
        self._http = None

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


def split_address(address: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as a pair; one line naming ``flag`` when it is not one."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInputError(f"{flag} {address!r} is not HOST:PORT (e.g. 127.0.0.1:8080; port 0 picks a free one)")
    return host, int(port)
