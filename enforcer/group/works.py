"""Work objects the enforcer hands back, and completion tracking.

Every op passed through returns its inner Work inside a :class:`TrackedWork`,
which timestamps the op when it is seen complete. Coalesced ops the inner
backend offers only one pair at a time complete together (:func:`all_of`).
Ops run under a plan return :class:`enforcer.runtime.plan_runtime.PlannedWork`.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

_NO_TIMEOUT = timedelta(0)


def on_complete(work: dist.Work, done: Callable[[], None]) -> dist.Work:
    """``work`` wrapped so that ``done`` is called when it is seen complete."""
    return TrackedWork(work, done)


class TrackedWork(dist.Work):
    """An inner Work that reports its completion when it is seen complete: when
    ``wait`` returns, ``is_completed`` says so, or (once someone asks for the
    future) the future's callback runs. Timestamping in the caller's thread
    keeps a Python callback — a hand-over to the backend's thread and back,
    ~50 µs — off the path of every synchronous op."""

    def __init__(self, inner: dist.Work, done: Callable[[], None]) -> None:
        super().__init__()
        self._inner = inner
        self._done = done
        self._reported = False
        self._watched = False

    def _report(self) -> None:
        if not self._reported:
            self._reported = True
            self._done()

    def wait(self, timeout: timedelta = _NO_TIMEOUT) -> bool:
        result = self._inner.wait(timeout) if timeout != _NO_TIMEOUT else self._inner.wait()
        self._report()
        return result

    def is_completed(self) -> bool:
        completed = self._inner.is_completed()
        if completed:
            self._report()
        return completed

    def is_success(self) -> bool:
        return self._inner.is_success()

    def exception(self):
        return self._inner.exception()

    def source_rank(self) -> int:
        return self._inner.source_rank()

    def _source_rank(self) -> int:
        return self._inner._source_rank()

    def result(self) -> list[torch.Tensor]:
        return self._inner.result()

    def synchronize(self) -> None:
        self._inner.synchronize()

    def get_future(self) -> torch.futures.Future:
        future = self._inner.get_future()
        if not self._watched:
            self._watched = True
            future.add_done_callback(lambda _future: self._report())
        return future


def future_work(future: torch.futures.Future) -> dist.Work:
    """A Work that completes with ``future`` (whose result is the op's tensors)."""
    return _create_work_from_future(future)


def all_of(works: list[dist.Work], outputs: list[torch.Tensor]) -> dist.Work:
    """One Work that completes when every one of ``works`` has, with ``outputs``
    as its result. Works without a future are waited for on a shared waiter thread."""
    future = torch.futures.Future()
    try:
        futures = [w.get_future() for w in works]
    except RuntimeError:
        _waiter().submit(_wait_all, works, future, outputs)
        return future_work(future)
    if not futures:
        future.set_result(outputs)
        return future_work(future)
    return future_work(torch.futures.collect_all(futures).then(lambda _done: outputs))


def _wait_all(works: list[dist.Work], future: torch.futures.Future, outputs: list[torch.Tensor]) -> None:
    try:
        for work in works:
            work.wait()
    except Exception as error:  # noqa: BLE001 — handed to whoever waits on the op
        future.set_exception(error)
        return
    future.set_result(outputs)


_pool: ThreadPoolExecutor | None = None


def _waiter() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="p2enforcer-waiter")
    return _pool
