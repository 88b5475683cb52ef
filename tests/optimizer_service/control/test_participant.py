"""One rank's side of the 2PC (PROTOCOL.md; Syndicate §5): validate, build off
the hot path, vote, ack only what it holds built, obey epochs, stay idempotent."""

from __future__ import annotations

import pytest

from optimizer_service.control.messages import Abort, Ack, Commit, Prepare, Vote
from optimizer_service.control.participant import (
    AbortIn,
    Build,
    Built,
    CommitIn,
    Discard,
    Participant,
    Prepared,
    PrepareIn,
    SendAck,
    SendVote,
    step,
)
from optimizer_service.plan import Plan

JOB = "j"
N = 4
RANK = 2


def plan(version: int, world_size: int = N) -> Plan:
    return Plan(version=version, world_size=world_size, channels={0: None}, ops=())


def prepare(version, epoch=1, switch=8, world_size=N, job=JOB, body=None):
    return PrepareIn(Prepare(job, version, epoch, switch, body or plan(version, world_size)))


def commit(version, epoch=1, switch=8):
    return CommitIn(Commit(JOB, version, epoch, switch))


def abort(version, epoch=1):
    return AbortIn(Abort(JOB, version, epoch, "because"))


def vote(version, yes=True, reason="", epoch=1):
    return SendVote(Vote(JOB, RANK, version, epoch, yes, reason))


def ack(version, committed=True, have_plan=True, epoch=1):
    return SendAck(Ack(JOB, RANK, version, epoch, committed, have_plan))


def run(state, events):
    actions = []
    for event in events:
        state, more = step(state, event, 0.0)
        actions += more
    return state, actions


def fresh(running=0):
    state = Participant.new(JOB, RANK, N)
    return Participant(JOB, RANK, N, epoch=1, running=running) if running else state


# ------------------------------------------------------------------ prepare and vote
def test_prepare_builds_off_the_hot_path_and_votes_yes_once_built():
    state, actions = step(fresh(), prepare(3), 0.0)
    assert actions == [Build(3, plan(3))]
    assert state.prepared[3] == Prepared(3, 8, None, False, plan(3))
    state, actions = step(state, Built(3, True), 0.0)
    assert actions == [vote(3)] and state.prepared[3].built is True
    assert state.held() == ()                                   # built but not committed


def test_a_failed_build_votes_no_with_the_reason():
    state, actions = run(fresh(), [prepare(3), Built(3, False, "NCCL comm init timed out")])
    assert actions[-1] == vote(3, False, "building plan v3 failed: NCCL comm init timed out")


@pytest.mark.parametrize("event,reason", [
    (prepare(3, world_size=8), "the plan is for a world of 8 ranks but this job has 4"),
    (prepare(3, job="other"), "plan v3 is for job other but rank 2 belongs to job j"),
    (prepare(3, body=plan(4)), "Prepare of version 3 carries a plan of version 4"),
    (prepare(5), "plan v5 is not newer than the running plan v5"),
    (prepare(2), "plan v2 is not newer than the running plan v5"),
])
def test_an_invalid_prepare_gets_a_no_at_once_without_building(event, reason):
    state, actions = step(fresh(running=5), event, 0.0)
    assert actions == [vote(event.prepare.version, False, reason, epoch=state.epoch)]
    assert state.prepared == {}


def test_a_duplicate_prepare_repeats_the_known_vote_and_builds_nothing():
    state, _ = step(fresh(), prepare(3), 0.0)
    same, actions = step(state, prepare(3), 0.0)
    assert actions == [] and same.prepared == state.prepared      # still building: the vote comes later
    state, _ = step(state, Built(3, True), 0.0)
    _, actions = step(state, prepare(3), 0.0)
    assert actions == [vote(3)]
    state, _ = run(fresh(), [prepare(4), Built(4, False, "x")])
    _, actions = step(state, prepare(4), 0.0)
    assert actions == [vote(4, False, "building plan v4 failed: x")]


def test_a_different_plan_under_a_known_version_is_refused():
    state, _ = step(fresh(), prepare(3), 0.0)
    other = Plan(version=3, world_size=N, channels={0: None, 1: "eth1"}, ops=())
    _, actions = step(state, prepare(3, body=other), 0.0)
    assert actions == [vote(3, False, "a different plan already came as version 3")]


def test_a_new_prepare_discards_older_uncommitted_plans_but_keeps_committed_ones():
    state, _ = run(fresh(), [prepare(1), Built(1, True), commit(1), prepare(2), Built(2, True)])
    state, actions = step(state, prepare(3), 0.0)
    assert actions == [Discard(2), Build(3, plan(3))]
    state, actions = run(state, [prepare(4), Built(3, True)])       # v3 was still building: freed when done
    assert actions == [Discard(3), Build(4, plan(4)), Discard(3)]
    assert sorted(state.prepared) == [1, 4]


# ------------------------------------------------------------------ commit
def test_commit_of_a_built_plan_is_acked_and_held():
    state, _ = run(fresh(), [prepare(3, switch=12), Built(3, True)])
    state, actions = step(state, commit(3, switch=8), 0.0)
    assert actions == [ack(3)] and state.held() == (3,)
    assert state.prepared[3].switch_iteration == 8               # the earlier of the two


def test_commit_while_building_is_acked_only_once_built():
    state, _ = run(fresh(), [prepare(3)])
    state, actions = step(state, commit(3), 0.0)
    assert actions == [] and state.prepared[3].committed
    state, actions = step(state, Built(3, True), 0.0)
    assert actions == [ack(3)]


def test_commit_of_an_unknown_version_asks_for_the_plan():
    state, actions = step(fresh(), commit(3), 0.0)
    assert actions == [ack(3, have_plan=False)] and state.prepared == {}


def test_a_committed_plan_whose_build_fails_is_dropped_and_asked_for_again():
    state, _ = run(fresh(), [prepare(3), commit(3)])
    state, actions = step(state, Built(3, False, "x"), 0.0)
    assert actions == [ack(3, have_plan=False)] and state.prepared == {}
    state, actions = run(state, [prepare(3), commit(3), Built(3, True)])      # the coordinator re-sends both
    assert actions == [Build(3, plan(3)), ack(3)] and state.held() == (3,)


def test_commit_of_the_running_or_an_older_version_is_acked():
    state = fresh(running=5)
    for version in (5, 4):
        same, actions = step(state, commit(version), 0.0)
        assert actions == [ack(version)] and same is state


# ------------------------------------------------------------------ abort
def test_abort_discards_and_acks():
    state, _ = run(fresh(), [prepare(3), Built(3, True)])
    state, actions = step(state, abort(3), 0.0)
    assert actions == [Discard(3), ack(3, committed=False)] and state.prepared == {}
    _, actions = step(state, abort(3), 0.0)                       # a duplicate: ack again
    assert actions == [ack(3, committed=False)]


def test_abort_while_building_discards_and_the_late_build_is_freed():
    state, actions = run(fresh(), [prepare(3), abort(3)])
    assert actions[1:] == [Discard(3), ack(3, committed=False)]
    _, actions = step(state, Built(3, True), 0.0)
    assert actions == [Discard(3)]


def test_abort_of_a_committed_or_running_version_is_not_obeyed():
    state, _ = run(fresh(), [prepare(3), Built(3, True), commit(3)])
    same, actions = step(state, abort(3), 0.0)
    assert same.prepared == state.prepared and actions == []
    running = fresh(running=3)
    assert step(running, abort(3), 0.0) == (running, [])


# ------------------------------------------------------------------ epochs
def test_messages_from_an_older_epoch_are_ignored_and_a_newer_one_is_adopted():
    state, _ = step(fresh(), prepare(3, epoch=2), 0.0)
    assert state.epoch == 2
    for stale in (prepare(4, epoch=1), commit(3, epoch=1), abort(3, epoch=1)):
        same, actions = step(state, stale, 0.0)
        assert same is state and actions == []
    state, actions = run(state, [Built(3, True), commit(3, epoch=3)])
    assert state.epoch == 3 and actions == [vote(3, epoch=2), ack(3, epoch=3)]


def test_messages_for_another_job_are_ignored():
    state, _ = run(fresh(), [prepare(3), Built(3, True)])
    for stray in (CommitIn(Commit("other", 3, 9, 8)), AbortIn(Abort("other", 3, 9, "x"))):
        same, actions = step(state, stray, 0.0)
        assert same is state and actions == []


def test_duplicate_built_events_are_harmless():
    state, _ = run(fresh(), [prepare(3), Built(3, True)])
    same, actions = step(state, Built(3, True), 0.0)
    assert same is state and actions == []
    running = fresh(running=3)
    assert step(running, Built(3, True), 0.0) == (running, [])   # never discard what runs


def test_unknown_events_are_a_type_error():
    with pytest.raises(TypeError, match="no rule for int"):
        step(fresh(), 3, 0.0)
