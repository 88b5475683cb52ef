"""The C++ ``p2enforcer`` backend (``enforcer._native``, sources in ``cpp_ext/enforcer/``) seen from Python.

With ``P2_ENFORCER_IMPL=cpp`` (the default when the extension is built) torch's
creator hook returns an ``EnforcerBackend``: a ``c10d::Backend`` that torch
registers on the process group for cpu and cuda. Every op reaches it in C++
— the torch.distributed calls, DDP's reducer, FSDP2, the c10d dispatcher ops
and the functional collectives alike, so nothing can bypass it — and, in
passthrough, goes to the inner backend without entering Python, its record
written to a C++ ring buffer (:class:`NativeTracer` reads it into the usual
trace format).

:class:`NativeGroup` is the Python side of one such group: what the plan
runtime, the service link and ``enforcer.step()`` use (:class:`enforcer.group_core.GroupCore`).
With a plan installed the backend submits the group's collectives to the C++
plan runtime (:mod:`enforcer.native_runtime`), which orders and runs their
motifs in C++.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

import torch.distributed as dist

from enforcer import state
from enforcer.group_core import GroupCore, creator_arguments
from enforcer.trace import Tracer
from optimizer_service.plan.trace import MotifRecord, OpRecord, Wait

log = logging.getLogger("enforcer")

try:
    from enforcer import _native
    _MISSING = ""
except ImportError as error:           # not built (no compiler at setup): the Python group serves
    _native = None
    _MISSING = f"the C++ backend enforcer._native is not built ({error}); run scripts/setup.sh"


def available() -> bool:
    return _native is not None


def why_unavailable() -> str:
    return _MISSING


class NativeTracer(Tracer):
    """The process's trace when its groups are C++ backends: ops live in the C++
    ring buffer (``native``); waits, motifs, switches and bypass counts stay here."""

    def __init__(self, rank: int, world_size: int, limit: int) -> None:
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


class NativeGroup(GroupCore):
    """The Python side of one C++ p2enforcer group; ``backend`` is what torch registers."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta, ranks: tuple[int, ...],
                 name: str) -> None:
        inner = self._make_inner(store, rank, size, timeout, ranks, name)
        self._rank, self._size = rank, size
        tracer = state.tracer()
        if self.is_default or not isinstance(tracer, NativeTracer):
            tracer = state.reset_tracer(rank if self.is_default else tracer.rank,
                                        size if self.is_default else tracer.world_size, NativeTracer)
        self.tracer = tracer
        self._runtime = None
        self.backend = _native.EnforcerBackend(rank, size, tracer.native, tracer.native.add_group(list(ranks), name),
                                               inner)
        # The backend holds these until torch shuts it down (then it lets go: no cycle outlives the group).
        self.backend.set_on_close(self._close)
        self._start()

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def getBackendName(self) -> str:        # noqa: N802 — the name torch's groups use
        return self.backend.name()

    @property
    def runtime(self):
        return self._runtime

    @runtime.setter
    def runtime(self, runtime) -> None:
        self._runtime = runtime
        self.backend.set_plan(None if runtime is None else runtime.native)

    def new_runtime(self, plan, store_prefix: str | None = None, store=None):
        from enforcer.native_runtime import NativePlanRuntime
        return NativePlanRuntime(self, plan, store_prefix, store)

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False) -> None:
        if timeout is None:
            self.backend.monitored_barrier(wait_all_ranks=wait_all_ranks)
        else:
            self.backend.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def create(backend_options: dist.distributed_c10d._DistributedBackendOptions, _pg_options=None):
    """torch's creator hook for the C++ backend: the ``EnforcerBackend`` torch registers on the group."""
    return NativeGroup(*creator_arguments(backend_options)).backend
