"""A rank's link to the optimizer service: one gRPC stream, reconnecting, never in the way.

``P2_SERVICE=host:port`` makes the default ``p2enforcer`` group start a
:class:`Link` (:func:`start`): a daemon thread that keeps one bidirectional
``p2.v1.EnforcerLink/Connect`` stream open (ARCHITECTURE.md, "Protocol between
the planes"). Over it the rank

* registers first, on every (re)connect, with what it runs, which versions it
  holds committed and built, and its iteration;
* takes part in the two-phase commit: Prepare / Commit / Abort go through the
  pure participant decisions (:mod:`optimizer_service.control.participant`,
  under one short lock), and the link carries out their actions — ``Build`` on a
  builder thread (:mod:`enforcer.link.prepare`), ``Discard`` closes what was built,
  ``SendVote`` / ``SendAck`` go to the outbox;
* sends one Telemetry message per iteration (:meth:`Link.iteration_done`).

The switch to a committed plan is not the link's: the in-band check at
iteration boundaries (:mod:`enforcer.link.switching`) decides it on the training
thread, from the same participant state.

**The training never waits for the service.** The training thread only takes
the participant lock (microseconds) and appends to a bounded telemetry queue
that drops the oldest entry when full. A service that is down, slow or refuses
the rank costs nothing but a log line: one per outage (not per retry), and the
rank keeps its plan and reconnects with backoff — 0.5 s doubling to 30 s, with
jitter. Each attempt opens a fresh channel, so gRPC's own reconnect backoff
(up to minutes) does not stretch ours.

Threads: the link thread (opens streams, reads the service's messages, runs
the decisions), gRPC's request consumer (drains :meth:`Link._requests`), one
builder thread per prepared plan. Closing (the default group destroyed, or the
process exiting) cancels the stream and frees every plan not running.
"""

from __future__ import annotations

import atexit
import logging
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import grpc
import torch
from enforcer.settings import EnforcerSettings, default_job
from optimizer_service.control import participant, switch
from optimizer_service.control.messages import Vote
from optimizer_service.control.participant import (
    AbortIn,
    Action,
    Build,
    CommitIn,
    Discard,
    Participant,
    PrepareIn,
    SendAck,
    SendVote,
)
from optimizer_service.control.wire import ack_to_proto, from_service_message, vote_to_proto
from optimizer_service.plan import PlanError
from p2.v1 import enforcer_link_pb2 as link_pb2
from p2.v1 import enforcer_link_pb2_grpc

log = logging.getLogger("enforcer")

BACKOFF_FIRST = 0.5             # seconds before the first reconnect ...
BACKOFF_MAX = 30.0              # ... doubling up to this
TELEMETRY_QUEUE = 64            # iterations of telemetry kept while the stream is slow or down
TELEMETRY_OPS = 512             # op timings in one Telemetry message (the service takes up to 4096)
TELEMETRY_MOTIFS = 2048         # motif timings in one Telemetry message (the service takes up to 8192)
MAX_TOPOLOGY_BYTES = 1 << 20    # the most topology YAML Register carries
TRACE_CHUNK = 1 << 20           # bytes of trace JSON in one TraceChunk
MAX_TRACE_BYTES = 64 << 20      # the most trace JSON a rank sends for one request
MAX_MESSAGE_BYTES = 80 * 1024 * 1024     # a Prepare carries the plan (the service's limit)
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   # pings find a service host that died without closing the stream
                   ("grpc.keepalive_time_ms", 20_000), ("grpc.keepalive_timeout_ms", 10_000)]


def backoff(attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Seconds before reconnect ``attempt`` (0 after a stream that registered):
    0.5 s doubling to 30 s, times a jitter of 0.75-1.25 (never above 30 s), so
    the ranks of a job do not all knock at the same moment."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** min(attempt, 16) * (0.75 + 0.5 * rng()))


@dataclass(frozen=True)
class RankIdentity:
    """What a rank tells the service in ``Register``, besides its protocol state."""

    job: str
    rank: int
    world_size: int
    host: str
    local_rank: int
    backend: str                # the inner backend(s), e.g. "cpu:gloo"
    torch_version: str
    enforcer_version: str
    switch_every: int
    topology: str = ""          # a preset name or a topology YAML document (P2_TOPOLOGY)

    @classmethod
    def of(cls, group, settings: EnforcerSettings, environ: Mapping[str, str]) -> RankIdentity:
        """The default group's rank; ``job`` is "" when no job id can be found
        (see :func:`enforcer.settings.default_job`)."""
        job = settings.job or default_job(environ, _store_address(group.store)) or ""
        try:
            local_rank = int(environ.get("LOCAL_RANK", group.rank()))
        except ValueError:
            local_rank = group.rank()
        return cls(job, group.rank(), group.size(), socket.gethostname(), local_rank,
                   ",".join(f"{device}:{name}" for device, name in group.inner_names.items()),
                   torch.__version__, _enforcer_version(), settings.switch_every, _topology(settings.topology))


@dataclass(frozen=True)
class _Telemetry:
    """One finished iteration, as captured on the training thread (turned into a proto when sent)."""

    iteration: int
    start: float                # the iteration's start on the tracer's clock
    duration: float
    running: int
    wait_seconds: float
    ops: list                   # OpRecords (their completion may still be filled in)


class Link:
    """The rank's side of the service link: its participant state, the stream thread, the outbox.

    Built from values; :meth:`start` starts the I/O. ``plans`` builds and frees
    runtimes (:class:`enforcer.link.prepare.PreparedPlans`); ``tracer`` gives the
    iteration and the op timings.
    """

    def __init__(self, settings: EnforcerSettings, identity: RankIdentity, tracer, plans,
                 rng: Callable[[], float] = random.random) -> None:
        self.settings = settings
        self.identity = identity
        self.tracer = tracer
        self.plans = plans
        self.state = Participant.new(identity.job, identity.rank, identity.world_size)
        # messages in and out, newest last: "it 12: got Commit(job v3 e1 switch@20)"
        self.history: deque[str] = deque(maxlen=256)
        self.attempts = 0                                # streams opened so far
        self.connected = False                           # registered on the current stream
        self.telemetry_dropped = 0
        self._rng = rng
        self._lock = threading.Lock()                    # the participant state
        self._cond = threading.Condition()               # the outbox
        self._control: deque[link_pb2.RankMessage] = deque()
        self._telemetry: deque[_Telemetry] = deque(maxlen=TELEMETRY_QUEUE)
        self._stream = 0                                 # changes whenever a stream starts or ends
        self._closed = threading.Event()
        self._call = None
        self._thread: threading.Thread | None = None
        self._out = False                                # an outage was logged and has not ended
        self._boundary = tracer.now()
        self._waited = tracer.waited

    # ------------------------------------------------------------ lifecycle
    def start(self) -> Link:
        self._thread = threading.Thread(target=self._run, name="p2enforcer-link", daemon=True)
        self._thread.start()
        atexit.register(self.close)
        return self

    def close(self) -> None:
        """Close the stream and free every plan not running (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        call = self._call
        if call is not None:
            call.cancel()
        with self._cond:
            self._stream += 1
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self.plans.close()

    # ------------------------------------------------------ protocol state
    def feed(self, event) -> None:
        """One event for the participant decisions (from the stream or a builder); carry out the actions."""
        with self._lock:
            self.state, actions = participant.step(self.state, event, time.monotonic())
            for action in actions:
                self._carry_out(action)

    def proposal(self, boundary: int) -> int:
        with self._lock:
            return switch.proposal(self.state, boundary)

    def agree(self, boundary: int, common: int) -> list[Action]:
        """Apply the ranks' common version at ``boundary``; the SwitchTo / Discard
        actions are the caller's (:mod:`enforcer.link.switching`). SwitchError passes."""
        with self._lock:
            self.state, actions = switch.agree(self.state, boundary, common)
        return actions

    def _carry_out(self, action: Action) -> None:
        if isinstance(action, Build):
            self.plans.build(action.version, action.plan, self.feed)
        elif isinstance(action, Discard):
            self.plans.discard(action.version)
        elif isinstance(action, SendVote):
            self._send(vote_to_proto(action.vote), str(action.vote))
            if not action.vote.yes:
                log.warning("p2enforcer: rank %d votes no on plan v%d: %s", self.identity.rank, action.vote.version,
                            action.vote.reason)
        elif isinstance(action, SendAck):
            self._send(ack_to_proto(action.ack), str(action.ack))
        else:
            raise TypeError(f"the link cannot carry out {action}")

    # ------------------------------------------------------------ telemetry
    def iteration_done(self, iteration: int) -> None:
        """The training thread finished ``iteration``: queue its telemetry (never blocks; the oldest is
        dropped when the queue is full)."""
        now = self.tracer.now()
        waited = self.tracer.waited
        item = _Telemetry(iteration, self._boundary, now - self._boundary, self.state.running,
                          max(0.0, waited - self._waited), self.tracer.iteration_ops(iteration, TELEMETRY_OPS))
        self._boundary, self._waited = now, waited
        with self._cond:
            if len(self._telemetry) == TELEMETRY_QUEUE:
                self.telemetry_dropped += 1
            self._telemetry.append(item)
            self._cond.notify_all()

    def _telemetry_message(self, item: _Telemetry) -> link_pb2.RankMessage:
        """Built when sent (not at the boundary), so motifs that finished after it are in."""
        motifs, dropped = self.tracer.iteration_motifs(item.iteration, TELEMETRY_MOTIFS)
        waits: dict[int, float] = {}
        for motif in motifs:
            waits[motif.op_seq] = waits.get(motif.op_seq, 0.0) + motif.waited
        ops = [link_pb2.OpTiming(seq=record.seq, kind=record.kind, bytes=record.bytes, group=list(record.group),
                                 issue_seconds=max(0.0, record.issued - item.start),
                                 complete_seconds=(0.0 if record.completed is None
                                                   else max(0.0, record.completed - item.start)),
                                 wait_seconds=waits.get(record.seq, 0.0), group_seq=record.group_seq,
                                 enforced=record.enforced)
               for record in item.ops]
        timings = [link_pb2.MotifTiming(op_seq=motif.op_seq, order=motif.order, channel=motif.channel,
                                        wait_seconds=motif.waited, start_seconds=max(0.0, motif.start - item.start),
                                        duration_seconds=motif.seconds)
                   for motif in motifs]
        return link_pb2.RankMessage(telemetry=link_pb2.Telemetry(
            job_id=self.identity.job, iteration=item.iteration, duration_seconds=max(0.0, item.duration),
            running_version=item.running, ops=ops, wait_seconds=item.wait_seconds, motifs=timings,
            dropped_motifs=dropped))

    def _send_trace(self, request: link_pb2.RequestTrace) -> None:
        """The trace window the service asked for, in chunks (on the link thread, never the training's)."""
        limit = min(request.max_bytes or MAX_TRACE_BYTES, MAX_TRACE_BYTES)
        data = self.tracer.window(request.iterations, limit)
        chunks = [data[offset:offset + TRACE_CHUNK] for offset in range(0, len(data), TRACE_CHUNK)] or [b""]
        for index, chunk in enumerate(chunks):
            self._send(link_pb2.RankMessage(trace_chunk=link_pb2.TraceChunk(
                job_id=self.identity.job, request_id=request.request_id, offset=index * TRACE_CHUNK, data=chunk,
                last=index == len(chunks) - 1)), f"TraceChunk(#{request.request_id} {index + 1}/{len(chunks)})")

    # --------------------------------------------------------------- outbox
    def _send(self, message: link_pb2.RankMessage, text: str) -> None:
        self._note(f"sent {text}")
        log.debug("p2enforcer: rank %d sends %s", self.identity.rank, text)
        with self._cond:
            self._control.append(message)
            self._cond.notify_all()

    def _note(self, text: str) -> None:
        self.history.append(f"it {self.tracer.iteration}: {text}")

    def _register_message(self) -> link_pb2.RankMessage:
        me = self.identity
        with self._lock:
            running, held = self.state.running, self.state.held()
        return link_pb2.RankMessage(register=link_pb2.Register(
            job_id=me.job, rank=me.rank, world_size=me.world_size, host=me.host, local_rank=me.local_rank,
            backend=me.backend, torch_version=me.torch_version, enforcer_version=me.enforcer_version,
            running_version=running, held_versions=held, iteration=self.tracer.iteration,
            switch_every=me.switch_every, topology=me.topology))

    def _requests(self, stream: int):
        """What one stream sends: Register, then votes and acks first, telemetry when there are none;
        ends when the stream does."""
        yield self._register_message()
        while True:
            with self._cond:
                while self._stream == stream and not self._control and not self._telemetry:
                    self._cond.wait()
                if self._stream != stream:
                    return
                message = self._control.popleft() if self._control else None
                item = None if message is not None else self._telemetry.popleft()
            yield message if message is not None else self._telemetry_message(item)

    # --------------------------------------------------------------- stream
    def _run(self) -> None:
        try:
            credentials, metadata = self._connection_setup()
        except OSError as error:
            log.error("p2enforcer: rank %d cannot link to the optimizer service at %s: %s; training goes on "
                      "without it", self.identity.rank, self.settings.service, error)
            return
        log.info("p2enforcer: rank %d links to the optimizer service at %s as job %s (plans switch every %d "
                 "iterations)", self.identity.rank, self.settings.service, self.identity.job,
                 self.identity.switch_every)
        attempt = 0
        while not self._closed.is_set():
            self.attempts += 1
            why, registered = self._one_stream(credentials, metadata)
            if self._closed.is_set():
                return
            if registered:
                attempt = 0
            if not self._out:
                self._out = True
                log.warning("p2enforcer: rank %d %s the optimizer service at %s (%s); training goes on with "
                            "plan v%d, reconnecting in the background", self.identity.rank,
                            "lost" if registered else "cannot reach", self.settings.service, why, self.state.running)
            else:
                log.debug("p2enforcer: rank %d: attempt %d to reach %s failed: %s", self.identity.rank,
                          self.attempts, self.settings.service, why)
            self._closed.wait(backoff(attempt, self._rng))
            attempt += 1

    def _connection_setup(self) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, str]]]:
        """TLS credentials (None: plaintext) and the call metadata, from the files named in the settings."""
        settings = self.settings
        token = settings.token
        if settings.token_file:
            token = _read_token(settings.token_file)
        credentials = None
        if settings.tls_ca or settings.tls_cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(settings.tls_ca, "P2_TLS_CA") if settings.tls_ca else None,
                private_key=_read(settings.tls_key, "P2_TLS_KEY") if settings.tls_key else None,
                certificate_chain=_read(settings.tls_cert, "P2_TLS_CERT") if settings.tls_cert else None)
        return credentials, ([("authorization", f"Bearer {token}")] if token else [])

    def _one_stream(self, credentials, metadata) -> tuple[str, bool]:
        """Open a stream and serve it until it ends: why it ended, and whether it registered."""
        address = self.settings.service
        channel = (grpc.insecure_channel(address, options=CHANNEL_OPTIONS) if credentials is None
                   else grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS))
        registered = False
        try:
            with self._cond:
                self._stream += 1
                stream = self._stream
                self._control.clear()        # Register tells the service what this rank holds; it re-sends the rest
            call = enforcer_link_pb2_grpc.EnforcerLinkStub(channel).Connect(self._requests(stream),
                                                                             metadata=metadata)
            self._call = call
            if self._closed.is_set():
                call.cancel()
            try:
                for message in call:
                    registered = self._receive(message) or registered
                return "the service ended the stream", registered
            except grpc.RpcError as error:
                return _one_line(error), registered
            except Exception as error:  # noqa: BLE001 — a bug here must not end the link thread
                log.exception("p2enforcer: rank %d: handling a message from the service failed", self.identity.rank)
                call.cancel()
                return f"{type(error).__name__}: {error}".splitlines()[0], registered
        finally:
            self._call = None
            self.connected = False
            with self._cond:
                self._stream += 1
                self._cond.notify_all()
            channel.close()

    def _receive(self, message: link_pb2.ServiceMessage) -> bool:
        """Handle one message from the service; True when it is ``Registered``."""
        body = message.WhichOneof("body")
        if body == "registered":
            registered = message.registered
            self._note(f"got Registered(e{registered.epoch} committed v{registered.committed_version})")
            self.connected = True
            if self._out:
                self._out = False
                log.warning("p2enforcer: rank %d reconnected to the optimizer service at %s", self.identity.rank,
                            self.settings.service)
            else:
                log.info("p2enforcer: rank %d registered with the optimizer service at %s (epoch %d)",
                         self.identity.rank, self.settings.service, registered.epoch)
            return True
        if body == "request_trace":
            self._send_trace(message.request_trace)
            return False
        try:
            decision = from_service_message(message)
        except PlanError as error:
            prepare = message.prepare
            vote = Vote(self.identity.job, self.identity.rank, prepare.version, prepare.epoch, False,
                        f"the plan of v{prepare.version} is malformed: {error}")
            self._note(f"got a malformed Prepare of v{prepare.version}")
            with self._lock:
                self._carry_out(SendVote(vote))
            return False
        if decision is None:
            return False
        self._note(f"got {decision}")
        log.info("p2enforcer: rank %d got %s", self.identity.rank, decision)
        event = {"Prepare": PrepareIn, "Commit": CommitIn, "Abort": AbortIn}[type(decision).__name__](decision)
        self.feed(event)
        return False


def start(group, settings: EnforcerSettings, environ: Mapping[str, str]) -> Link:
    """The default group's link (``P2_SERVICE`` set), started. Without a job id
    it is logged and never connects, but the rank still takes part in the
    in-band check (every rank must), proposing the plan it runs."""
    from enforcer.link.prepare import PreparedPlans

    identity = RankIdentity.of(group, settings, environ)
    link = Link(settings, identity, group.tracer, PreparedPlans(group, settings.prepare_timeout))
    if not identity.job:
        log.error("p2enforcer: P2_SERVICE is set but no job id was found: set P2_JOB (the same on every rank); "
                  "rank %d runs without the optimizer service", identity.rank)
        return link
    return link.start()


def _one_line(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else None
    details = " ".join(((error.details() if hasattr(error, "details") else "") or "").split())
    return f"{code.name if code is not None else 'error'}: {details}" if details else str(code)


def _read(path: str, variable: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise OSError(f"cannot read {variable}={path}: {error.strerror}") from None


def _read_token(path: str) -> str:
    token = _read(path, "P2_TOKEN_FILE").decode(errors="replace").strip()
    if not token or any(c.isspace() for c in token):
        raise OSError(f"P2_TOKEN_FILE={path} must hold one token (no spaces)")
    return token


def _store_address(store) -> str | None:
    """``host:port`` of the TCPStore under ``store``'s prefixes, or None."""
    try:
        base = store._underlying_non_prefix_store
    except AttributeError:
        base = store
    host, port = getattr(base, "host", None), getattr(base, "port", None)
    return f"{host}:{port}" if host and port else None


def _topology(value: str | None) -> str:
    """``P2_TOPOLOGY`` as Register carries it: a YAML file's text, else the name
    as given (a preset the service knows). An unreadable file is logged and not sent."""
    if not value:
        return ""
    path = Path(value)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        return value
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        log.warning("p2enforcer: P2_TOPOLOGY=%s cannot be read (%s); the service plans on its own topology",
                    value, type(error).__name__)
        return ""
    if len(text.encode()) > MAX_TOPOLOGY_BYTES:
        log.warning("p2enforcer: P2_TOPOLOGY=%s is over %d bytes; not sent", value, MAX_TOPOLOGY_BYTES)
        return ""
    return text


def _enforcer_version() -> str:
    try:
        return metadata.version("p2-collectives")
    except metadata.PackageNotFoundError:
        return "0+unknown"
