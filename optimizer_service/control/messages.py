"""The two-phase-commit wire messages as values (Syndicate §5: "a two-phase
commit (2PC) protocol using RPCs so that the same joint optimizer plan is
safely committed ... to all the enforcers").

``proto/p2/v1/enforcer_link.proto`` mirrors these field for field; the gRPC
drivers only translate. Coordinator → rank: :class:`Prepare`, :class:`Commit`,
:class:`Abort`; rank → coordinator: :class:`Vote`, :class:`Ack`. Every message
names the job, the plan version and the coordinator epoch, so each one is
idempotent and a stale one is recognised (PROTOCOL.md §1).

Each has a one-line text form for logs and test expectations, e.g.
``Prepare(j v3 e1 switch@12)``, ``Vote(j r2 v3 e1 no: world size 4 != 8)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.plan import Plan


@dataclass(frozen=True)
class Prepare:
    """Phase one: validate ``plan`` against the job, build its subgroups and
    channels off the hot path, then vote. ``switch_iteration`` is the earliest
    check boundary the plan may run from (advisory: the in-band check decides)."""

    job: str
    version: int
    epoch: int
    switch_iteration: int
    plan: Plan

    def __str__(self) -> str:
        return f"Prepare({self.job} v{self.version} e{self.epoch} switch@{self.switch_iteration})"


@dataclass(frozen=True)
class Commit:
    """Phase two, yes: the coordinator's durable decision to commit ``version``."""

    job: str
    version: int
    epoch: int
    switch_iteration: int

    def __str__(self) -> str:
        return f"Commit({self.job} v{self.version} e{self.epoch} switch@{self.switch_iteration})"


@dataclass(frozen=True)
class Abort:
    """Phase two, no: the coordinator's durable decision to abort ``version``."""

    job: str
    version: int
    epoch: int
    reason: str

    def __str__(self) -> str:
        return f"Abort({self.job} v{self.version} e{self.epoch}: {self.reason})"


@dataclass(frozen=True)
class Vote:
    """A rank's answer to :class:`Prepare`: yes only once the plan is validated
    and built; no with a one-line ``reason``."""

    job: str
    rank: int
    version: int
    epoch: int
    yes: bool
    reason: str = ""

    def __str__(self) -> str:
        answer = "yes" if self.yes else f"no: {self.reason}"
        return f"Vote({self.job} r{self.rank} v{self.version} e{self.epoch} {answer})"


@dataclass(frozen=True)
class Ack:
    """A rank's answer to :class:`Commit` (``committed=True``) or :class:`Abort`
    (``committed=False``). ``have_plan=False`` answers a Commit for a version the
    rank does not hold built (its Prepare was lost, or rebuilding it failed):
    the coordinator sends Prepare and Commit again."""

    job: str
    rank: int
    version: int
    epoch: int
    committed: bool
    have_plan: bool = True

    def __str__(self) -> str:
        what = "commit" if self.committed else "abort"
        lacking = "" if self.have_plan else " without the plan"
        return f"Ack({self.job} r{self.rank} v{self.version} e{self.epoch} {what}{lacking})"


#: What the coordinator sends to ranks.
ToRank = Prepare | Commit | Abort
#: What ranks send to the coordinator.
ToCoordinator = Vote | Ack
