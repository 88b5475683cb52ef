"""One dashboard connection: uvicorn's HTTP/1.1 (h11) protocol with deadlines.

uvicorn closes a kept-alive connection that stays silent after a response, and nothing else: a
client that never finishes its request head, sends it a byte at a time, stops in the middle of its
body or never reads its answer holds its socket, and a file descriptor, for as long as it likes. The
process also serves gRPC and holds the store, so a few hundred such sockets under a descriptor limit
of 256 stopped the whole service (issue 30, item 3). :class:`GuardedH11Protocol` gives each
connection two deadlines (:class:`~optimizer_service.service.http_server.HttpLimits`):

* **header timeout**: a complete request head must arrive within ``header_timeout`` seconds of the
  connection being accepted (a TLS handshake counts against it) or of the previous response
  finishing, however the client trickles it;
* **idle timeout**: while the service waits on the client (for a request, for more of the body, for
  it to read the answer) the client must make progress; one silent for ``idle_timeout`` seconds
  (noticed within twice that) is dropped. While the application works, nothing is counted.

A dropped connection is aborted: it has nothing worth flushing, and a client that reads nothing
would keep a graceful close waiting. How many connections may be open at all is decided before a
protocol exists, when the socket is accepted (:mod:`.http_server`). Each cause is logged once per
process by a :class:`DropLog`, never once per connection: an attacker must not be able to fill
the log (the same attack once wrote 74 MB of log lines in 8 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

if TYPE_CHECKING:
    from optimizer_service.service.http_server import HttpLimits

log = logging.getLogger("p2.service")


class DropLog:
    """Counts the connections the dashboard drops or refuses, per cause, and says each cause once."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self.counts: Counter[str] = Counter()
        self._logger = logger

    def note(self, cause: str, message: str) -> None:
        self.counts[cause] += 1
        if self.counts[cause] == 1:
            self._logger.warning("dashboard: %s (said once; later ones are only counted)", message)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and an idle deadline (see the module)."""

    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any], *,
                 limits: HttpLimits, drops: DropLog, accepted_at: float, release: Callable[[], None]) -> None:
        super().__init__(config, server_state, app_state)
        self._limits = limits
        self._drops = drops
        self._release = release            # gives the connection's place under the cap back
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._progress_at = accepted_at     # the last time the client sent, read or finished anything
        self._head_since = accepted_at      # when the wait for the current request head began

    # ------------------------------------------------------------------ uvicorn's protocol interface
    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot take (a malformed line, a head over its 16 KiB) is answered as every
        other error of the dashboard is: ``{"error", "field"}`` in one line, then the connection closes."""
        body = json.dumps({"error": f"{msg.rstrip('.')}: a malformed request line or header, or a request "
                                    "head over 16 KiB", "field": "request"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._progress_at = self.loop.time()       # a finished TLS handshake is progress too
        self._arm_head(self._head_since)
        self._arm_idle(self._limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._idle_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._idle_timer = None
        try:
            super().connection_lost(exc)
        finally:
            self._release()

    def data_received(self, data: bytes) -> None:
        self._progress_at = self.loop.time()
        super().data_received(data)
        if self._head_timer is not None and self._request_in_progress():
            self._head_timer.cancel()
            self._head_timer = None

    def on_response_complete(self) -> None:
        now = self.loop.time()
        self._progress_at = now
        super().on_response_complete()      # may start a pipelined request at once
        if not self.transport.is_closing() and not self._request_in_progress():
            self._arm_head(now)

    def resume_writing(self) -> None:
        self._progress_at = self.loop.time()    # the client read some of the answer
        super().resume_writing()

    # ------------------------------------------------------------------ the deadlines
    def _request_in_progress(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _waiting_on_client(self) -> bool:
        """Whether the service waits for the client now (and not for the application)."""
        if not self._request_in_progress():
            return True                                        # for the next request
        if self.flow.write_paused:
            return True                                        # for it to read the answer
        return self.conn.their_state is h11.SEND_BODY and not self.flow.read_paused  # for more body

    def _arm_head(self, since: float) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_since = since
        delay = max(0.0, since + self._limits.header_timeout - self.loop.time())
        self._head_timer = self.loop.call_later(delay, self._head_overdue)

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._request_in_progress():
            return
        self._drops.note("header-timeout", f"closing connections that send no complete request head within "
                         f"{self._limits.header_timeout:g} s (P2_HTTP_HEADER_TIMEOUT)")
        self.transport.abort()

    def _arm_idle(self, delay: float) -> None:
        self._idle_timer = self.loop.call_later(max(delay, 0.01), self._check_idle)

    def _check_idle(self) -> None:
        """A timer, not a deadline moved at every byte: a large body arrives in many pieces."""
        self._idle_timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if not self._waiting_on_client():
            self._progress_at = now         # the application's time is not the client's silence
        elif now - self._progress_at >= self._limits.idle_timeout:
            self._drops.note("idle-timeout", f"closing connections whose client stays silent for "
                             f"{self._limits.idle_timeout:g} s (P2_HTTP_IDLE_TIMEOUT)")
            self.transport.abort()
            return
        self._arm_idle(self._progress_at + self._limits.idle_timeout - now)
