"""Request work that can take long, off the event loop, with a deadline.

The dashboard runs on the event loop that also serves gRPC: every rank's stream
and the health check. Parsing a topology YAML, synthesizing reduction programs,
parsing a submitted or stored plan all take time proportional to what a client
sent, so none of it may run on the loop. It runs here instead:

* on a **small dedicated thread pool** (not asyncio's default one, which the
  store and others use too), so slow requests can only ever take these threads;
* with **a bound on the requests waiting** for a thread: beyond it the request is
  answered 503 at once rather than queued without end;
* with **a deadline**: past it the client gets 503 and one line. A thread cannot
  be stopped, so work already running finishes in the background (the parsers
  and the planner are bounded by their own limits), but work still queued is
  dropped and the client is not kept waiting.

A thread shares the interpreter's lock with the loop, and C code (``json.loads``
of a large plan) and the garbage collector's passes over what it built hold it
for as long as they run. Work that large (:meth:`Offloader.run_for` above
``isolate_bytes``) runs in a **child process** instead, started for the one
request (``spawn``: nothing of the service's threads or sockets is inherited)
and killed at the deadline; only its small answer comes back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import threading
import traceback
from collections.abc import Callable
from typing import TypeVar

from optimizer_service.errors import InvalidInputError

T = TypeVar("T")
THREADS = 4                 # the most request work that runs at once
WAITING = 32                # requests that may wait for a thread; more are refused (503)
DEADLINE_SECONDS = 30.0     # the longest a request's work may take before its client is answered 503
PROCESSES = 2               # child processes (large plans) at once; more are refused (503)
ISOLATE_BYTES = 1 << 20     # inputs larger than this run in a child process


class OverloadedError(InvalidInputError):
    """The work did not finish within its deadline, or too many requests wait already (503)."""


class Offloader:
    """Runs request work on its own threads with a deadline."""

    def __init__(self, threads: int = THREADS, waiting: int = WAITING, deadline: float = DEADLINE_SECONDS,
                 processes: int = PROCESSES, isolate_bytes: int = ISOLATE_BYTES) -> None:
        self.deadline, self.capacity = deadline, threads + waiting
        self.processes, self.isolate_bytes = processes, isolate_bytes
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="p2-dashboard")
        self._lock = threading.Lock()
        self._pending = 0                       # submitted and not yet finished (running or queued)
        self._children = 0                      # child processes running

    @property
    def pending(self) -> int:
        return self._pending

    def _release(self, _future: concurrent.futures.Future) -> None:
        with self._lock:
            self._pending -= 1

    async def run(self, what: str, fn: Callable[..., T], *args, deadline: float | None = None, **kwargs) -> T:
        """``fn(*args, **kwargs)`` on the pool; its result, its exception, or :class:`OverloadedError`."""
        with self._lock:
            if self._pending >= self.capacity:
                raise OverloadedError(f"the dashboard is busy ({self._pending} requests ahead of this one); "
                                      "try again in a moment")
            self._pending += 1
        try:
            future = self._pool.submit(fn, *args, **kwargs)
        except BaseException:
            with self._lock:
                self._pending -= 1
            raise
        future.add_done_callback(self._release)   # also called when a queued item is cancelled
        limit = self.deadline if deadline is None else deadline
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), limit)
        except TimeoutError:
            future.cancel()                         # dropped if still queued; a running one finishes unseen
            raise OverloadedError(f"{what} took longer than {limit:g} s and was given up; try a smaller "
                                  "request") from None

    async def run_for(self, size: int, what: str, fn: Callable[..., T], *args) -> T:
        """``fn(*args)`` on a thread, or in a child process when its input has ``size`` > ``isolate_bytes``."""
        if size > self.isolate_bytes:
            return await self.run_isolated(what, fn, *args)
        return await self.run(what, fn, *args)

    async def run_isolated(self, what: str, fn: Callable[..., T], *args, deadline: float | None = None) -> T:
        """``fn(*args)`` (a module-level function) in a child process of its own, killed at the deadline.
        The arguments go over a pipe from one of this pool's threads (a write of megabytes never blocks the
        loop); the answer comes back the same way; an error comes back as its message."""
        if self._children >= self.processes:
            raise OverloadedError(f"the dashboard is busy ({self._children} large requests run); try again in a "
                                  "moment")
        self._children += 1
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        child = context.Process(target=_child, args=(theirs,), name="p2-dashboard-reader", daemon=True)
        try:
            child.start()
            theirs.close()
            limit = self.deadline if deadline is None else deadline
            try:
                outcome = await self.run(what, _exchange, ours, (fn, args), deadline=limit)
            except OverloadedError:
                child.kill()
                raise
            if outcome[0] == "error":
                raise InvalidInputError(outcome[1])
            if outcome[0] == "bug":
                raise RuntimeError(f"{what} failed in its child process: {outcome[1]}")
            return outcome[1]
        finally:
            self._children -= 1
            ours.close()
            if child.is_alive():
                child.kill()
            await asyncio.get_running_loop().run_in_executor(self._pool, child.join, 5)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _exchange(connection, request: tuple) -> tuple:
    """On a pool thread: hand the child its work, wait for its answer (EOF: it was killed or died)."""
    try:
        connection.send(request)
        return connection.recv()
    except (EOFError, OSError) as error:
        return ("bug", f"the child process ended without an answer ({error.__class__.__name__})")


def _child(connection) -> None:
    """The child's whole life: one request, one answer. Input errors come back as their one line."""
    fn, args = connection.recv()
    try:
        answer = ("ok", fn(*args))
    except InvalidInputError as error:
        answer = ("error", " ".join(str(error).split()))
    except Exception:                               # a bug: its traceback goes back to the service's log
        answer = ("bug", traceback.format_exc(limit=5))
    connection.send(answer)
    connection.close()
