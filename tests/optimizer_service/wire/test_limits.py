"""The limits of the wire: a rank's largest messages pass the service's checks and fit its stream."""

from __future__ import annotations

import pytest

from optimizer_service.service import requests
from optimizer_service.service.grpc_guard import request_limit
from optimizer_service.service.requests import RequestError
from optimizer_service.wire.limits import (
    LINK_MESSAGE_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_TELEMETRY_MOTIFS,
    MAX_TELEMETRY_OPS,
    MAX_TOPOLOGY_CHARACTERS,
    MAX_TRACE_BYTES,
    MAX_TRACE_CHUNK,
    RANK_TELEMETRY_MOTIFS,
    RANK_TELEMETRY_OPS,
    RANK_TRACE_CHUNK,
)
from p2.v1 import enforcer_link_pb2 as link

WORLD = 4_096       # ranks of a large job, every op naming all of them


def telemetry(ops: int, motifs: int) -> link.Telemetry:
    return link.Telemetry(
        job_id="big-job", iteration=7, running_version=3, duration_seconds=0.5, wait_seconds=0.01,
        ops=[link.OpTiming(kind="all_reduce", bytes=1 << 30, group=range(WORLD), issue_seconds=0.1,
                           complete_seconds=0.2, wait_seconds=0.05) for _ in range(ops)],
        motifs=[link.MotifTiming(channel=index % 8, wait_seconds=0.1, start_seconds=0.2, duration_seconds=0.3)
                for index in range(motifs)])


def test_a_ranks_amounts_are_within_the_services_bounds():
    assert 0 < RANK_TELEMETRY_OPS <= MAX_TELEMETRY_OPS
    assert 0 < RANK_TELEMETRY_MOTIFS <= MAX_TELEMETRY_MOTIFS
    assert 0 < RANK_TRACE_CHUNK <= MAX_TRACE_CHUNK <= MAX_TRACE_BYTES
    assert MAX_TRACE_CHUNK < LINK_MESSAGE_BYTES <= MAX_MESSAGE_BYTES


def test_the_largest_telemetry_a_rank_sends_passes_and_fits_the_stream():
    largest = telemetry(RANK_TELEMETRY_OPS, RANK_TELEMETRY_MOTIFS)
    requests.telemetry(largest, WORLD)
    message = link.RankMessage(telemetry=largest)
    assert message.ByteSize() <= LINK_MESSAGE_BYTES == request_limit("/p2.v1.EnforcerLink/Connect")


def test_the_service_refuses_one_op_or_motif_over_its_bound():
    with pytest.raises(RequestError, match=f"at most {MAX_TELEMETRY_OPS} a message"):
        requests.telemetry(telemetry(MAX_TELEMETRY_OPS + 1, 0), WORLD)
    with pytest.raises(RequestError, match=f"at most {MAX_TELEMETRY_MOTIFS} a message"):
        requests.telemetry(telemetry(0, MAX_TELEMETRY_MOTIFS + 1), WORLD)
    requests.telemetry(telemetry(MAX_TELEMETRY_OPS, 0), WORLD)


def test_a_ranks_trace_chunk_and_topology_pass_and_fit_the_stream():
    chunk = link.TraceChunk(job_id="big-job", request_id=1, offset=0, data=b"x" * RANK_TRACE_CHUNK)
    requests.trace_chunk(chunk)
    assert link.RankMessage(trace_chunk=chunk).ByteSize() <= LINK_MESSAGE_BYTES
    with pytest.raises(RequestError, match="at most 4 MiB a chunk"):
        requests.trace_chunk(link.TraceChunk(data=b"x" * (MAX_TRACE_CHUNK + 1)))

    register = link.Register(job_id="big-job", world_size=WORLD, rank=0, switch_every=1,
                             topology="é" * MAX_TOPOLOGY_CHARACTERS)     # characters, not bytes
    requests.register(register)
    assert link.RankMessage(register=register).ByteSize() <= LINK_MESSAGE_BYTES
    register.topology += "x"
    with pytest.raises(RequestError, match="register.topology"):
        requests.register(register)
