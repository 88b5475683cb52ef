"""Job events: what happened, for the log, the ``Watch`` stream and (later) the dashboard.

A small in-process publish/subscribe: every subscriber has a bounded queue; a
subscriber that falls behind loses its oldest events (and is told how many),
never slows the service down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass

log = logging.getLogger("p2.service")


@dataclass(frozen=True)
class JobEvent:
    unix: float
    job_id: str
    kind: str
    version: int = 0
    message: str = ""
    rank: int | None = None

    def __str__(self) -> str:
        who = f" rank {self.rank}" if self.rank is not None else ""
        plan = f" v{self.version}" if self.version else ""
        return f"job {self.job_id}{who}: {self.kind}{plan}{': ' + self.message if self.message else ''}"


class EventBus:
    """Subscribers get every event; each job's last ``history`` events are kept for the dashboard's log."""

    def __init__(self, capacity: int = 1024, clock=time.time, history: int = 500) -> None:
        self._subscribers: set[asyncio.Queue] = set()
        self._capacity = capacity
        self._clock = clock
        self._history = history
        self._recent: dict[str, deque[JobEvent]] = {}

    def publish(self, job_id: str, kind: str, version: int = 0, message: str = "", rank: int | None = None) -> JobEvent:
        event = JobEvent(self._clock(), job_id, kind, version, message, rank)
        log.info("%s", event)
        self._recent.setdefault(job_id, deque(maxlen=self._history)).append(event)
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)
        return event

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(self._capacity)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._subscribers.discard(queue)

    def recent(self, job_id: str, limit: int) -> list[JobEvent]:
        """The job's last ``limit`` events since this service started, oldest first."""
        events = self._recent.get(job_id, ())
        return list(events)[-limit:] if limit > 0 else []
