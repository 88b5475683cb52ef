"""Trace windows asked of a job's ranks: RequestTrace out, TraceChunks back.

The replanning loop plans a live job from every rank's recent trace (Syndicate
§5; ARCHITECTURE.md "Protocol between the planes": "trace windows on
request"). :class:`TraceRequests` (one per job) numbers the requests, gathers
each rank's chunks in order, bounds what it keeps, and resolves one future
with the traces in rank order once every rank has sent its last chunk.

A chunk out of order, over the bound, of an unknown request or that is not a
trace document fails that request (one line naming the rank); it never
reaches the planner.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

from optimizer_service.plan.trace import TRACE_FORMAT
from optimizer_service.wire.limits import MAX_TRACE_BYTES

TRACE_ITERATIONS = 8                # finished iterations of each rank's trace a plan is made from
TRACE_TIMEOUT_SECONDS = 60.0


class TraceRequestError(Exception):
    """A trace request that cannot complete (a rank's chunks are bad, or it is gone)."""


@dataclass
class _Pending:
    world_size: int
    max_bytes: int
    future: asyncio.Future
    parts: dict[int, bytearray] = field(default_factory=dict)
    traces: dict[int, dict] = field(default_factory=dict)


class TraceRequests:
    def __init__(self) -> None:
        self._next = 0
        self._pending: dict[int, _Pending] = {}

    def open(self, world_size: int, max_bytes: int = MAX_TRACE_BYTES) -> tuple[int, asyncio.Future]:
        """A new request id and the future of its traces (a list, rank order)."""
        self._next += 1
        future = asyncio.get_running_loop().create_future()
        self._pending[self._next] = _Pending(world_size, min(max_bytes, MAX_TRACE_BYTES), future)
        return self._next, future

    def close(self, request_id: int) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None and not pending.future.done():
            pending.future.cancel()

    def fail_rank(self, rank: int, why: str) -> None:
        """A rank's stream closed: every request still waiting on it fails."""
        for request_id, pending in list(self._pending.items()):
            if rank not in pending.traces:
                self._fail(request_id, f"rank {rank} {why} before it sent its trace")

    def chunk(self, rank: int, message) -> None:
        """One ``p2.v1.TraceChunk`` from ``rank``."""
        pending = self._pending.get(message.request_id)
        if pending is None or pending.future.done():
            return              # a request already given up (timed out, failed): late chunks are dropped
        buffer = pending.parts.setdefault(rank, bytearray())
        if rank in pending.traces or message.offset != len(buffer):
            self._fail(message.request_id, f"rank {rank} sent trace bytes at {message.offset}, expected "
                                           f"{len(buffer)}")
            return
        if len(buffer) + len(message.data) > pending.max_bytes:
            self._fail(message.request_id, f"rank {rank} sent more than {pending.max_bytes} bytes of trace")
            return
        buffer.extend(message.data)
        if not message.last:
            return
        try:
            trace = json.loads(bytes(buffer)) if buffer else None
        except ValueError as error:
            self._fail(message.request_id, f"rank {rank} sent a trace that is not JSON: {error}")
            return
        if trace is None:
            self._fail(message.request_id, f"rank {rank} has no finished iteration to send (or none fits "
                                           f"{pending.max_bytes} bytes)")
            return
        if not isinstance(trace, dict) or trace.get("format") != TRACE_FORMAT or trace.get("rank") != rank:
            self._fail(message.request_id, f"rank {rank} sent something that is not its {TRACE_FORMAT} document")
            return
        pending.traces[rank] = trace
        del pending.parts[rank]
        if len(pending.traces) == pending.world_size:
            pending.future.set_result([pending.traces[r] for r in sorted(pending.traces)])
            del self._pending[message.request_id]

    def _fail(self, request_id: int, why: str) -> None:
        pending = self._pending.pop(request_id)
        if not pending.future.done():
            pending.future.set_exception(TraceRequestError(why))
