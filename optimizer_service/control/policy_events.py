"""The replanning policy's inputs and outputs as values: its events (what the
service feeds it) and its actions (what it asks the service to do, and the
decisions it records). Re-exported by :mod:`optimizer_service.control.policy`,
whose docstring says when each event is fed and what each action asks for.

Every action has a ``kind`` (a short word for the job's event log and the
dashboard) and a ``reason`` (one human-readable sentence); ``str(action)`` is
``"<kind>: <reason>"``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


# ---------------------------------------------------------------- events
@dataclass(frozen=True)
class Iteration:
    """One completed training iteration of the job, in order: its index, its
    duration and the dispatcher waits in it (seconds), and the plan version the
    ranks ran (0: passthrough, no plan); ``channel_seconds``: ``(channel,
    seconds)`` pairs, the time the ranks' motifs took on each channel (mean over
    ranks; none in passthrough)."""
    index: int
    seconds: float
    wait_seconds: float = 0.0
    running_version: int = 0
    channel_seconds: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class SearchDone:
    """The search asked for by :class:`RequestPlan` ``request`` produced plan
    ``version`` (stored, not committed), which the cost model predicts to take
    ``predicted_seconds`` per iteration; ``running_seconds`` is the model's time
    of the running plan priced the same way (same traces, topology and
    scheduler; None when it could not be priced); ``bound_seconds`` is the lower
    bound on the iteration time in the cluster state the search saw
    (:mod:`optimizer_service.syndicate.bound`; None when unknown)."""
    request: int
    version: int
    predicted_seconds: float
    running_seconds: float | None = None
    bound_seconds: float | None = None


@dataclass(frozen=True)
class SearchFailed:
    """Search ``request`` failed, was aborted or produced no plan."""
    request: int
    reason: str


@dataclass(frozen=True)
class Committed:
    """The coordinator committed plan ``version`` (any commit of the job, asked
    for by this policy or not). ``same_as``: the version whose plan it re-installs
    when a :class:`RollBack` was carried out under a new version number (the
    coordinator's versions only grow); its measurements move to ``version``."""
    version: int
    predicted_seconds: float | None = None
    same_as: int | None = None


@dataclass(frozen=True)
class CommitFailed:
    """The commit of ``version`` was aborted (a rank voted no, votes timed out)."""
    version: int
    reason: str


@dataclass(frozen=True)
class ClusterChanged:
    """The cluster state the job runs on is now ``cluster`` (e.g. a hash of the
    calibrated topology); measurements taken under another state no longer count."""
    cluster: str


@dataclass(frozen=True)
class Pause:
    """An operator paused replanning for the job."""
    reason: str = ""


@dataclass(frozen=True)
class Resume:
    """An operator resumed replanning for the job."""
    reason: str = ""


@dataclass(frozen=True)
class ReplanNow:
    """An operator asked for a search now (cooldowns and triggers aside)."""
    reason: str = ""


@dataclass(frozen=True)
class Tick:
    """Time passed (lets a search or commit that never answers time out)."""


Event = (Iteration | SearchDone | SearchFailed | Committed | CommitFailed | ClusterChanged | Pause | Resume | ReplanNow
         | Tick)


# ---------------------------------------------------------------- actions
class _Said:
    """What every action shares: its text is ``"kind: reason"`` (the job event the service stores)."""

    def __str__(self) -> str:
        return f"{self.kind}: {self.reason}"


@dataclass(frozen=True)
class RequestPlan(_Said):
    """Start a search for a better plan; answer with :class:`SearchDone` or
    :class:`SearchFailed` carrying ``request``. ``trigger`` is the word of the
    :class:`~.triggers.Trigger` that started it: ``first``, ``cluster`` (a
    reported or a measured change), ``slow``, ``waits``, ``operator``."""
    request: int
    trigger: str
    reason: str
    kind: ClassVar[str] = "replan"


@dataclass(frozen=True)
class CancelSearch(_Said):
    """Stop search ``request``; its result, should it still come, is ignored."""
    request: int
    reason: str
    kind: ClassVar[str] = "cancel"


@dataclass(frozen=True)
class Commit(_Said):
    """Commit plan ``version`` (submit it to the 2PC coordinator); answer with
    :class:`Committed` or :class:`CommitFailed`. ``predicted_seconds`` is the
    iteration time expected of it, ``baseline_seconds`` the running plan's
    measured median; their ratio is the predicted gain."""
    version: int
    predicted_seconds: float
    baseline_seconds: float
    reason: str
    kind: ClassVar[str] = "commit"

    @property
    def gain(self) -> float:
        return 1.0 - self.predicted_seconds / self.baseline_seconds


@dataclass(frozen=True)
class RollBack(_Said):
    """Re-install plan ``to_version`` (0: passthrough) instead of ``from_version``;
    answer with :class:`Committed` (``same_as=to_version`` when re-submitted under
    a new version) or :class:`CommitFailed`. ``cause``: the word of the
    :class:`~.triggers.Trigger`, ``trial`` (the new plan measured slower than the
    previous one) or ``restore`` (a plan known to be faster in this cluster state)."""
    to_version: int
    from_version: int
    cause: str
    reason: str
    kind: ClassVar[str] = "rollback"


@dataclass(frozen=True)
class Note(_Said):
    """A decision that changes nothing outside the policy, recorded with its
    reason: ``not-committed``, ``kept``, ``abandoned``, ``search-failed``,
    ``commit-failed``, ``timeout``, ``committed``, ``cluster``, ``drift``,
    ``cleared``, ``paused``, ``resumed``, ``ignored``."""
    kind: str
    reason: str


Action = RequestPlan | CancelSearch | Commit | RollBack | Note
