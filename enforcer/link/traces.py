"""Serving the service's ``RequestTrace``: the rank's trace window, in ``TraceChunk`` messages.

The window is the last finished iterations the service asked for, as trace
JSON (:meth:`enforcer.trace.TraceReader.window`), cut to the smaller of the bound it
asked for and :data:`~optimizer_service.wire.limits.MAX_TRACE_BYTES`, and sent
in chunks of :data:`~optimizer_service.wire.limits.RANK_TRACE_CHUNK` bytes (at
least one, the last marked ``last``). Taken on the stream thread, never the training's.
"""

from __future__ import annotations

from enforcer.trace import TraceReader
from optimizer_service.wire.limits import MAX_TRACE_BYTES, RANK_TRACE_CHUNK
from p2.v1 import enforcer_link_pb2 as link_pb2


def trace_chunks(job: str, tracer: TraceReader,
                 request: link_pb2.RequestTrace) -> list[tuple[link_pb2.RankMessage, str]]:
    """The chunks that answer ``request``, each with the text that names it in the link's history."""
    limit = min(request.max_bytes or MAX_TRACE_BYTES, MAX_TRACE_BYTES)
    data = tracer.window(request.iterations, limit)
    chunks = [data[offset:offset + RANK_TRACE_CHUNK] for offset in range(0, len(data), RANK_TRACE_CHUNK)] or [b""]
    return [(link_pb2.RankMessage(trace_chunk=link_pb2.TraceChunk(
                job_id=job, request_id=request.request_id, offset=index * RANK_TRACE_CHUNK, data=chunk,
                last=index == len(chunks) - 1)),
             f"TraceChunk(#{request.request_id} {index + 1}/{len(chunks)})")
            for index, chunk in enumerate(chunks)]
