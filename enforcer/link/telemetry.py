"""A rank's telemetry: one ``Telemetry`` message per finished iteration.

The iteration is captured on the training thread at its boundary
(:meth:`IterationClock.capture`: times and the op records, no copies of
timings) and its message is built when the stream sends it
(:func:`telemetry_message`), so motifs that finished after the boundary are in.
A message carries at most the rank's share of what the service takes
(:data:`~optimizer_service.wire.limits.RANK_TELEMETRY_OPS` op timings,
:data:`~optimizer_service.wire.limits.RANK_TELEMETRY_MOTIFS` motif timings).
"""

from __future__ import annotations

from dataclasses import dataclass

from enforcer.trace import TraceReader
from optimizer_service.wire.limits import RANK_TELEMETRY_MOTIFS, RANK_TELEMETRY_OPS
from p2.v1 import enforcer_link_pb2 as link_pb2


@dataclass(frozen=True)
class IterationTelemetry:
    """One finished iteration, as captured on the training thread (turned into a proto when sent)."""

    iteration: int
    start: float                # the iteration's start on the tracer's clock
    duration: float
    running: int
    wait_seconds: float
    ops: list                   # OpRecords (their completion may still be filled in)


class IterationClock:
    """Where the last iteration ended on the tracer's clock, and the dispatcher waits until then."""

    def __init__(self, tracer: TraceReader) -> None:
        self.tracer = tracer
        self._boundary = tracer.now()
        self._waited = tracer.waited

    def capture(self, iteration: int, running: int) -> IterationTelemetry:
        """``iteration`` just finished, running plan ``running``: its span, waits and ops. The span
        starts at the last boundary moved on by the time the loop was idle since (:func:`enforcer.idle`:
        a pause between iterations, at the iteration's start, is not the iteration's)."""
        now = self.tracer.now()
        waited = self.tracer.waited
        ops = self.tracer.iteration_ops(iteration, RANK_TELEMETRY_OPS)
        start = min(now, self._boundary + self.tracer.idle_between(self._boundary, now))
        item = IterationTelemetry(iteration, start, now - start, running, max(0.0, waited - self._waited), ops)
        self._boundary, self._waited = now, waited
        return item


def telemetry_message(job: str, tracer: TraceReader, item: IterationTelemetry) -> link_pb2.RankMessage:
    """``item``'s Telemetry, with the motif timings of its ops recorded so far; each op's
    wait is the sum of its motifs' waits."""
    motifs, dropped = tracer.iteration_motifs(item.iteration, RANK_TELEMETRY_MOTIFS)
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
        job_id=job, iteration=item.iteration, duration_seconds=max(0.0, item.duration),
        running_version=item.running, ops=ops, wait_seconds=item.wait_seconds, motifs=timings,
        dropped_motifs=dropped))
