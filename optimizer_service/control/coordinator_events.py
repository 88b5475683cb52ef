"""The coordinator's events (what the service driver feeds it) and actions
(what it asks the driver to do, in order), as values. Re-exported by
:mod:`optimizer_service.control.coordinator`; PROTOCOL.md §1-2 says when each
occurs."""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.control.messages import Ack, ToRank, Vote
from optimizer_service.plan import Plan


# ---------------------------------------------------------------- events
@dataclass(frozen=True)
class Submit:
    """Commit ``plan``; its version is assigned by the driver, above every version the job had."""
    plan: Plan


@dataclass(frozen=True)
class VoteIn:
    vote: Vote


@dataclass(frozen=True)
class AckIn:
    ack: Ack


@dataclass(frozen=True)
class Joined:
    """A rank registered (again): what it runs, what it holds committed and built, its iteration."""
    rank: int
    running: int
    held: tuple[int, ...]
    iteration: int


@dataclass(frozen=True)
class Left:
    """A rank's stream broke."""
    rank: int


@dataclass(frozen=True)
class Progress:
    rank: int
    iteration: int


@dataclass(frozen=True)
class Tick:
    pass


Event = Submit | VoteIn | AckIn | Joined | Left | Progress | Tick


# ---------------------------------------------------------------- actions
@dataclass(frozen=True)
class Persist:
    """Append ``record`` to the job's log durably; only then run the actions after it."""
    record: dict


@dataclass(frozen=True)
class Send:
    ranks: tuple[int, ...]
    message: ToRank


@dataclass(frozen=True)
class Refuse:
    """The Submit is refused; ``reason`` says what is wrong and what to do."""
    reason: str


@dataclass(frozen=True)
class Emit:
    """A job event for logs and the Watch stream."""
    kind: str
    version: int
    message: str
    rank: int | None = None


Action = Persist | Send | Refuse | Emit
