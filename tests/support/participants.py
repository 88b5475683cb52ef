"""In-process participants: ranks that speak the real protocol over real gRPC
streams, without torch. Each runs the pure participant decisions
(:mod:`optimizer_service.control.participant`) and "builds" a plan at once (or
refuses to, for tests of a rank that cannot prepare). Used by the service's
tests and by ``benchmarks/commit.py`` (hundreds of ranks in one process)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import grpc

from optimizer_service.control import participant as decide
from optimizer_service.control.messages import Abort, Commit, Prepare
from optimizer_service.control.participant import (
    AbortIn,
    Build,
    Built,
    CommitIn,
    Discard,
    Participant,
    PrepareIn,
    SendAck,
    SendVote,
)
from optimizer_service.control.wire import ack_to_proto, from_service_message, vote_to_proto
from optimizer_service.wire.credentials import bearer
from p2.v1 import enforcer_link_pb2 as link
from p2.v1 import enforcer_link_pb2_grpc


@dataclass
class SimRank:
    """One rank: its protocol state, what it received, when it acked what."""

    job: str
    rank: int
    world_size: int
    switch_every: int = 10
    refuse: str = ""                     # non-empty: building fails with this reason
    state: Participant = field(init=False)
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    received: list = field(default_factory=list)
    acked: dict[int, float] = field(default_factory=dict)       # version -> time the commit ack was sent
    aborted: dict[int, float] = field(default_factory=dict)
    error: grpc.RpcError | None = None
    outbox: asyncio.Queue | None = None                          # set while its stream is open
    trace: dict | None = None            # the trace document it answers a RequestTrace with (None: no answer)

    def send(self, message: link.RankMessage) -> None:
        """Send ``message`` on the open stream (e.g. telemetry)."""
        assert self.outbox is not None, "the rank's stream is not open"
        self.outbox.put_nowait(message)

    def __post_init__(self) -> None:
        self.state = Participant.new(self.job, self.rank, self.world_size)

    def register_message(self, iteration: int = 0) -> link.RankMessage:
        held = self.state.held()
        return link.RankMessage(register=link.Register(
            job_id=self.job, rank=self.rank, world_size=self.world_size, host="sim", local_rank=self.rank,
            backend="sim", torch_version="-", enforcer_version="sim", running_version=self.state.running,
            held_versions=held, iteration=iteration, switch_every=self.switch_every))

    def handle(self, message: link.ServiceMessage) -> list[link.RankMessage]:
        """The replies to one service message (builds finish at once)."""
        self.received.append(message)
        decision = from_service_message(message)
        if decision is None:
            if message.WhichOneof("body") == "registered":
                self.registered.set()
            if message.WhichOneof("body") == "request_trace" and self.trace is not None:
                return [link.RankMessage(trace_chunk=link.TraceChunk(
                    job_id=self.job, request_id=message.request_trace.request_id,
                    data=json.dumps(self.trace).encode(), last=True))]
            return []
        event = {Prepare: PrepareIn, Commit: CommitIn, Abort: AbortIn}[type(decision)](decision)
        return self._run(event)

    def _run(self, event) -> list[link.RankMessage]:
        replies = []
        pending = [event]
        while pending:
            self.state, actions = decide.step(self.state, pending.pop(0), time.monotonic())
            for action in actions:
                if isinstance(action, Build):
                    pending.append(Built(action.version, not self.refuse, self.refuse))
                elif isinstance(action, SendVote):
                    replies.append(vote_to_proto(action.vote))
                elif isinstance(action, SendAck):
                    replies.append(ack_to_proto(action.ack))
                    book = self.acked if action.ack.committed else self.aborted
                    book.setdefault(action.ack.version, time.perf_counter())
                elif isinstance(action, Discard):
                    pass
        return replies


async def run_rank(sim: SimRank, channel: grpc.aio.Channel, token: str | None = None,
                   stop: asyncio.Event | None = None, reconnect: bool = False) -> None:
    """Keep ``sim``'s stream open until ``stop`` is set (or the service ends it;
    with ``reconnect``, open it again — registering anew with what the rank
    holds — until ``stop``)."""
    stop = stop or asyncio.Event()
    while not stop.is_set():
        sim.registered.clear()
        await _one_stream(sim, channel, token, stop)
        if not reconnect:
            return
        await asyncio.sleep(0.1)


async def _one_stream(sim: SimRank, channel: grpc.aio.Channel, token: str | None, stop: asyncio.Event) -> None:
    stub = enforcer_link_pb2_grpc.EnforcerLinkStub(channel)
    outbox: asyncio.Queue = asyncio.Queue()
    sim.outbox = outbox
    outbox.put_nowait(sim.register_message())

    async def requests():
        while True:
            getter = asyncio.ensure_future(outbox.get())
            stopper = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                return
            stopper.cancel()
            yield getter.result()

    call = stub.Connect(requests(), metadata=bearer(token))
    try:
        async for message in call:
            for reply in sim.handle(message):
                outbox.put_nowait(reply)
    except grpc.RpcError as error:
        sim.error = error
    finally:
        sim.outbox = None
