"""The two-phase-commit coordinator as a pure function (Syndicate §5, in the
style of torchft's ``quorum_compute``): ``step(state, event, now) -> (state,
actions)``, with the clock injected and no I/O. The service driver feeds it
:class:`Submit`, :class:`VoteIn`, :class:`AckIn`, :class:`Joined`,
:class:`Left`, :class:`Progress` and :class:`Tick` events and executes the
returned actions in list order: :class:`Persist` (durable in the store before
anything after it runs), :class:`Send`, :class:`Refuse`, :class:`Emit` (the
events and actions are defined in :mod:`.coordinator_events` and re-exported
here).

The rules, and the argument why they keep every rank on the same plan, are in
``PROTOCOL.md`` next to this file. The load-bearing ones:

* one transaction at a time, versions strictly increasing (aborted ones too);
* a decision is made once per version, Persisted before it is sent, and never
  changes (:func:`recover` aborts what was prepared without a decision);
* ``holders``: the ranks whose *current* stream said they hold the committed
  plan built. A new plan is prepared, and committed, only while every rank is a
  holder of the previous one (PROTOCOL.md §4.1, lemma D).

The log records are described in :mod:`.records`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from optimizer_service.control import records
from optimizer_service.control.coordinator_events import (
    AckIn,
    Action,
    Emit,
    Event,
    Joined,
    Left,
    Persist,
    Progress,
    Refuse,
    Send,
    Submit,
    Tick,
    VoteIn,
)
from optimizer_service.control.messages import Abort, Commit, Prepare, ToRank
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan import Plan

__all__ = [
    "AckIn", "Action", "Coordinator", "Emit", "Event", "Joined", "Left", "Persist", "Progress", "Refuse", "Send",
    "Submit", "Tick", "Timing", "Txn", "VoteIn", "first_boundary", "recover", "step",
]


@dataclass(frozen=True)
class Timing:
    """``vote_timeout`` and ``resend_interval`` in seconds; ``switch_margin`` in
    iterations (how far ahead of the highest reported iteration a plan may switch)."""

    vote_timeout: float = 10.0
    resend_interval: float = 1.0
    switch_margin: int = 2

    def __post_init__(self) -> None:
        if not (self.vote_timeout > 0 and self.resend_interval > 0 and self.switch_margin >= 0):
            raise InvalidInputError(f"timing needs vote_timeout > 0, resend_interval > 0 and switch_margin >= 0, "
                                    f"got {self.vote_timeout}, {self.resend_interval}, {self.switch_margin}")


# ---------------------------------------------------------------- state
@dataclass(frozen=True)
class Txn:
    """The transaction in flight, or the last one decided."""

    version: int
    plan: Plan | None
    switch_iteration: int
    deadline: float
    votes: Mapping[int, tuple[bool, str]] = field(default_factory=dict)   # rank -> (yes, reason)
    decision: str | None = None                                           # "commit" / "abort"
    reason: str = ""
    acked: frozenset[int] = frozenset()                                   # ranks that acked the decision

    @property
    def decided(self) -> bool:
        return self.decision is not None


@dataclass(frozen=True)
class Coordinator:
    """One job's coordinator state. ``committed`` is the newest committed
    version (0: none); ``holders`` the connected ranks known to hold it built;
    ``lacking`` those known not to have it (they get Prepare with Commit);
    ``progress`` each rank's last reported iteration, ``iteration`` their max."""

    job: str
    world_size: int
    epoch: int
    switch_every: int
    timing: Timing = Timing()
    committed: int = 0
    committed_plan: Plan | None = None
    committed_switch: int = 0
    txn: Txn | None = None
    connected: frozenset[int] = frozenset()
    iteration: int = 0
    progress: Mapping[int, int] = field(default_factory=dict)
    holders: frozenset[int] = frozenset()
    lacking: frozenset[int] = frozenset()
    highest_version: int = 0
    last_resend: float = -math.inf

    @classmethod
    def new(cls, job: str, world_size: int, epoch: int, switch_every: int, timing: Timing = Timing()) -> Coordinator:
        if world_size < 1 or switch_every < 1 or epoch < 1:
            raise InvalidInputError(f"coordinator for job {job!r} needs world_size >= 1, switch_every >= 1 and "
                                    f"epoch >= 1, got {world_size}, {switch_every}, {epoch}")
        return cls(job, world_size, epoch, switch_every, timing)

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(range(self.world_size))

    def everyone_holds_committed(self) -> bool:
        """Whether a next plan may be prepared or committed: every rank holds the
        committed plan built (trivially true before the first commit)."""
        return self.committed == 0 or self.holders >= frozenset(self.ranks)


# ---------------------------------------------------------------- helpers
def first_boundary(iteration: int, every: int) -> int:
    """The first multiple of ``every`` at or after ``iteration``."""
    return -(-max(iteration, 0) // every) * every


def _ranks_text(ranks) -> str:
    return ", ".join(map(str, sorted(ranks)))


def _switch_for(state: Coordinator, rank: int, planned: int) -> int:
    """The switch iteration to send one rank: the planned one, or earlier when
    the rank reports an iteration far below it (the job restarted at 0)."""
    fresh = first_boundary(state.progress.get(rank, 0) + state.timing.switch_margin, state.switch_every)
    return min(planned, fresh)


def _send_committed(state: Coordinator, rank: int, with_plan: bool) -> list[Action]:
    switch = _switch_for(state, rank, state.committed_switch)
    actions: list[Action] = []
    if with_plan:
        actions.append(Send((rank,), Prepare(state.job, state.committed, state.epoch, switch, state.committed_plan)))
    actions.append(Send((rank,), Commit(state.job, state.committed, state.epoch, switch)))
    return actions


def _submit_refusal(state: Coordinator, plan: Plan) -> str | None:
    v, txn = plan.version, state.txn
    if plan.world_size != state.world_size:
        return (f"plan v{v} is for {plan.world_size} ranks but job {state.job} has {state.world_size}; "
                f"plan for {state.world_size} ranks")
    if v <= state.highest_version:
        return (f"plan version {v} is not higher than version {state.highest_version} that job {state.job} "
                f"already had; use version {state.highest_version + 1} or higher")
    missing = frozenset(state.ranks) - state.connected
    if missing:
        return (f"job {state.job} is not live: rank(s) {_ranks_text(missing)} are not connected; "
                f"submit again when every rank is registered")
    if txn is not None and not txn.decided:
        return f"plan v{txn.version} is still being voted on; submit again after it is decided"
    if not state.everyone_holds_committed():
        return (f"committed plan v{state.committed} is not yet acknowledged by rank(s) "
                f"{_ranks_text(frozenset(state.ranks) - state.holders)}; submit again once every rank holds it")
    return None


def _decide(state: Coordinator, decision: str, reason: str, now: float) -> tuple[Coordinator, list[Action]]:
    """Decide the transaction in flight, once: Persist, then Send to every rank."""
    txn = state.txn
    assert txn is not None and not txn.decided, "a transaction is decided once"
    decided = replace(txn, decision=decision, reason=reason, acked=frozenset())
    record = records.decision_record(txn.version, decision, reason, txn.switch_iteration, state.epoch, now)
    if decision == records.COMMIT:
        state = replace(state, txn=decided, committed=txn.version, committed_plan=txn.plan,
                        committed_switch=txn.switch_iteration, holders=frozenset(), lacking=frozenset(),
                        last_resend=now)
        message: ToRank = Commit(state.job, txn.version, state.epoch, txn.switch_iteration)
        text = f"plan v{txn.version} committed; ranks switch at iteration {txn.switch_iteration} at the earliest"
    else:
        state = replace(state, txn=decided, last_resend=now)
        message = Abort(state.job, txn.version, state.epoch, reason)
        text = f"plan v{txn.version} aborted: {reason}"
    return state, [Persist(record), Send(state.ranks, message), Emit(decision, txn.version, text)]


def _maybe_decide(state: Coordinator, now: float, actions: list[Action]) -> tuple[Coordinator, list[Action]]:
    txn = state.txn
    if txn is None or txn.decided:
        return state, actions
    for rank in sorted(txn.votes):
        yes, reason = txn.votes[rank]
        if not yes:
            state, more = _decide(state, records.ABORT, f"rank {rank} voted no: {reason}", now)
            return state, actions + more
    if len(txn.votes) == state.world_size and state.everyone_holds_committed():
        state, more = _decide(state, records.COMMIT, "", now)
        return state, actions + more
    return state, actions


def _from_current_stream(state: Coordinator, job: str, epoch: int, rank: int) -> bool:
    """Answers count only from this job, this epoch, and a rank whose stream is up."""
    return job == state.job and epoch == state.epoch and rank in state.connected


# ---------------------------------------------------------------- handlers
def _on_submit(state: Coordinator, event: Submit, now: float) -> tuple[Coordinator, list[Action]]:
    plan = event.plan
    reason = _submit_refusal(state, plan)
    if reason is not None:
        return state, [Refuse(reason)]
    switch = first_boundary(state.iteration + state.timing.switch_margin, state.switch_every)
    txn = Txn(plan.version, plan, switch, deadline=now + state.timing.vote_timeout)
    state = replace(state, txn=txn, highest_version=plan.version, last_resend=now)
    return state, [Persist(records.prepare_record(plan.version, state.epoch, switch, now)),
                   Send(state.ranks, Prepare(state.job, plan.version, state.epoch, switch, plan)),
                   Emit("prepared", plan.version, f"plan v{plan.version} prepared on {state.world_size} ranks; votes "
                        f"due in {state.timing.vote_timeout:g} s; switch at iteration {switch} at the earliest")]


def _on_vote(state: Coordinator, event: VoteIn, now: float) -> tuple[Coordinator, list[Action]]:
    vote, txn = event.vote, state.txn
    if (not _from_current_stream(state, vote.job, vote.epoch, vote.rank) or txn is None or txn.decided
            or vote.version != txn.version or txn.votes.get(vote.rank) == (vote.yes, vote.reason)):
        return state, []
    state = replace(state, txn=replace(txn, votes={**txn.votes, vote.rank: (vote.yes, vote.reason)}))
    text = "yes" if vote.yes else f"no: {vote.reason}"
    return _maybe_decide(state, now, [Emit("voted", vote.version, f"rank {vote.rank} voted {text}", vote.rank)])


def _on_ack(state: Coordinator, event: AckIn, now: float) -> tuple[Coordinator, list[Action]]:
    ack, txn = event.ack, state.txn
    if not _from_current_stream(state, ack.job, ack.epoch, ack.rank):
        return state, []
    if not ack.committed:
        if txn is not None and txn.decision == records.ABORT and txn.version == ack.version:
            state = replace(state, txn=replace(txn, acked=txn.acked | {ack.rank}))
        return state, []
    if ack.version != state.committed or state.committed == 0:
        return state, []
    if not ack.have_plan:
        return replace(state, holders=state.holders - {ack.rank}, lacking=state.lacking | {ack.rank}), []
    if ack.rank in state.holders:
        return state, []
    state = _hold(state, ack.rank)
    actions: list[Action] = []
    if state.everyone_holds_committed():
        actions.append(Emit("acknowledged", state.committed, f"every rank holds plan v{state.committed}"))
    return _maybe_decide(state, now, actions)


def _hold(state: Coordinator, rank: int) -> Coordinator:
    txn = state.txn
    if txn is not None and txn.version == state.committed:
        txn = replace(txn, acked=txn.acked | {rank})
    return replace(state, txn=txn, holders=state.holders | {rank}, lacking=state.lacking - {rank})


def _on_joined(state: Coordinator, event: Joined, now: float) -> tuple[Coordinator, list[Action]]:
    rank = event.rank
    if rank not in state.ranks:
        return state, []
    progress = {**state.progress, rank: event.iteration}
    state = replace(state, connected=state.connected | {rank}, progress=progress, iteration=max(progress.values()))
    actions: list[Action] = [Emit("joined", event.running, f"rank {rank} joined running v{event.running} at "
                                  f"iteration {event.iteration}", rank)]
    if state.committed:
        if event.running == state.committed or state.committed in event.held:
            state = _hold(state, rank)
        else:
            state = replace(state, holders=state.holders - {rank}, lacking=state.lacking | {rank})
            actions += _send_committed(state, rank, with_plan=True)
    txn = state.txn
    if txn is not None and not txn.decided:
        votes = {r: v for r, v in txn.votes.items() if r != rank}    # the new stream votes again
        state = replace(state, txn=replace(txn, votes=votes))
        actions.append(Send((rank,), Prepare(state.job, txn.version, state.epoch,
                                             _switch_for(state, rank, txn.switch_iteration), txn.plan)))
    elif txn is not None and txn.decision == records.ABORT and rank not in txn.acked:
        actions.append(Send((rank,), Abort(state.job, txn.version, state.epoch, txn.reason)))
    return state, actions


def _on_left(state: Coordinator, event: Left, now: float) -> tuple[Coordinator, list[Action]]:
    rank, txn = event.rank, state.txn
    if rank not in state.connected:
        return state, []
    if txn is not None and not txn.decided:
        txn = replace(txn, votes={r: v for r, v in txn.votes.items() if r != rank})
    state = replace(state, connected=state.connected - {rank}, holders=state.holders - {rank},
                    lacking=state.lacking - {rank}, txn=txn)
    return state, [Emit("left", state.committed, f"rank {rank} disconnected", rank)]


def _on_progress(state: Coordinator, event: Progress, now: float) -> tuple[Coordinator, list[Action]]:
    if event.rank not in state.ranks or state.progress.get(event.rank) == event.iteration:
        return state, []
    progress = {**state.progress, event.rank: event.iteration}
    return replace(state, progress=progress, iteration=max(progress.values())), []


def _on_tick(state: Coordinator, event: Tick, now: float) -> tuple[Coordinator, list[Action]]:
    txn = state.txn
    if txn is not None and not txn.decided and now >= txn.deadline:
        silent = [r for r in state.ranks if r not in txn.votes]
        timeout = f"{state.timing.vote_timeout:g} s"
        if silent:
            reason = f"rank(s) {_ranks_text(silent)} did not vote within {timeout}"
        else:
            reason = (f"rank(s) {_ranks_text(frozenset(state.ranks) - state.holders)} did not confirm they hold "
                      f"committed plan v{state.committed} within {timeout}")
        return _decide(state, records.ABORT, reason, now)
    if now - state.last_resend < state.timing.resend_interval:
        return state, []
    return _resend(replace(state, last_resend=now))


def _resend(state: Coordinator) -> tuple[Coordinator, list[Action]]:
    """Every ``resend_interval``: what a connected rank has not answered yet."""
    actions: list[Action] = []
    txn = state.txn
    if state.committed:
        for rank in sorted(state.connected - state.holders):
            actions += _send_committed(state, rank, with_plan=rank in state.lacking)
    if txn is not None and not txn.decided:
        silent = tuple(sorted(state.connected - set(txn.votes)))
        if silent:
            actions.append(Send(silent, Prepare(state.job, txn.version, state.epoch, txn.switch_iteration, txn.plan)))
    elif txn is not None and txn.decision == records.ABORT:
        unacked = tuple(sorted(state.connected - txn.acked))
        if unacked:
            actions.append(Send(unacked, Abort(state.job, txn.version, state.epoch, txn.reason)))
    return state, actions


_HANDLERS = {Submit: _on_submit, VoteIn: _on_vote, AckIn: _on_ack, Joined: _on_joined, Left: _on_left,
             Progress: _on_progress, Tick: _on_tick}


def step(state: Coordinator, event: Event, now: float) -> tuple[Coordinator, list[Action]]:
    """The coordinator's next state and the actions to execute, in order."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"the coordinator has no rule for {type(event).__name__}")
    return handler(state, event, now)


# ---------------------------------------------------------------- recovery
def recover(job: str, world_size: int, switch_every: int, log: Sequence[Mapping], plans: Mapping[int, Plan],
            epoch: int, now: float, timing: Timing = Timing()) -> tuple[Coordinator, list[Action]]:
    """A restarted coordinator, rebuilt from its durable log (:mod:`.records`).

    ``epoch`` must be above every epoch in the log. A version prepared without a
    decision is aborted (Persisted, then Abort sent to every rank); a decided
    commit stays committed, and Prepare+Commit go to each rank that (re)joins
    without it and again every ``resend_interval`` until it acks. Nobody is
    connected and nobody is a holder until ranks join again."""
    seen = records.replay(log)
    if epoch <= seen.max_epoch:
        raise InvalidInputError(f"coordinator for job {job!r} restarted with epoch {epoch}, but its log already "
                                f"has epoch {seen.max_epoch}; take epoch {seen.max_epoch + 1} or higher")
    state = Coordinator.new(job, world_size, epoch, switch_every, timing)
    committed = seen.committed
    if committed and committed not in plans:
        raise InvalidInputError(f"the log of job {job!r} commits plan v{committed} but the store has no such plan")
    state = replace(state, committed=committed, committed_plan=plans.get(committed),
                    committed_switch=seen.prepared.get(committed, 0), highest_version=seen.last, last_resend=now)
    actions: list[Action] = [Persist(records.recover_record(epoch, now)),
                             Emit("recovered", committed, f"coordinator restarted with epoch {epoch}; "
                                  f"committed plan v{committed}")]
    for version in seen.undecided:          # normally only the last one
        state = replace(state, txn=Txn(version, plans.get(version), seen.prepared[version], deadline=now))
        state, more = _decide(state, records.ABORT, f"the coordinator restarted (epoch {epoch}) before plan "
                              f"v{version} was decided", now)
        actions += more
    last = seen.last
    if last and last in seen.decisions:
        decision, reason = seen.decisions[last]
        state = replace(state, txn=Txn(last, plans.get(last), seen.prepared[last], deadline=now,
                                       decision=decision, reason=reason))
    return state, actions
