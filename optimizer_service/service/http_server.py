"""The dashboard's listener: binding its socket, TLS, a cap on open connections, uvicorn on the loop.

The dashboard shares its process and event loop with the gRPC server and the store, so what an
HTTP client can hold is what the whole service loses: each open connection is a file descriptor
(issue 30, item 3: idle sockets ran the process out of them; gRPC health and ``p2 jobs list``
failed). :class:`DashboardServer` therefore accepts connections itself instead of leaving that to
``loop.create_server``:

* at most :meth:`HttpLimits.connection_cap` connections are open at once, counted from the moment
  one is accepted (a TLS handshake in progress holds a descriptor as much as a served request). A
  connection over the cap is refused at once: a minimal 503 (plain HTTP) and closed. The cap
  defaults to a quarter of the process' descriptor limit, leaving the rest to gRPC and the store;
* a TLS handshake must finish within the header timeout; each connection then runs
  :class:`~optimizer_service.service.http_protocol.GuardedH11Protocol` (header and idle deadlines);
* with ``--tls-cert``/``--tls-key`` the dashboard speaks HTTPS with gRPC's certificate, and with
  ``--tls-ca`` it requires client certificates signed by that CA, as gRPC does.

uvicorn (imported when the dashboard starts, not with this module: every ``p2`` verb imports the
service's configuration) still runs the requests, its date header and its graceful shutdown.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optimizer_service.errors import InvalidInputError
from optimizer_service.service.exposure import is_loopback, is_wildcard
from optimizer_service.wire.credentials import AuthSetupError

if TYPE_CHECKING:
    from optimizer_service.service.http_protocol import DropLog

log = logging.getLogger("p2.service")

#: Bounds of the derived connection cap: a dashboard needs few, a tiny descriptor limit still some.
MIN_CONNECTIONS, MAX_CONNECTIONS = 16, 1024
#: The answer to a connection over the cap (plain HTTP; a TLS client gets the connection closed).
BUSY_ANSWER = (b'HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n'
               b'connection: close\r\ncontent-length: 72\r\n\r\n'
               b'{"error": "the dashboard has too many open connections; retry shortly"}')
#: accept() failing for want of descriptors or memory: wait before trying again, not spin.
RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_RETRY_SECONDS = 0.5
#: accept() failing for one connection only (accept(2): treat like EAGAIN); anything else is the listener's end.
CLIENT_ERRORS = (errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.EINTR, errno.EAGAIN, errno.ENETDOWN,
                 errno.ENOPROTOOPT, errno.EHOSTDOWN, errno.ENONET, errno.EHOSTUNREACH, errno.EOPNOTSUPP,
                 errno.ENETUNREACH)
#: The listen queue (uvicorn's default): connections the kernel holds until they are accepted.
BACKLOG = 2048


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP client may hold (P2_HTTP_MAX_CONNECTIONS, P2_HTTP_HEADER_TIMEOUT, P2_HTTP_IDLE_TIMEOUT)."""

    max_connections: int | None = None  # None: a quarter of RLIMIT_NOFILE, within 16..1024
    header_timeout: float = 10.0        # seconds to a complete request head (from accept, or the last answer)
    idle_timeout: float = 5.0           # seconds a client may stay silent while the service waits on it

    def connection_cap(self) -> int:
        """The cap on open connections; read when the dashboard starts, from the limit it runs under."""
        if self.max_connections is not None:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = 4 * MAX_CONNECTIONS
        return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, soft // 4))


def split_address(address: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as a pair; one line naming ``flag`` when it is not one."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInputError(f"{flag} {address!r} is not HOST:PORT (e.g. 127.0.0.1:8080; port 0 picks a free one)")
    return host, int(port)


def bind(address: str, fallback: bool) -> tuple[socket.socket, str]:
    """The dashboard's listening socket on ``address`` (``--http``), and a note to log once serving
    (empty unless ``fallback`` took a free port because the given one is in use)."""
    host, port = split_address(address, "--http")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    note = ""
    try:
        try:
            sock = socket.create_server((host, port), family=family)
        except OSError as error:
            if not (fallback and error.errno == errno.EADDRINUSE):
                raise
            sock = socket.create_server((host, 0), family=family)
            note = f"service: port {port} is in use; the dashboard takes port {sock.getsockname()[1]} (--http sets one)"
    except OSError as error:
        reason = (error.strerror or str(error)).split(" (while attempting")[0]
        raise InvalidInputError(f"cannot serve the dashboard on {address}: {reason}; give another "
                                "address with --http HOST:PORT (port 0 picks a free one)") from None
    return sock, note


def server_ssl_context(cert: str | None, key: str | None, ca: str | None) -> ssl.SSLContext | None:
    """The dashboard's TLS from gRPC's PEM files (``None`` without a certificate); client
    certificates signed by ``ca`` required when it is given (mutual TLS)."""
    if not cert and not key and not ca:
        return None
    if not cert or not key:
        raise AuthSetupError("TLS needs both --tls-cert and --tls-key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        if ca:
            context.load_verify_locations(cafile=ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as error:
        reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or str(error)
        raise AuthSetupError(f"cannot use the TLS files --tls-cert {cert} --tls-key {key}"
                             f"{f' --tls-ca {ca}' if ca else ''} for the dashboard: {reason}") from None
    return context


def _with_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def dashboard_url(sock: socket.socket, tls: bool) -> str:
    host, port = sock.getsockname()[:2]
    return f"{'https' if tls else 'http'}://{_with_port('localhost' if is_wildcard(host) else host, port)}/"


def allowed_hosts(sock: socket.socket) -> tuple[str, ...]:
    """The ``Host`` values a browser uses for the bound address (``HOST:PORT``): the address itself,
    plus localhost, 127.0.0.1 and [::1] when it is a loopback or wildcard address, plus this
    machine's name when it is a wildcard one. The dashboard refuses other hosts (DNS rebinding)."""
    host, port = sock.getsockname()[:2]
    names = [host]
    if is_loopback(host) or is_wildcard(host):
        names += ["localhost", "127.0.0.1", "::1"]
    if is_wildcard(host):
        names.append(socket.gethostname())
    return tuple(dict.fromkeys(_with_port(name, port) for name in names if not is_wildcard(name)))


class DashboardServer:
    """Serves ``app`` on the bound socket ``sock`` (see the module): :meth:`start`, then :meth:`stop`."""

    def __init__(self, app: Any, sock: socket.socket, limits: HttpLimits = HttpLimits(),
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._app, self._socket, self._limits, self._ssl = app, sock, limits, ssl_context
        self.cap = limits.connection_cap()
        self._open: set[socket.socket] = set()      # accepted and not yet closed (handshakes included)
        self._handshakes: set[asyncio.Task] = set()
        self._tasks: list[asyncio.Task] = []
        self._server: Any = None                    # the uvicorn.Server that runs requests
        self.drops: DropLog | None = None

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def start(self) -> None:
        import uvicorn

        from optimizer_service.service.http_protocol import DropLog, GuardedH11Protocol

        # Accepted sockets inherit TCP_NODELAY on Linux; without it a small answer written as head and
        # body waits ~40 ms for the client's delayed ACK (asyncio sets it only on sockets made as IPPROTO_TCP).
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.listen(BACKLOG)        # waiting in the kernel's queue costs the process no descriptor
        self._socket.setblocking(False)
        # ws="none": an Upgrade would hand the socket to a protocol without these deadlines.
        config = uvicorn.Config(self._app, http=GuardedH11Protocol, ws="none", lifespan="off", log_level="warning",
                                access_log=False, timeout_graceful_shutdown=1,
                                timeout_keep_alive=self._limits.idle_timeout)  # type: ignore[arg-type] (floats work)
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        server.servers = []                 # the listener is ours (below), not an asyncio.Server
        server.started = True
        self._server, self._protocol_class, self.drops = server, GuardedH11Protocol, DropLog()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(server.main_loop(), name="dashboard-ticks"),
                       loop.create_task(self._accept(), name="dashboard-accept")]

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.should_exit = True
        self._tasks[1].cancel()
        for task in self._handshakes:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._handshakes, return_exceptions=True)
        self._socket.close()
        await server.shutdown()

    # ------------------------------------------------------------------ accepting
    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(self._socket)
            except OSError as error:
                if error.errno in RESOURCE_ERRORS:
                    self.drops.note("accept", f"cannot accept connections: {error.strerror} (other parts of the "
                                    "process hold the descriptors; lower P2_HTTP_MAX_CONNECTIONS)")
                    await asyncio.sleep(ACCEPT_RETRY_SECONDS)
                    continue
                if error.errno in CLIENT_ERRORS:
                    continue                # that client is gone, or the network refused it: the next one
                log.error("service: the dashboard stops accepting connections: %s", error)
                raise
            if len(self._open) >= self.cap:
                self._refuse(conn)
                continue
            self._open.add(conn)
            task = loop.create_task(self._connect(conn, loop.time()))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _refuse(self, conn: socket.socket) -> None:
        self.drops.note("over-cap", f"{self.cap} connections are open, the most allowed "
                        "(P2_HTTP_MAX_CONNECTIONS); refusing more until some close")
        if self._ssl is None:
            try:
                conn.send(BUSY_ANSWER)
            except OSError:
                pass
        conn.close()

    async def _connect(self, conn: socket.socket, accepted_at: float) -> None:
        """Hands ``conn`` to a protocol (after the TLS handshake, if any); its place under the cap is
        given back when the protocol loses the connection, or here if it never gets it."""
        loop = asyncio.get_running_loop()
        server = self._server

        def release() -> None:
            self._open.discard(conn)

        def protocol() -> asyncio.Protocol:
            return self._protocol_class(server.config, server.server_state, server.lifespan.state,
                                        limits=self._limits, drops=self.drops, accepted_at=accepted_at,
                                        release=release)

        try:
            await loop.connect_accepted_socket(
                protocol, conn, ssl=self._ssl,
                ssl_handshake_timeout=self._limits.header_timeout if self._ssl is not None else None)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as error:
            if self._ssl is not None:
                self.drops.note("tls", f"closing connections whose TLS handshake fails or takes more than "
                                f"{self._limits.header_timeout:g} s (first: {type(error).__name__}: {error})")
            release()
            conn.close()
        except asyncio.CancelledError:
            release()
            conn.close()
            raise
