"""The transport of a rank's link: one ``p2.v1.EnforcerLink/Connect`` stream, kept open, and its outbox.

A daemon thread keeps one bidirectional stream to the service open
(ARCHITECTURE.md, "Protocol between the planes"). Every stream opens with the
peer's hello (``Register``, :mod:`.identity`) and counts as connected once the
service answers ``Registered``; every other message from the service goes to
the peer (:class:`Peer`). What the messages mean is the peer's business: the
stream knows nothing of the two-phase commit.

The outbox has two lanes: control messages (:meth:`Stream.send`: votes, acks,
trace chunks), sent first and dropped when a stream ends — ``Register`` on the
next one tells the service what the rank holds, and it re-sends the rest — and
telemetry (:meth:`Stream.send_telemetry`), built when sent and kept in a
bounded queue that drops the oldest entry when full, so the training thread
never waits for it. Telemetry goes out ``P2_TELEMETRY_EVERY`` iterations at a
time (default 4), or once the oldest queued iteration has waited
:data:`TELEMETRY_FLUSH` seconds (looked at twice a second: a job that pauses or
ends still reports its last iterations). Each send wakes the sender thread and
gRPC's on the ranks' cores: attached, the DDP example's plan on the emulated
cluster (8 ranks on 2 cores) ran about 6 % slower than not attached when every
iteration was sent at once, about 4 % with every fourth; the service hears an
iteration up to 3 iterations later.

**A service that is down, slow or refuses the rank costs nothing but a log
line**: one per outage (not per retry); the stream reconnects with backoff —
0.5 s doubling to 30 s, with jitter (:func:`backoff`). With several addresses
(``P2_SERVICE=a:50051,b:50051``: a leader and its standbys) it tries them in
turn and goes at once to the leader a standby names
(:class:`~optimizer_service.wire.leader.Targets`). The backoff grows only when
a whole round of addresses failed with no service answering; while a standby
answers (a leader's lease is passing to it), a round is tried again every
:data:`STANDBY_ROUND` seconds, so ranks re-register within a second of a new
leader taking over. Each attempt opens a
fresh channel, so gRPC's own reconnect backoff (up to minutes) does not
stretch ours. The TLS credentials are read once, the token file on every
stream (so a rotated token is taken at the next reconnect; a file that cannot be
read then keeps the last token), through the contract :mod:`optimizer_service.wire`.

Threads: the stream thread (opens streams, reads the service's messages, hands
them to the peer), gRPC's request consumer (drains :meth:`Stream._requests`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import grpc

from enforcer.link.identity import RankIdentity
from enforcer.settings import MAX_TELEMETRY_EVERY, EnforcerSettings
from optimizer_service.wire.channel import RANK_OPTIONS, open_channel
from optimizer_service.wire.credentials import VARIABLE_NAMES, AuthSetupError, bearer, channel_credentials, read_token
from optimizer_service.wire.leader import Targets, from_standby, parse_addresses
from p2.v1 import enforcer_link_pb2 as link_pb2
from p2.v1 import enforcer_link_pb2_grpc

log = logging.getLogger("enforcer")

BACKOFF_FIRST = 0.5             # seconds before the first reconnect ...
BACKOFF_MAX = 30.0              # ... doubling up to this
TELEMETRY_QUEUE = 2 * MAX_TELEMETRY_EVERY  # iterations of telemetry kept while the stream is slow or down
TELEMETRY_FLUSH = 1.0           # seconds the oldest queued iteration's telemetry waits for the rest at most
HISTORY = 256                   # messages in and out the stream remembers
NEXT_ADDRESS = 0.2              # seconds before trying the next of several addresses, or a named leader
STANDBY_ROUND = 1.0             # seconds between rounds while a standby answers


def backoff(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Seconds before reconnect ``attempt`` (0 after a stream that registered):
    0.5 s doubling to 30 s, times a jitter of 0.75-1.25 (never above 30 s), so
    the ranks of a job do not all knock at the same moment."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(attempt, 16) * (0.75 + 0.5 * rng()))


class Peer(Protocol):
    """The rank's side of the conversation, as the stream needs it."""

    def hello(self) -> link_pb2.RankMessage:
        """The first message of every stream (``Register``)."""
        ...

    def receive(self, message: link_pb2.ServiceMessage) -> None:
        """A message from the service other than ``Registered`` (on the stream thread)."""
        ...

    def running(self) -> int:
        """The plan version the rank runs (the outage's log line names it)."""
        ...


class Stream:
    """One rank's stream to the service: the thread that keeps it open, its outbox, its history.

    Built from values; :meth:`start` starts the I/O. ``identity`` names the rank
    in the log; ``iteration`` gives its iteration for the history's entries.
    """

    def __init__(self, settings: EnforcerSettings, identity: RankIdentity, peer: Peer, iteration: Callable[[], int],
                 rng: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self.identity = identity
        self.rank = identity.rank
        self.peer = peer
        # messages in and out, newest last: "it 12: got Commit(job v3 e1 switch@20)"
        self.history: deque[str] = deque(maxlen=HISTORY)
        self.attempts = 0                                # streams opened so far
        self.connected = False                           # registered on the current stream
        self.telemetry_dropped = 0
        self._iteration = iteration
        self._rng = rng
        self._cond = threading.Condition()               # the outbox
        self._control: deque[link_pb2.RankMessage] = deque()
        self._telemetry: deque[Callable[[], link_pb2.RankMessage]] = deque(maxlen=TELEMETRY_QUEUE)
        self._telemetry_since: float | None = None       # when the oldest unsent telemetry was queued
        self._draining = False                           # telemetry is due: send until the queue is empty
        self._generation = 0                             # changes whenever a stream starts or ends
        self._closed = threading.Event()
        self._call = None
        self._thread: threading.Thread | None = None
        self._out = False                                # an outage was logged and has not ended
        self.targets = Targets(parse_addresses(settings.service or "", "P2_SERVICE"))

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Stream:
        self._thread = threading.Thread(target=self._run, name="p2enforcer-link", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Cancel the stream and stop the thread (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        call = self._call
        if call is not None:
            call.cancel()
        with self._cond:
            self._generation += 1
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # --------------------------------------------------------------- outbox
    def send(self, message: link_pb2.RankMessage, text: str) -> None:
        """Send a control message on the current stream (``text`` names it in the history)."""
        self.note(f"sent {text}")
        log.debug("p2enforcer: rank %d sends %s", self.rank, text)
        with self._cond:
            self._control.append(message)
            self._cond.notify_all()

    def send_telemetry(self, build: Callable[[], link_pb2.RankMessage]) -> None:
        """Queue the message ``build`` makes when it is sent (never blocks; the oldest
        is dropped when the queue is full)."""
        with self._cond:
            if len(self._telemetry) == TELEMETRY_QUEUE:
                self.telemetry_dropped += 1
            self._telemetry.append(build)
            if self._telemetry_since is None:
                self._telemetry_since = time.monotonic()
            if len(self._telemetry) >= self.settings.telemetry_every:
                self._cond.notify_all()

    def note(self, text: str) -> None:
        """Remember a message in or out, with the rank's iteration."""
        self.history.append(f"it {self._iteration()}: {text}")

    def _requests(self, generation: int):
        """What one stream sends: the hello, then control messages first, telemetry when it is
        due and there are none; ends when the stream does."""
        yield self.peer.hello()
        while True:
            with self._cond:
                while self._generation == generation and not self._control and not self._telemetry_due():
                    self._cond.wait(self._flush_in())
                if self._generation != generation:
                    return
                message = self._control.popleft() if self._control else None
                build = None if message is not None else self._telemetry.popleft()
                if not self._telemetry:
                    self._telemetry_since, self._draining = None, False
            yield message if message is not None else build()

    def _telemetry_due(self) -> bool:
        """Whether queued telemetry goes out now: ``telemetry_every`` iterations are queued, or the
        oldest has waited :data:`TELEMETRY_FLUSH` seconds; then all of it (under ``_cond``)."""
        if not self._telemetry:
            return False
        if not self._draining:
            self._draining = (len(self._telemetry) >= self.settings.telemetry_every
                              or time.monotonic() - self._telemetry_since >= TELEMETRY_FLUSH)
        return self._draining

    def _flush_in(self) -> float:
        """Seconds to wait before looking again (under ``_cond``): until the oldest queued telemetry
        is due, or half :data:`TELEMETRY_FLUSH` while none is queued (the first queued iteration
        does not wake the sender, so it waits at most 1.5 × TELEMETRY_FLUSH)."""
        if self._telemetry_since is None:
            return TELEMETRY_FLUSH / 2
        return max(0.0, self._telemetry_since + TELEMETRY_FLUSH - time.monotonic())

    # --------------------------------------------------------------- stream
    def _run(self) -> None:
        try:
            credentials, metadata = self._connection_setup()
        except AuthSetupError as error:
            log.error("p2enforcer: rank %d cannot link to the optimizer service at %s: %s; training goes on "
                      "without it", self.rank, self.settings.service, error)
            return
        log.info("p2enforcer: rank %d links to the optimizer service at %s as job %s (plans switch every %d "
                 "iterations)", self.rank, self.settings.service, self.identity.job, self.identity.switch_every)
        attempt, tried, standby = 0, 0, False
        while not self._closed.is_set():
            self.attempts += 1
            target = self.targets.current
            metadata = self._metadata(metadata)
            why, registered, error = self._one_stream(credentials, metadata)
            if self._closed.is_set():
                return
            if registered:
                attempt, tried, standby = 0, 0, False
            standby = standby or from_standby(error)
            if not self._out:
                self._out = True
                log.warning("p2enforcer: rank %d %s the optimizer service at %s (%s); training goes on with "
                            "plan v%d, reconnecting in the background", self.rank,
                            "lost" if registered else "cannot reach", target, why, self.peer.running())
            else:
                log.debug("p2enforcer: rank %d: attempt %d to reach %s failed: %s", self.rank,
                          self.attempts, target, why)
            tried += 1
            if self.targets.failed(error) or tried < len(self.targets.addresses):
                self._closed.wait(NEXT_ADDRESS)         # a named leader, or the round's next address
                continue
            if standby:                                 # a service is there: the lease passes within seconds
                self._closed.wait(STANDBY_ROUND)
            else:
                self._closed.wait(backoff(attempt, self._rng))
                attempt += 1
            tried, standby = 0, False

    def _connection_setup(self) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, str]]]:
        """TLS credentials (None: plaintext) and the call metadata, from the files named in the settings
        (the token file wins over ``P2_TOKEN``)."""
        settings = self.settings
        token = read_token(settings.token_file, VARIABLE_NAMES) if settings.token_file else settings.token
        credentials = channel_credentials(settings.tls_ca, settings.tls_cert, settings.tls_key, VARIABLE_NAMES)
        return credentials, bearer(token)

    def _metadata(self, last: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The call metadata with the token file's token as it is now (``last`` if it cannot be read)."""
        if not self.settings.token_file:
            return last
        try:
            return bearer(read_token(self.settings.token_file, VARIABLE_NAMES))
        except AuthSetupError as error:
            log.debug("p2enforcer: rank %d keeps its token: %s", self.rank, error)
            return last

    def _one_stream(self, credentials, metadata) -> tuple[str, bool, grpc.RpcError | None]:
        """Open a stream to the current target and serve it until it ends: why it ended, whether it
        registered, and the error that ended it (a standby's names the leader)."""
        channel = open_channel(self.targets.current, credentials, self.targets.options(RANK_OPTIONS))
        registered = False
        try:
            with self._cond:
                self._generation += 1
                generation = self._generation
                self._control.clear()        # Register tells the service what this rank holds; it re-sends the rest
            call = enforcer_link_pb2_grpc.EnforcerLinkStub(channel).Connect(self._requests(generation),
                                                                             metadata=metadata)
            self._call = call
            if self._closed.is_set():
                call.cancel()
            try:
                for message in call:
                    registered = self._receive(message) or registered
                return "the service ended the stream", registered, None
            except grpc.RpcError as error:
                return _one_line(error), registered, error
            except Exception as error:  # noqa: BLE001 — a bug here must not end the stream thread
                log.exception("p2enforcer: rank %d: handling a message from the service failed", self.rank)
                call.cancel()
                return f"{type(error).__name__}: {error}".splitlines()[0], registered, None
        finally:
            self._call = None
            self.connected = False
            with self._cond:
                self._generation += 1
                self._cond.notify_all()
            channel.close()

    def _receive(self, message: link_pb2.ServiceMessage) -> bool:
        """Handle one message from the service; True when it is ``Registered``."""
        if message.WhichOneof("body") != "registered":
            self.peer.receive(message)
            return False
        registered = message.registered
        self.note(f"got Registered(e{registered.epoch} committed v{registered.committed_version})")
        self.connected = True
        if self._out:
            self._out = False
            log.warning("p2enforcer: rank %d reconnected to the optimizer service at %s (epoch %d)", self.rank,
                        self.targets.current, registered.epoch)
        else:
            log.info("p2enforcer: rank %d registered with the optimizer service at %s (epoch %d)",
                     self.rank, self.targets.current, registered.epoch)
        return True


def _one_line(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else None
    details = " ".join(((error.details() if hasattr(error, "details") else "") or "").split())
    return f"{code.name if code is not None else 'error'}: {details}" if details else str(code)
