"""The plan store's interface, its one value type and its errors.

Two implementations (``sqlite_store``, ``redis_store``) keep the service's
durable state: jobs, immutable versioned plans, each plan's two-phase-commit
state, the coordinator's decision log and epoch, bounded telemetry and job events. The
service calls every method from one worker thread; implementations are also
safe to call from several threads and, on the same file or server, from
several processes.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError


class StoreError(Exception):
    """Base of every error a plan store raises; its message is one line."""


class StoreInputError(StoreError, InvalidInputError):
    """A value the store refuses (bad job id, oversized plan, a document that is
    not a JSON object); nothing was written."""


class StoreUrlError(StoreInputError):
    """A store URL (``P2_STORE``) that cannot be parsed or names an unsupported backend."""


class StoreConflictError(StoreError):
    """A write that would change something immutable (a plan version that already exists)."""


class StoreFencedError(StoreConflictError):
    """A decision-log append by a coordinator whose epoch is no longer the
    store's: a newer service took over the store, so this one must stop deciding."""

    def __init__(self, message: str, *, ours: int, current: int) -> None:
        super().__init__(message)
        self.ours = ours
        self.current = current


def fenced(url: str, ours: int, current: int) -> StoreFencedError:
    return StoreFencedError(f"store {url} now belongs to a newer service (epoch {current} > this one's {ours}); "
                            "this service must stop", ours=ours, current=current)


class StoreUnavailableError(StoreError):
    """The backend is unreachable or refused the operation (Redis down, SQLite file
    unwritable); the message names the store's URL with its password redacted."""


#: The bounded lists a store keeps per job (``_push``/``_recent``'s ``name``), as their items are called.
BOUNDED_LISTS = {"telemetry": "telemetry summary", "events": "job event"}


@dataclass(frozen=True)
class StoredPlan:
    job_id: str
    version: int
    plan_json: str
    submitted_unix: float


class PlanStore(abc.ABC):
    """Durable state of the optimizer service. ``url`` is the URL the store was
    opened with, password redacted, so it is safe to log and to show."""

    url: str

    # jobs: one JSON document per job, upserted
    @abc.abstractmethod
    def put_job(self, job_id: str, document: dict) -> None: ...

    @abc.abstractmethod
    def get_job(self, job_id: str) -> dict | None: ...

    @abc.abstractmethod
    def list_jobs(self) -> list[dict]:
        """Every job's document, sorted by job id."""

    @abc.abstractmethod
    def delete_job(self, job_id: str, epoch: int | None = None) -> bool:
        """Drop everything of the job — its document, plans, plan states, decision log,
        telemetry and events — in one atomic write, so a crash leaves the whole job or
        none of it; whether it had a document. Its version counter stays: a job that
        registers again under the id never gets a version number twice.

        With ``epoch`` it is fenced like :meth:`append_log`: :class:`StoreFencedError`
        and nothing dropped once the store's epoch is above ``epoch``."""

    # plans: immutable, versioned per job
    @abc.abstractmethod
    def next_version(self, job_id: str) -> int:
        """Reserve and return ``max(every version reserved or stored) + 1`` (1 the
        first time); never the same number twice for a job, even across reopen."""

    @abc.abstractmethod
    def add_plan(self, job_id: str, version: int, plan_json: str, submitted_unix: float) -> None:
        """Store a plan; :class:`StoreConflictError` if ``(job_id, version)`` exists."""

    @abc.abstractmethod
    def get_plan(self, job_id: str, version: int) -> StoredPlan | None: ...

    @abc.abstractmethod
    def list_plans(self, job_id: str) -> list[StoredPlan]:
        """The job's plans by ascending version."""

    # each plan's two-phase-commit state for operators: upserted, not relied on for recovery
    @abc.abstractmethod
    def put_plan_state(self, job_id: str, version: int, document: dict) -> None: ...

    @abc.abstractmethod
    def get_plan_state(self, job_id: str, version: int) -> dict | None: ...

    # the coordinator's decision log: append-only
    @abc.abstractmethod
    def append_log(self, job_id: str, record: dict, epoch: int | None = None) -> int:
        """Append a record, durable when this returns; its sequence number (1, 2, ... per job).

        With ``epoch`` (the appending coordinator's), the append is fenced: it
        happens only while the store's epoch is not above ``epoch``, checked and
        written atomically; otherwise :class:`StoreFencedError` and nothing is
        written. So a coordinator that a restarted one replaced, but that is still
        running, can never make a decision durable — nor send the Commit behind it."""

    @abc.abstractmethod
    def read_log(self, job_id: str) -> list[dict]:
        """The job's records in append order."""

    # the coordinator's epoch: one counter for the whole store
    @abc.abstractmethod
    def next_epoch(self) -> int:
        """Increment the epoch and return it (1 the first time), durable when this returns."""

    # bounded lists, most recent kept: telemetry summaries, and job events (every decision of the
    # replanning policy, with its reason)
    def add_telemetry(self, job_id: str, summary: dict, keep: int = 1000) -> None:
        """Append a summary and drop the job's oldest beyond ``keep``."""
        self._push("telemetry", job_id, summary, keep)

    def recent_telemetry(self, job_id: str, limit: int = 100) -> list[dict]:
        """The job's last ``limit`` summaries, newest last."""
        return self._recent("telemetry", job_id, limit)

    def add_event(self, job_id: str, event: dict, keep: int = 10_000) -> None:
        """Append an event document and drop the job's oldest beyond ``keep``."""
        self._push("events", job_id, event, keep)

    def recent_events(self, job_id: str, limit: int = 100) -> list[dict]:
        """The job's last ``limit`` events, newest last."""
        return self._recent("events", job_id, limit)

    @abc.abstractmethod
    def _push(self, name: str, job_id: str, document: dict, keep: int) -> None:
        """Append to bounded list ``name`` (``telemetry`` or ``events``, never client text)."""

    @abc.abstractmethod
    def _recent(self, name: str, job_id: str, limit: int) -> list[dict]: ...

    @abc.abstractmethod
    def ping(self) -> None:
        """Raise :class:`StoreUnavailableError` if the backend cannot be reached."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> PlanStore:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
