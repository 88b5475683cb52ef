"""The C++ ``p2enforcer`` backend (``enforcer._native``, sources in ``cpp_ext/enforcer/``) seen from Python.

With ``P2_ENFORCER_IMPL=cpp`` (the default when the extension is built) torch's
creator hook (:mod:`enforcer.register`) returns an ``EnforcerBackend``: a ``c10d::Backend`` that torch
registers on the process group for cpu and cuda. Every op reaches it in C++
— the torch.distributed calls, DDP's reducer, FSDP2, the c10d dispatcher ops
and the functional collectives alike, so nothing can bypass it — and, in
passthrough, goes to the inner backend without entering Python, its record
written to a C++ ring buffer (:class:`~enforcer.group.native_trace.NativeTracer`
reads it into the usual trace format).

:class:`NativeGroup` is the Python side of one such group: what the plan
runtime, the service link and ``enforcer.step()`` use (:class:`enforcer.group.core.GroupCore`).
With a plan installed the backend submits the group's collectives to the C++
plan runtime (:mod:`enforcer.runtime.native`), which orders and runs their
motifs in C++.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import torch.distributed as dist
from enforcer import groups, state
from enforcer.group.core import GroupCore
from enforcer.group.native_trace import NativeTracer

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
        if self.is_default:
            tracer.inner_backends = dict(self.inner_names)
        self._runtime = None
        self.backend = _native.EnforcerBackend(rank, size, tracer.native, tracer.native.add_group(list(ranks), name),
                                               inner)
        # The backend holds these until torch shuts it down (then it lets go: no cycle outlives the group).
        self.backend.set_on_close(self._close)
        groups.register(self)

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
        from enforcer.runtime.native import NativePlanRuntime
        return NativePlanRuntime(self, plan, store_prefix, store)

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False) -> None:
        if timeout is None:
            self.backend.monitored_barrier(wait_all_ranks=wait_all_ranks)
        else:
            self.backend.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
