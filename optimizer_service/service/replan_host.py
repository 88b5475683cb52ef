"""What the replanning loop (:mod:`optimizer_service.service.replanning`) may ask
of the service core, and nothing more: the clock, a job event with its stored
record, every rank's trace window, and the plan store and two-phase commit of
a job's plans. :class:`~optimizer_service.service.core.ServiceCore` is one; a
test may pass another."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from optimizer_service.plan import Plan
from optimizer_service.service.jobs import PlanState
from optimizer_service.service.store.base import StoredPlan


class ReplanHost(Protocol):
    clock: Callable[[], float]

    def record(self, job_id: str, kind: str, version: int, reason: str, details: Mapping[str, object]) -> None:
        """Publish a job event (``kind``, ``version``, ``reason``) and store it with ``details``."""

    async def collect_traces(self, job_id: str, iterations: int) -> list[dict]:
        """Every rank's trace of its last ``iterations`` finished iterations, in rank order."""

    async def store_plan(self, job_id: str, plan: Plan, *, origin: str,
                         predicted_seconds: float | None = None) -> PlanState:
        """Store ``plan`` under the job's next version without committing it."""

    async def submit_stored(self, job_id: str, version: int) -> None:
        """Start the two-phase commit of the stored plan ``version``."""

    async def submit_plan(self, job_id: str, plan: Plan, *, origin: str = "",
                          predicted_seconds: float | None = None) -> tuple[PlanState, StoredPlan]:
        """Give ``plan`` the job's next version and start its two-phase commit."""

    async def plan(self, job_id: str, version: int) -> tuple[PlanState, StoredPlan]:
        """A stored plan of the job and its state."""
