"""Trace windows gathered from a job's ranks: chunks in order, bounded, one
future per request that resolves with every rank's trace or fails in one line."""

from __future__ import annotations

import asyncio
import json

import pytest

from optimizer_service.service.traces import TraceRequestError, TraceRequests
from p2.v1 import enforcer_link_pb2 as link


def trace(rank: int, pad: int = 0) -> bytes:
    return json.dumps({"format": "p2enforcer-trace", "rank": rank, "ops": [], "pad": "x" * pad}).encode()


def chunks(request_id: int, data: bytes, size: int) -> list[link.TraceChunk]:
    parts = [data[i:i + size] for i in range(0, len(data), size)] or [b""]
    return [link.TraceChunk(request_id=request_id, offset=i * size, data=part, last=i == len(parts) - 1)
            for i, part in enumerate(parts)]


def run(coroutine):
    return asyncio.run(coroutine)


def test_every_ranks_chunks_are_joined_and_the_traces_come_in_rank_order():
    async def main():
        requests = TraceRequests()
        request_id, future = requests.open(3)
        pieces = {rank: chunks(request_id, trace(rank, 5000), 1000) for rank in range(3)}
        for index in range(max(len(p) for p in pieces.values())):
            for rank in (2, 0, 1):                          # interleaved, as streams deliver them
                if index < len(pieces[rank]):
                    assert not future.done()
                    requests.chunk(rank, pieces[rank][index])
        return await future
    traces = run(main())
    assert [t["rank"] for t in traces] == [0, 1, 2] and len(traces[0]["pad"]) == 5000


@pytest.mark.parametrize("spoil, words", [
    (lambda c: [c[1], c[0], *c[2:]], "expected 0"),                          # out of order
    (lambda c: [link.TraceChunk(request_id=1, data=b"{not json", last=True)], "not JSON"),
    (lambda c: [link.TraceChunk(request_id=1, data=b'{"format": "other", "rank": 0}', last=True)],
     "not its p2enforcer-trace document"),
    (lambda c: [link.TraceChunk(request_id=1, data=b"", last=True)], "no finished iteration"),
])
def test_a_bad_chunk_fails_the_request_in_one_line(spoil, words):
    async def main():
        requests = TraceRequests()
        request_id, future = requests.open(1)
        for piece in spoil(chunks(request_id, trace(0, 3000), 1000)):
            requests.chunk(0, piece)
        with pytest.raises(TraceRequestError, match=words) as failed:
            await future
        return str(failed.value)
    assert "\n" not in run(main())


def test_the_bound_holds_and_late_or_unknown_chunks_are_dropped():
    async def main():
        requests = TraceRequests()
        request_id, future = requests.open(1, max_bytes=2500)
        for piece in chunks(request_id, trace(0, 3000), 1000):
            requests.chunk(0, piece)                       # the third chunk crosses 2500 bytes
        with pytest.raises(TraceRequestError, match="more than 2500 bytes"):
            await future
        requests.chunk(0, link.TraceChunk(request_id=99, data=b"{}", last=True))   # nobody asked: ignored
        second, future2 = requests.open(2)
        requests.chunk(0, chunks(second, trace(0), 1000)[0])
        requests.fail_rank(1, "disconnected")
        with pytest.raises(TraceRequestError, match="rank 1 disconnected before it sent its trace"):
            await future2
        third, future3 = requests.open(1)
        requests.close(third)
        assert future3.cancelled()
    run(main())
