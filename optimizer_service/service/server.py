"""The gRPC server (the two servicers, health, reflection, auth, limits) and,
on its own port, the HTTP dashboard with ``/metrics`` (served by :mod:`.http_server`)
— one process, one event loop, one service core.

:class:`Service` builds everything from a :class:`ServiceConfig` value and
starts I/O only in :meth:`Service.start` (which returns the bound port, so
tests listen on port 0; :attr:`Service.http_port` is the dashboard's).
``p2 serve`` runs :func:`serve`, which stops cleanly on SIGTERM or SIGINT: it
stops taking calls, closes the ranks' streams and the store, whose every write
was already durable.

A service listens first (:meth:`Service.listen`: health checks answer, every
other call is refused as a standby's; the dashboard serves ``/metrics`` and
``/healthz`` only, :mod:`optimizer_service.dashboard.standby`) and decides only
once it leads (:meth:`Service.lead`, :mod:`.leadership`): at once on SQLite or on
a Redis store no other service leads; on Redis with a leader, when its lease expires.
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
from optimizer_service.service.auth import TokenInterceptor, read_token, server_credentials
from optimizer_service.service.core import ServiceCore
from optimizer_service.service.exposure import exposure_warning, listen_host
from optimizer_service.service.grpc_guard import RequestGuard
from optimizer_service.service.http_server import (
    DashboardServer,
    HttpLimits,
    allowed_hosts,
    bind,
    dashboard_url,
    server_ssl_context,
)
from optimizer_service.service.leader_gate import LeaderGate
from optimizer_service.service.leadership import Leadership, LeaseTiming, leadership_for
from optimizer_service.service.link_servicer import EnforcerLinkServicer
from optimizer_service.service.replanning import ReplanConfig
from optimizer_service.service.request_metrics import RequestMetricsInterceptor
from optimizer_service.service.store.url import open_store
from optimizer_service.service.token_source import DEFAULT_GRACE_SECONDS, TokenSource
from optimizer_service.wire.channel import MESSAGE_OPTIONS, SERVER_MIN_PING_INTERVAL_MS
from p2.v1 import enforcer_link_pb2, enforcer_link_pb2_grpc, optimizer_pb2, optimizer_pb2_grpc

log = logging.getLogger("p2.service")
HANDSHAKE_TIMEOUT_MS = 10_000
#: The health service name that is SERVING on every live service, standby or leader (a liveness probe's);
#: "" and the API's names are SERVING on the leader only (a readiness probe's).
LIVENESS = "liveness"

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
    token_file: Path | None = None          # where the token came from: re-read when it changes (rotation)
    token_grace: float = DEFAULT_GRACE_SECONDS  # the previous token's grace after a rotation (P2_TOKEN_GRACE_SECONDS)
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
    advertise: str | None = None            # the address clients reach this service at (P2_ADVERTISE)
    lease: LeaseTiming = LeaseTiming()      # the leadership lease on Redis (P2_LEASE_*)


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
        self._http_said = False
        self._dashboard: DashboardServer | None = None
        self._http_socket: socket.socket | None = None
        self._credentials = None
        #: The token callers must show, re-read from its file when that changes (None: no token).
        self.tokens = None if config.token is None else TokenSource(
            config.token, config.token_file, read_token, grace=config.token_grace)
        self.address = ""                                   # as clients reach it (--advertise)
        self.leadership: Leadership | None = None
        self._led = False                                   # the core started with the leader's epoch
        self._keeper: asyncio.Task | None = None

    async def start(self) -> int:
        """Listen and lead (waiting as a standby while another service leads); the gRPC port."""
        await self.listen()
        await self.lead()
        return self.port

    async def listen(self) -> int:
        """Bind and serve gRPC as a standby (health checks answer; every other call is refused, naming
        the leader), and the dashboard (``/metrics`` and ``/healthz``; the rest refused, naming the
        leader); the bound port. Nothing of the store is touched but the single-writer guard."""
        credentials = server_credentials(self.config.tls_cert, self.config.tls_key, self.config.tls_ca)
        self._credentials = credentials
        # The dashboard speaks TLS with gRPC's certificate; its socket first: a bad --http touches no store.
        self._http_tls = server_ssl_context(self.config.tls_cert, self.config.tls_key, self.config.tls_ca)
        if self.config.http_fd is not None:
            self._http_socket = socket.socket(fileno=self.config.http_fd)
        elif self.config.http:
            self._http_socket, self._http_note = bind(self.config.http, self.config.http_fallback)
        # Outermost first: count every call; refuse one without the token from its metadata alone (before
        # grpc reads its body); a standby refuses the rest, naming the leader; then each request message's
        # size checked and decoded by the guard.
        interceptors = [RequestMetricsInterceptor(self.metrics)]
        interceptors += [TokenInterceptor(self.tokens)] if self.tokens is not None else []
        interceptors += [LeaderGate(self._leader_status), RequestGuard()]
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
            await self._stop_http()
            raise InvalidInputError(f"cannot listen on {self.config.listen}: {error}") from None
        if self.port == 0:
            await self._stop_http()
            raise InvalidInputError(f"cannot listen on {self.config.listen}: the address is in use or not local; "
                                    "give another with --listen HOST:PORT")
        self.address = self.config.advertise or advertised(self.config.listen, self.port)
        try:
            self.leadership = leadership_for(self.config.store_url, self.config.default_store_path, self.address,
                                             self.config.lease)
        except BaseException:
            await self._stop_http()
            raise
        self.leadership.on_standby = self._say_http
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.health.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)
        await self.server.start()
        if self._http_socket is not None:
            try:
                await self._start_http()
            except BaseException:
                await self._abandon()
                raise
        return self.port

    def _leader_status(self) -> tuple[bool, str | None]:
        leadership = self.leadership
        return (False, None) if leadership is None else (leadership.leading and self._led, leadership.leader)

    async def lead(self) -> None:
        """Wait for the leadership (as a standby while another service holds it), then recover the
        store's jobs with the leader's epoch and answer every call, on the dashboard too."""
        credentials = self._credentials
        try:
            epoch = await self.leadership.acquire()
            await self.core.start(epoch)
        except BaseException:
            await self._abandon()
            raise
        self._led = True
        self.metrics.on_leading(True)
        self._say_http()
        self._keeper = asyncio.get_running_loop().create_task(self.leadership.keep())
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("service: listening on %s (port %d, as %s)%s%s", self.config.listen, self.port, self.address,
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
        """A start that failed once gRPC served: gRPC stops, the core (started or not) stops, the lease
        or the SQLite guard's lock goes after the core's last write (as in :meth:`stop`), and the
        dashboard (a standby's serves since :meth:`listen`) with its socket."""
        await self.server.stop(0)
        await self.core.stop()
        await self.leadership.release()
        await self._stop_http()

    async def _start_http(self) -> None:
        """The dashboard on ``config.http`` (or the inherited socket ``config.http_fd``), served on this
        event loop with its connections capped and timed (:mod:`.http_server`)."""
        from optimizer_service.dashboard.app import DashboardConfig, create_app

        sock = self._http_socket
        self.http_port = sock.getsockname()[1]
        self.http_url = dashboard_url(sock, tls=self._http_tls is not None)
        app = create_app(self.core, DashboardConfig(token=self.config.token, tokens=self.tokens,
                                                    public=self.config.dashboard_public,
                                                    limits=self.config.limits, tls=self._http_tls is not None,
                                                    allowed_hosts=allowed_hosts(sock) + self.config.dashboard_hosts),
                         role=self._leader_status)
        self._dashboard = DashboardServer(app, sock, self.config.http_limits, self._http_tls)
        await self._dashboard.start()

    def _say_http(self) -> None:
        """Log where the dashboard is, once the service runs: as a standby (the store answered) or
        the leader; not before, so a start that fails (the store down) says its one line only."""
        if self._dashboard is None or self._http_said:
            return
        self._http_said = True
        if self._http_note:
            log.warning("%s", self._http_note)
        log.info("service: dashboard on %s (at most %d connections%s)", self.http_url, self._dashboard.cap,
                 "" if self._led else "; a standby's: /metrics and /healthz until it leads")

    async def _stop_http(self) -> None:
        """Stop the dashboard if it serves, and close its socket, served or only bound."""
        if self._dashboard is not None:
            await self._dashboard.stop()            # it closes the socket
            self._dashboard = None
        if self._http_socket is not None:
            self._http_socket.close()
            self._http_socket = None

    async def stop(self, grace: float = 2.0) -> None:
        """Stop everything that was started, whether or not the service ever led."""
        await self.health.enter_graceful_shutdown()
        if self._keeper is not None:
            self._keeper.cancel()
        self.metrics.on_leading(False)
        await self._stop_http()                         # a standby's too: it serves since listen()
        if self.server is not None:
            stopping = self.server.stop(grace)
            for job in self.core.jobs.values():       # end the ranks' streams so the grace period is not waited out
                for session in list(job.sessions.values()):
                    session.close()
            await stopping
        await self.core.stop()
        if self.leadership is not None:                # after the store's last write: a standby may take over
            await self.leadership.release()


async def serve(config: ServiceConfig, ready: Callable[[Service], None] | None = None) -> None:
    """Run the service until SIGTERM or SIGINT, or until it stops leading: a newer
    service took its store over (then it raises the :class:`StoreFencedError`), or
    its lease could not be renewed in time (:class:`LeadershipLostError`), after stopping.
    ``ready`` is called once it leads; a standby waits for that (or a signal)."""
    service = Service(config)
    await service.listen()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    signalled = loop.create_task(stop.wait())
    leading = loop.create_task(service.lead())
    await asyncio.wait((signalled, leading), return_when=asyncio.FIRST_COMPLETED)
    if not leading.done():
        leading.cancel()
        await asyncio.gather(leading, return_exceptions=True)
        log.info("service: stopping (a standby)")
        await service.stop()
        return
    leading.result()
    if ready is not None:
        ready(service)
    ended = (signalled, loop.create_task(service.core.fenced.wait()), loop.create_task(service.leadership.lost.wait()))
    await asyncio.wait(ended, return_when=asyncio.FIRST_COMPLETED)
    for task in ended:
        task.cancel()
    log.info("service: stopping")
    await service.stop()
    if service.core.fenced_by is not None:
        raise service.core.fenced_by
    if service.leadership.lost_by is not None:
        raise service.leadership.lost_by


def advertised(listen: str, port: int) -> str:
    """The address clients are told to reach this service at when no --advertise is given: the
    listening host, or this machine's name where it listens on every interface."""
    host = listen.rsplit(":", 1)[0].strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
