"""Checks of what clients send, before anything acts on it.

Every refusal is a :class:`RequestError`: one line naming the field and what
is wrong; the servicers answer it with INVALID_ARGUMENT. The bounds of what a
rank sends are the contract's (:mod:`optimizer_service.wire.limits`, shared
with the enforcer); those of the admin API are here.
"""

from __future__ import annotations

import math

from optimizer_service.errors import InvalidInputError
from optimizer_service.service.store.validation import JOB_ID_PATTERN, preview
from optimizer_service.wire.limits import (
    MAX_CHANNEL,
    MAX_HELD_VERSIONS,
    MAX_ITERATION,
    MAX_OP_BYTES,
    MAX_SECONDS,
    MAX_SWITCH_EVERY,
    MAX_TELEMETRY_MOTIFS,
    MAX_TELEMETRY_OPS,
    MAX_TEXT,
    MAX_TOPOLOGY_CHARACTERS,
    MAX_TRACE_CHUNK,
    MAX_VERSION,
    MAX_WORLD_SIZE,
)

MAX_TRACE_ITERATIONS = 10_000        # iterations of each rank's trace GetTraces may ask for
MAX_TRACE_TIMEOUT = 600.0            # seconds GetTraces may wait for the ranks
MAX_DECISIONS = 10_000               # decisions one ListDecisions may return
DEFAULT_DECISIONS = 100
DEFAULT_PAGE = 100                   # jobs one page of a list holds when the client asks for none
MAX_PAGE = 1_000                     # the most jobs one page may hold


class RequestError(InvalidInputError):
    """A malformed request; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def job_id(value: str, field: str = "job_id") -> str:
    if not JOB_ID_PATTERN.fullmatch(value):
        raise RequestError(field, f"{preview(value)} is not a job id: use 1-128 characters of A-Z a-z 0-9 . _ : - "
                                  "starting with a letter or digit")
    return value


def text(value: str, field: str, limit: int = MAX_TEXT) -> str:
    if len(value) > limit:
        raise RequestError(field, f"{len(value)} characters is more than the {limit} allowed")
    return value


def count(value: int, field: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise RequestError(field, f"{value} is outside {low}..{high}")
    return value


def seconds(value: float, field: str, limit: float = MAX_SECONDS) -> float:
    """A duration a client reports: finite, >= 0 and at most ``limit`` (a week unless said)."""
    if not math.isfinite(value) or not 0 <= value <= limit:
        raise RequestError(field, f"{value:.6g} is not a number of seconds in 0..{limit:g}")
    return value


def register(message) -> None:
    """A ``p2.v1.Register``."""
    job_id(message.job_id, "register.job_id")
    count(message.world_size, "register.world_size", 1, MAX_WORLD_SIZE)
    count(message.rank, "register.rank", 0, message.world_size - 1)
    count(message.switch_every, "register.switch_every", 1, MAX_SWITCH_EVERY)
    for name in ("host", "backend", "torch_version", "enforcer_version"):
        text(getattr(message, name), f"register.{name}")
    text(message.topology, "register.topology", MAX_TOPOLOGY_CHARACTERS)
    count(message.running_version, "register.running_version", 0, MAX_VERSION)
    count(message.iteration, "register.iteration", 0, MAX_ITERATION)
    if len(message.held_versions) > MAX_HELD_VERSIONS:
        raise RequestError("register.held_versions",
                           f"{len(message.held_versions)} versions; at most {MAX_HELD_VERSIONS}")
    for index, version in enumerate(message.held_versions):
        count(version, f"register.held_versions[{index}]", 0, MAX_VERSION)


def telemetry(message, world_size: int) -> None:
    """A ``p2.v1.Telemetry``: every number finite and within its physical bound, so that
    nothing downstream (the live view's means, the stored summaries, the metrics, the
    replanning statistics) can overflow or store a non-finite value."""
    if len(message.ops) > MAX_TELEMETRY_OPS:
        raise RequestError("telemetry.ops", f"{len(message.ops)} op timings; at most {MAX_TELEMETRY_OPS} a message")
    count(message.iteration, "telemetry.iteration", 0, MAX_ITERATION)
    count(message.running_version, "telemetry.running_version", 0, MAX_VERSION)
    seconds(message.duration_seconds, "telemetry.duration_seconds")
    seconds(message.wait_seconds, "telemetry.wait_seconds")
    for index, op in enumerate(message.ops):
        where = f"telemetry.ops[{index}]"
        text(op.kind, f"{where}.kind", 64)
        count(op.bytes, f"{where}.bytes", 0, MAX_OP_BYTES)
        if len(op.group) > world_size or any(r >= world_size for r in op.group):
            raise RequestError(f"{where}.group", f"names a rank outside the job's {world_size}")
        for name in ("issue_seconds", "complete_seconds", "wait_seconds"):
            seconds(getattr(op, name), f"{where}.{name}")
    if len(message.motifs) > MAX_TELEMETRY_MOTIFS:
        raise RequestError("telemetry.motifs",
                           f"{len(message.motifs)} motif timings; at most {MAX_TELEMETRY_MOTIFS} a message")
    for index, motif in enumerate(message.motifs):
        where = f"telemetry.motifs[{index}]"
        count(motif.channel, f"{where}.channel", 0, MAX_CHANNEL)
        for name in ("wait_seconds", "start_seconds", "duration_seconds"):
            seconds(getattr(motif, name), f"{where}.{name}")


def reason(value: str) -> str:
    """A reason a rank gave, cut to one line of at most MAX_TEXT characters when it is longer."""
    return " ".join(value.split())[:MAX_TEXT] if len(value) > MAX_TEXT else value


def trace_chunk(message) -> None:
    """A ``p2.v1.TraceChunk``, before its bytes are looked at."""
    if len(message.data) > MAX_TRACE_CHUNK:
        raise RequestError("trace_chunk.data", f"{len(message.data)} bytes; at most {MAX_TRACE_CHUNK >> 20} MiB a chunk")


def get_traces(message) -> tuple[int, float]:
    """A ``p2.v1.GetTracesRequest``: its iterations and timeout (0 where it left them to the service)."""
    iterations = count(message.iterations, "iterations", 0, MAX_TRACE_ITERATIONS)
    timeout = seconds(message.timeout_seconds, "timeout_seconds")
    if timeout > MAX_TRACE_TIMEOUT:
        raise RequestError("timeout_seconds", f"{timeout:g} s; at most {MAX_TRACE_TIMEOUT:g} s")
    return iterations, timeout


def page(limit: int, after: str, *, limit_field: str = "limit", after_field: str = "after") -> tuple[int, str]:
    """One page of a job list: how many (0 asks for :data:`DEFAULT_PAGE`, at most
    :data:`MAX_PAGE`) and the cursor, the last job id of the page before ("" for the first)."""
    count(limit, limit_field, 0, MAX_PAGE)
    if after:
        job_id(after, after_field)
    return limit or DEFAULT_PAGE, after


def list_jobs(message) -> tuple[int, str]:
    """A ``p2.v1.ListJobsRequest``: its page size and cursor."""
    return page(message.page_size, message.page_token, limit_field="page_size", after_field="page_token")


def list_decisions(message) -> tuple[str, int]:
    """A ``p2.v1.ListDecisionsRequest``: its job id and how many decisions (0 asks for the default)."""
    return job_id(message.job_id), count(message.limit, "limit", 0, MAX_DECISIONS) or DEFAULT_DECISIONS
