"""The service's plan store and the one thread that does all its I/O.

The store's connection (SQLite's lives on the thread that opened it) is opened,
used and closed on one worker thread, so the event loop never blocks on a disk
or on Redis, and writes run in the order they were asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from optimizer_service.service.errors import NotFoundError
from optimizer_service.service.jobs import Job
from optimizer_service.service.store.base import PlanStore


class StoreWorker:
    """``await worker.run(worker.store.method, ...)``: a store call on the store's thread."""

    def __init__(self, factory: Callable[[], PlanStore]) -> None:
        self._factory = factory
        self.store: PlanStore | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="p2-store")

    async def open(self) -> None:
        """Open the store (on its thread) and check that it answers."""
        self.store = await self.run(self._factory)
        await self.run(self.store.ping)

    async def run(self, function, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    async def write(self, job: Job, method, *args):
        """A store write of ``job``'s, skipped (NotFoundError) once the job was deleted:
        the one thread runs writes in order, so nothing queued behind a delete can
        bring a part of the job back."""
        def guarded():
            if job.deleted:
                raise NotFoundError(f"job {job.job_id!r} was deleted")
            return method(*args)
        return await self.run(guarded)

    def post(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the store's thread, in order, without waiting for it."""
        self._pool.submit(function)

    async def close(self) -> None:
        """Close the store (if it was opened) after every write queued before, then end the thread."""
        if self.store is not None:
            await self.run(self.store.close)
        self._pool.shutdown(wait=True)
