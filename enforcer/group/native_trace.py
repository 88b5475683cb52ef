"""The trace of a process whose groups are C++ backends: ops read from the C++ ring buffer."""

from __future__ import annotations

from collections import Counter

from enforcer.trace import Tracer
from optimizer_service.plan.trace import MotifRecord, OpRecord, Wait


class NativeTracer(Tracer):
    """The process's trace when its groups are C++ backends: ops live in the C++
    ring buffer (``native``); waits, motifs, switches and bypass counts stay here."""

    def __init__(self, rank: int, world_size: int, limit: int) -> None:
        from enforcer import _native     # loaded by enforcer.group.native, which makes these
        super().__init__(rank, world_size, limit)
        self.native = _native.OpTrace(limit, self.started)
        self._groups: dict[int, tuple[tuple[int, ...], str]] = {}

    @property
    def counts(self) -> Counter[str]:
        return Counter(self.native.counts())

    @property
    def waited(self) -> float:
        return self.native.waited

    @waited.setter
    def waited(self, _value: float) -> None:    # Tracer.__init__ sets it; the C++ trace keeps the total
        pass

    def issue(self, kind: str, dtype: str, nbytes: int, group: tuple[int, ...], group_name: str) -> OpRecord:
        raise TypeError("ops of a C++ p2enforcer group are recorded by the backend itself")

    def complete(self, record) -> None:
        raise TypeError("ops of a C++ p2enforcer group are completed by the backend itself")

    def wait(self, order: int, seconds: float) -> None:
        raise TypeError("the waits of a C++ plan runtime are recorded by it")

    def motif(self, record, order: int, channel: int, waited: float, start: float, seconds: float) -> None:
        raise TypeError("the motifs of a C++ plan runtime are recorded by it")

    def now(self) -> float:
        return self.native.now()

    def _waits_and_motifs(self) -> tuple[list[Wait], list[MotifRecord]]:
        return ([Wait(*entry) for entry in self.native.waits()],
                [MotifRecord(*entry) for entry in self.native.motifs()])

    def wait_seconds(self) -> float:
        return sum(seconds for _iteration, _order, seconds in self.native.waits())

    def iteration_motifs(self, iteration: int, limit: int) -> tuple[list[MotifRecord], int]:
        found = [MotifRecord(*entry) for entry in self.native.motifs() if entry[0] == iteration]
        return found[:limit], max(0, len(found) - limit)

    def step(self) -> int:
        with self._lock:
            self.iteration = self.native.step()
            self.steps += 1
            return self.iteration

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

    def iteration_ops(self, iteration: int, limit: int) -> list[OpRecord]:
        return [self._record(entry) for entry in self.native.iteration_ops(iteration, limit)]

    def _op_dicts(self) -> tuple[list[dict], int, int]:
        fields = OpRecord.__dataclass_fields__
        ops = []
        for entry in self.native.snapshot():
            record = self._record(entry)
            ops.append({name: getattr(record, name) for name in fields})
        return ops, self.native.dropped, self.steps
