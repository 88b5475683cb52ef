"""The two-phase-commit participant (one enforcer rank) as a pure function
(Syndicate §5, §4.4): ``step(state, event, now) -> (state, actions)``.

The enforcer's link driver feeds it :class:`PrepareIn`, :class:`CommitIn`,
:class:`AbortIn` (messages from the coordinator) and :class:`Built` (its
builder thread finished a plan's subgroups and channels) and executes
:class:`Build`, :class:`Discard`, :class:`SendVote`, :class:`SendAck`. The
switch itself (:class:`SwitchTo`) is decided only by the in-band check at a
check boundary (:mod:`.switch`), never by a message: the training thread never
waits on the service.

A rank votes yes only once the plan is validated and built; it acks a Commit
only while it holds the plan committed *and built* — the coordinator's
``holders`` rely on that (PROTOCOL.md §4.1, lemma A). A restart of the enforcer process
restarts the whole job; a reconnect of the stream keeps this state, and the
driver reports :meth:`Participant.held` in Register.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from optimizer_service.control.messages import Abort, Ack, Commit, Prepare, Vote
from optimizer_service.errors import PlanError
from optimizer_service.plan import Plan


@dataclass(frozen=True)
class Prepared:
    """A plan this rank was asked to prepare. ``built``: None while building,
    then True/False; ``reason`` says why building or validating failed."""

    version: int
    switch_iteration: int
    built: bool | None = None
    committed: bool = False
    plan: Plan | None = None
    reason: str = ""


@dataclass(frozen=True)
class Participant:
    """One rank's protocol state. ``epoch`` is the highest coordinator epoch
    seen; ``running`` the version it runs (0: passthrough)."""

    job: str
    rank: int
    world_size: int
    epoch: int = 0
    running: int = 0
    prepared: Mapping[int, Prepared] = field(default_factory=dict)

    @classmethod
    def new(cls, job: str, rank: int, world_size: int) -> Participant:
        return cls(job, rank, world_size)

    def held(self) -> tuple[int, ...]:
        """Versions held committed and built, not yet running (Register's ``held_versions``)."""
        return tuple(sorted(v for v, e in self.prepared.items() if e.committed and e.built is True))


# ---------------------------------------------------------------- events
@dataclass(frozen=True)
class PrepareIn:
    prepare: Prepare


@dataclass(frozen=True)
class CommitIn:
    commit: Commit


@dataclass(frozen=True)
class AbortIn:
    abort: Abort


@dataclass(frozen=True)
class Built:
    """The enforcer finished building ``version`` (off the training thread);
    a failed build leaves nothing behind."""
    version: int
    ok: bool
    reason: str = ""


Event = PrepareIn | CommitIn | AbortIn | Built


# ---------------------------------------------------------------- actions
@dataclass(frozen=True)
class Build:
    """Validate and build ``plan``'s subgroups and channels off the hot path, then feed :class:`Built`."""
    version: int
    plan: Plan


@dataclass(frozen=True)
class Discard:
    """Free what was built (or is being built) for ``version``."""
    version: int


@dataclass(frozen=True)
class SendVote:
    vote: Vote


@dataclass(frozen=True)
class SendAck:
    ack: Ack


@dataclass(frozen=True)
class SwitchTo:
    """At an agreed check boundary: swap to ``version``'s built runtime (the old one is freed)."""
    version: int


Action = Build | Discard | SendVote | SendAck | SwitchTo


# ---------------------------------------------------------------- helpers
def _vote(state: Participant, version: int, yes: bool, reason: str = "") -> SendVote:
    return SendVote(Vote(state.job, state.rank, version, state.epoch, yes, reason))


def _ack(state: Participant, version: int, committed: bool, have_plan: bool = True) -> SendAck:
    return SendAck(Ack(state.job, state.rank, version, state.epoch, committed, have_plan))


def _without(state: Participant, *versions: int) -> Participant:
    return replace(state, prepared={v: e for v, e in state.prepared.items() if v not in versions})


def _with(state: Participant, entry: Prepared) -> Participant:
    return replace(state, prepared={**state.prepared, entry.version: entry})


def _invalid(state: Participant, prepare: Prepare) -> str | None:
    """Why this rank cannot take the plan (one line), or None."""
    if prepare.job != state.job:
        return f"plan v{prepare.version} is for job {prepare.job} but rank {state.rank} belongs to job {state.job}"
    if prepare.plan.version != prepare.version:
        return f"Prepare of version {prepare.version} carries a plan of version {prepare.plan.version}"
    try:
        prepare.plan.check_world(state.world_size)
    except PlanError as error:
        return str(error)
    if prepare.version <= state.running:
        return f"plan v{prepare.version} is not newer than the running plan v{state.running}"
    return None


# ---------------------------------------------------------------- handlers
def _on_prepare(state: Participant, prepare: Prepare) -> tuple[Participant, list[Action]]:
    version = prepare.version
    entry = state.prepared.get(version)
    if entry is not None:                      # a duplicate: answer again what is known
        if entry.plan is not None and entry.plan != prepare.plan:
            return state, [_vote(state, version, False, f"a different plan already came as version {version}")]
        if entry.built is None:
            return state, []
        return state, [_vote(state, version, entry.built, entry.reason)]
    reason = _invalid(state, prepare)
    if reason is not None:
        return state, [_vote(state, version, False, reason)]
    # Uncommitted plans below this one can never be committed any more: the
    # coordinator prepares a version only after deciding every earlier one and
    # after this rank acked the newest commit (PROTOCOL.md §4.5).
    stale = sorted(v for v, e in state.prepared.items() if v < version and not e.committed)
    actions: list[Action] = [Discard(v) for v in stale if state.prepared[v].built is not False]
    state = _with(_without(state, *stale), Prepared(version, prepare.switch_iteration, None, False, prepare.plan))
    return state, actions + [Build(version, prepare.plan)]


def _on_commit(state: Participant, commit: Commit) -> tuple[Participant, list[Action]]:
    version = commit.version
    if version <= state.running:
        return state, [_ack(state, version, True)]
    entry = state.prepared.get(version)
    if entry is None or entry.built is False:
        return _without(state, version), [_ack(state, version, True, have_plan=False)]
    entry = replace(entry, committed=True, switch_iteration=min(entry.switch_iteration, commit.switch_iteration))
    state = _with(state, entry)
    return state, [_ack(state, version, True)] if entry.built else []   # building: ack once built


def _on_abort(state: Participant, abort: Abort) -> tuple[Participant, list[Action]]:
    version = abort.version
    entry = state.prepared.get(version)
    if version == state.running or (entry is not None and entry.committed):
        return state, []         # a decided commit never changes: an Abort for it is not obeyed
    actions: list[Action] = [Discard(version)] if entry is not None and entry.built is not False else []
    return _without(state, version), actions + [_ack(state, version, False)]


def _on_built(state: Participant, built: Built) -> tuple[Participant, list[Action]]:
    version = built.version
    entry = state.prepared.get(version)
    if entry is None:            # discarded while building: free what the builder made
        return state, [Discard(version)] if built.ok and version != state.running else []
    if entry.built is not None:
        return state, []
    if built.ok:
        state = _with(state, replace(entry, built=True))
        return state, [_ack(state, version, True) if entry.committed else _vote(state, version, True)]
    reason = f"building plan v{version} failed: {built.reason or 'no reason given'}"
    if entry.committed:          # ask for the plan again: the coordinator re-sends Prepare and Commit
        return _without(state, version), [_ack(state, version, True, have_plan=False)]
    state = _with(state, replace(entry, built=False, reason=reason))
    return state, [_vote(state, version, False, reason)]


def step(state: Participant, event: Event, now: float) -> tuple[Participant, list[Action]]:
    """The rank's next protocol state and the actions to execute, in order.
    Messages from an epoch below the highest seen are ignored; a higher one is
    adopted. ``now`` is unused today (the participant has no timeouts: it never
    waits); it is there so both sides have one signature."""
    if isinstance(event, Built):
        return _on_built(state, event)
    if isinstance(event, PrepareIn):
        message = event.prepare
    elif isinstance(event, CommitIn):
        message = event.commit
    elif isinstance(event, AbortIn):
        message = event.abort
    else:
        raise TypeError(f"the participant has no rule for {type(event).__name__}")
    if message.epoch < state.epoch:
        return state, []
    if message.job != state.job:
        return state, [_vote(state, message.version, False, _invalid(state, message))] \
            if isinstance(message, Prepare) else []
    if message.epoch > state.epoch:
        state = replace(state, epoch=message.epoch)
    if isinstance(message, Prepare):
        return _on_prepare(state, message)
    if isinstance(message, Commit):
        return _on_commit(state, message)
    return _on_abort(state, message)
