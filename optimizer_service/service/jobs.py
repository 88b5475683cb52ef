"""A job as the service sees it: its ranks, their streams, its coordinator, its plans' 2PC state.

A job is **registering** until every rank registered, **live** while every
rank is connected, **degraded** when a rank of a job that was live lost its
stream (a rank that reconnects re-registers and gets the committed plan).
Each plan's per-rank two-phase-commit state (``prepare_sent``, ``voted_yes``,
``voted_no``, ``acked_commit``, ``acked_abort``) is what the driver observed;
operators read it through ``p2 plan show``.

Beside measured and predicted iteration times, a plan's record keeps the lower
bound on the job's iteration time its search computed
(:mod:`optimizer_service.syndicate.bound`; the plan JSON's
``bound_iteration_seconds``). Passthrough (version 0) has no record: its
measured time is kept on the job, and its bound is the first search's, the
search made on the cluster state passthrough ran in.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from optimizer_service.control.coordinator import Coordinator
from optimizer_service.service.live import JobIteration, LiveView
from optimizer_service.service.traces import TraceRequests

REGISTERING, LIVE, DEGRADED = "registering", "live", "degraded"


def ratio_to_bound(seconds: float | None, bound: float | None) -> float | None:
    """``seconds`` over the lower bound (>= 1 for a measured or a modelled time; None when either is unknown)."""
    if seconds is None or not bound or not math.isfinite(bound):
        return None
    return seconds / bound


class RankSession:
    """One rank's open stream; the servicer writes what lands in its outbox."""

    def __init__(self, job_id: str, rank: int) -> None:
        self.job_id = job_id
        self.rank = rank
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.closed = False

    def send(self, message) -> None:
        if not self.closed:
            self.outbox.put_nowait(message)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.outbox.put_nowait(None)


@dataclass
class RankInfo:
    host: str = ""
    local_rank: int = 0
    backend: str = ""
    torch_version: str = ""
    enforcer_version: str = ""
    connected: bool = False
    running_version: int = 0
    iteration: int = 0
    last_seen_unix: float = 0.0

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict) -> RankInfo:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "connected": False})


@dataclass
class PlanState:
    """One plan's two-phase commit as observed: the decision and each rank's part."""

    version: int
    submitted_unix: float
    switch_iteration: int = 0
    epoch: int = 0
    decision: str | None = None          # "commit" | "abort"
    reason: str = ""
    decided_unix: float = 0.0
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)   # rank -> (state, reason)
    origin: str = ""                          # "search r3", "rollback to v2"; "" for a plan an operator submitted
    predicted_seconds: float | None = None    # expected iteration time (the policy's, once it commits)
    measured_seconds: float | None = None     # median iteration time while it ran (after the warm-up)
    measured_iterations: int = 0
    bound_seconds: float | None = None        # the job's iteration-time lower bound the plan was searched with
    dirty: bool = field(default=False, compare=False)                   # changed since last stored

    @property
    def state(self) -> str:
        return {"commit": "committed", "abort": "aborted"}.get(self.decision or "", "preparing")

    def to_dict(self) -> dict:
        return {"version": self.version, "submitted_unix": self.submitted_unix,
                "switch_iteration": self.switch_iteration, "epoch": self.epoch, "decision": self.decision,
                "reason": self.reason, "decided_unix": self.decided_unix,
                "ranks": {str(rank): list(value) for rank, value in sorted(self.ranks.items())},
                "origin": self.origin, "predicted_seconds": self.predicted_seconds,
                "measured_seconds": self.measured_seconds, "measured_iterations": self.measured_iterations,
                "bound_iteration_seconds": self.bound_seconds}

    @classmethod
    def from_dict(cls, data: dict) -> PlanState:
        return cls(version=data["version"], submitted_unix=data["submitted_unix"],
                   switch_iteration=data.get("switch_iteration", 0), epoch=data.get("epoch", 0),
                   decision=data.get("decision"), reason=data.get("reason", ""),
                   decided_unix=data.get("decided_unix", 0.0),
                   ranks={int(rank): tuple(value) for rank, value in data.get("ranks", {}).items()},
                   origin=data.get("origin", ""), predicted_seconds=data.get("predicted_seconds"),
                   measured_seconds=data.get("measured_seconds"),
                   measured_iterations=data.get("measured_iterations", 0),
                   bound_seconds=data.get("bound_iteration_seconds"))


@dataclass
class TelemetryWindow:
    """Telemetry since the last summary was stored (one per job, flushed on ticks)."""

    messages: int = 0
    iterations: set[int] = field(default_factory=set)
    duration_sum: float = 0.0
    wait_sum: float = 0.0
    max_iteration: int = 0

    def add(self, telemetry) -> None:
        self.messages += 1
        self.iterations.add(telemetry.iteration)
        self.duration_sum += telemetry.duration_seconds
        self.wait_sum += telemetry.wait_seconds
        self.max_iteration = max(self.max_iteration, telemetry.iteration)

    def summary(self, unix: float) -> dict:
        return {"unix": unix, "messages": self.messages, "iterations": len(self.iterations),
                "mean_iteration_seconds": self.duration_sum / self.messages if self.messages else 0.0,
                "mean_wait_seconds": self.wait_sum / self.messages if self.messages else 0.0,
                "max_iteration": self.max_iteration}


@dataclass
class Job:
    job_id: str
    world_size: int
    switch_every: int
    created_unix: float
    coordinator: Coordinator
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    sessions: dict[int, RankSession] = field(default_factory=dict)
    plans: dict[int, PlanState] = field(default_factory=dict)
    was_live: bool = False
    topology: str = ""          # what the ranks said they run on (P2_TOPOLOGY): a preset name or YAML
    #: Passthrough's (version 0, before any plan) median iteration time while it last ran; not stored.
    passthrough_measured_seconds: float | None = None
    #: The job's latest search as its stored ``searched`` decision (``kind``, ``unix``, ``version``,
    #: ``reason``, and ``search``: :meth:`~optimizer_service.service.planning.SearchOutcome.to_dict`, with
    #: the fitted model ``fit`` and the ``bound``); None before one. Set when the search is recorded and
    #: read back from the stored decisions when the service starts (:meth:`ServiceCore.start`).
    latest_search: dict | None = None
    telemetry: TelemetryWindow = field(default_factory=TelemetryWindow)
    traces: TraceRequests = field(default_factory=TraceRequests)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Set (on the store's thread, right after the store dropped the job) by
    # ServiceCore.delete_job: a write of this job queued behind the delete is skipped,
    # so nothing resurrects a part of a deleted job; a registration that waited on
    # the lock starts over with a new job.
    deleted: bool = field(default=False, compare=False)
    live: LiveView = field(init=False)

    def __post_init__(self) -> None:
        self.live = LiveView(self.world_size)

    def observe(self, rank: int, telemetry, now: float) -> list[JobIteration]:
        """One registered rank's Telemetry (already validated), received at ``now``: the
        rank's progress, the telemetry summary the store gets, the live view; the job
        iterations it completed, in index order."""
        info = self.ranks[rank]
        info.iteration = max(info.iteration, telemetry.iteration)
        info.running_version = telemetry.running_version
        self.telemetry.add(telemetry)
        return self.live.observe(rank, telemetry, now)

    @property
    def passthrough_bound_seconds(self) -> float | None:
        """Passthrough's lower bound: the bound of the job's first plan that has one (its
        first search's, on the cluster state passthrough ran in before it), None before."""
        return next((self.plans[v].bound_seconds for v in sorted(self.plans)
                     if self.plans[v].bound_seconds is not None), None)

    def bound_seconds(self, version: int) -> float | None:
        """The lower bound beside plan ``version`` (0: passthrough's)."""
        if version == 0:
            return self.passthrough_bound_seconds
        state = self.plans.get(version)
        return None if state is None else state.bound_seconds

    @property
    def connected(self) -> int:
        return sum(1 for info in self.ranks.values() if info.connected)

    @property
    def state(self) -> str:
        if self.connected == self.world_size:
            return LIVE
        return DEGRADED if self.was_live else REGISTERING

    def to_document(self, *, ranks: dict[int, RankInfo] | None = None, was_live: bool | None = None,
                    topology: str | None = None) -> dict:
        """What the store keeps of the job (its ranks' last known facts, not their streams);
        the keywords give the document a registration would leave, before it changes the job."""
        ranks = self.ranks if ranks is None else ranks
        return {"job_id": self.job_id, "world_size": self.world_size, "switch_every": self.switch_every,
                "created_unix": self.created_unix, "was_live": self.was_live if was_live is None else was_live,
                "topology": self.topology if topology is None else topology,
                "ranks": {str(rank): info.to_dict() for rank, info in sorted(ranks.items())}}
