"""The trace of a process whose groups are C++ backends: a reader of the C++ ring buffer."""

from __future__ import annotations

from collections import Counter

from enforcer.trace import TraceReader
from optimizer_service.plan.trace import MotifRecord, OpRecord, Wait


class NativeTracer(TraceReader):
    """The process's trace when its groups are C++ backends: the backend and its plan
    runtime record ops, waits and motifs into the C++ ring buffer (``native``), which
    this reads; iteration ends, switches and bypass counts come from Python as for
    :class:`enforcer.trace.Tracer`."""

    def __init__(self, rank: int, world_size: int, limit: int) -> None:
        from enforcer import _native     # loaded by enforcer.group.native, which makes these
        super().__init__(rank, world_size)
        self.native = _native.OpTrace(limit, self.started)
        self._groups: dict[int, tuple[tuple[int, ...], str]] = {}

    def now(self) -> float:
        return self.native.now()

    @property
    def counts(self) -> Counter[str]:
        return Counter(self.native.counts())

    @property
    def waited(self) -> float:
        return self.native.waited

    def _advance(self) -> int:
        return self.native.step()

    def iteration_ops(self, iteration: int, limit: int) -> list[OpRecord]:
        return [self._record(entry) for entry in self.native.iteration_ops(iteration, limit)]

    def iteration_motifs(self, iteration: int, limit: int) -> tuple[list[MotifRecord], int]:
        entries, more = self.native.iteration_motifs(iteration, limit)
        return [MotifRecord(*entry) for entry in entries], more

    def wait_seconds(self) -> float:
        return sum(seconds for _iteration, _order, seconds in self.native.waits())

    def _waits_and_motifs(self, since: int | None = None) -> tuple[list[Wait], list[MotifRecord]]:
        return ([Wait(*entry) for entry in self.native.waits(since)],
                [MotifRecord(*entry) for entry in self.native.motifs(since)])

    def _op_dicts(self, since: int | None = None) -> tuple[list[dict], int, int]:
        fields = OpRecord.__dataclass_fields__
        ops = []
        for entry in self.native.snapshot(since):
            record = self._record(entry)
            ops.append({name: getattr(record, name) for name in fields})
        return ops, self.native.dropped, self.steps

    def _group(self, group_id: int) -> tuple[tuple[int, ...], str]:
        found = self._groups.get(group_id)
        if found is None:
            ranks, name = self.native.group(group_id)
            found = self._groups[group_id] = (tuple(ranks), name)
        return found

    def _record(self, entry: tuple) -> OpRecord:
        _index, iteration, seq, group_seq, kind, dtype, nbytes, group_id, issued, completed, enforced, root = entry
        ranks, name = self._group(group_id)
        return OpRecord(iteration, seq, group_seq, kind, dtype, nbytes, ranks, name, issued, completed, enforced, root)
