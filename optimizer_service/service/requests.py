"""Checks of what clients send, before anything acts on it.

Every refusal is a :class:`RequestError`: one line naming the field and what
is wrong; the servicers answer it with INVALID_ARGUMENT. The limits are here,
in one place.
"""

from __future__ import annotations

import math

from optimizer_service.errors import InvalidInputError
from optimizer_service.service.store.validation import JOB_ID_PATTERN, preview

MAX_WORLD_SIZE = 65_536
MAX_SWITCH_EVERY = 1_000_000
MAX_TEXT = 256                   # host names, versions, backend names, reasons
MAX_TELEMETRY_OPS = 4_096        # op timings in one Telemetry message
MAX_TOPOLOGY_CHARACTERS = 1 << 20   # a topology YAML document a rank sends with Register
MAX_TELEMETRY_MOTIFS = 8_192     # motif timings in one Telemetry message
MAX_CHANNEL = 1_024
MAX_TRACE_CHUNK = 4 * 1024 * 1024    # trace bytes in one TraceChunk
MAX_TRACE_ITERATIONS = 10_000        # iterations of each rank's trace GetTraces may ask for
MAX_TRACE_TIMEOUT = 600.0            # seconds GetTraces may wait for the ranks
MAX_DECISIONS = 10_000               # decisions one ListDecisions may return
DEFAULT_DECISIONS = 100
MAX_MESSAGE_BYTES = 80 * 1024 * 1024    # the largest gRPC message either way (a plan of 64 MiB and then some)


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


def seconds(value: float, field: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise RequestError(field, f"{value} is not a finite number of seconds >= 0")
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
    if len(message.held_versions) > 1024:
        raise RequestError("register.held_versions", f"{len(message.held_versions)} versions; at most 1024")


def telemetry(message, world_size: int) -> None:
    if len(message.ops) > MAX_TELEMETRY_OPS:
        raise RequestError("telemetry.ops", f"{len(message.ops)} op timings; at most {MAX_TELEMETRY_OPS} a message")
    seconds(message.duration_seconds, "telemetry.duration_seconds")
    seconds(message.wait_seconds, "telemetry.wait_seconds")
    for index, op in enumerate(message.ops):
        where = f"telemetry.ops[{index}]"
        text(op.kind, f"{where}.kind", 64)
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


def list_decisions(message) -> tuple[str, int]:
    """A ``p2.v1.ListDecisionsRequest``: its job id and how many decisions (0 asks for the default)."""
    return job_id(message.job_id), count(message.limit, "limit", 0, MAX_DECISIONS) or DEFAULT_DECISIONS
