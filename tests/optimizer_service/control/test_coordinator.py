"""The coordinator's rules one by one (PROTOCOL.md; Syndicate §5): refusals,
Persist before Send, votes, timeouts, idempotency, epochs, holders, re-sends,
joins and recovery from the durable log."""

from __future__ import annotations

import pytest

from optimizer_service.control import coordinator as co
from optimizer_service.control.coordinator import (
    AckIn,
    Coordinator,
    Emit,
    Joined,
    Left,
    Persist,
    Progress,
    Refuse,
    Send,
    Submit,
    Tick,
    Timing,
    VoteIn,
    recover,
    step,
)
from optimizer_service.control.messages import Abort, Ack, Commit, Prepare, Vote
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan import Plan

JOB = "j"
N = 3


def plan(version: int, world_size: int = N) -> Plan:
    return Plan(version=version, world_size=world_size, channels={0: None}, ops=())


def live(n: int = N, every: int = 4, iteration: int = 0, timing: Timing = Timing()) -> Coordinator:
    """A coordinator with every rank connected at ``iteration``."""
    state = Coordinator.new(JOB, n, 1, every, timing)
    for rank in range(n):
        state, _ = step(state, Joined(rank, 0, (), iteration), 0.0)
    return state


def run(state, events, now=0.0):
    actions = []
    for event in events:
        state, more = step(state, event, now)
        actions += more
    return state, actions


def yes(rank, version, epoch=1):
    return VoteIn(Vote(JOB, rank, version, epoch, True))


def ack(rank, version, epoch=1, committed=True, have_plan=True):
    return AckIn(Ack(JOB, rank, version, epoch, committed, have_plan))


def committed(version=1, n=N, acked=True) -> Coordinator:
    state, _ = run(live(n), [Submit(plan(version, n))] + [yes(r, version) for r in range(n)])
    assert state.committed == version
    if acked:
        state, _ = run(state, [ack(r, version) for r in range(n)])
    return state


def sends(actions):
    return [(a.ranks, a.message) for a in actions if isinstance(a, Send)]


def kinds(actions):
    """The actions as short strings: 'persist:prepare', 'send:Prepare', 'emit:prepared'."""
    out = []
    for a in actions:
        if isinstance(a, Persist):
            out.append(f"persist:{a.record['type']}" + (f":{a.record['decision']}" if "decision" in a.record else ""))
        elif isinstance(a, Send):
            out.append(f"send:{type(a.message).__name__}")
        elif isinstance(a, Emit):
            out.append(f"emit:{a.kind}")
        else:
            out.append("refuse")
    return out


# ------------------------------------------------------------------ submit
def test_submit_persists_the_prepare_before_sending_it_to_every_rank():
    state, actions = step(live(iteration=5), Submit(plan(1)), 10.0)
    assert kinds(actions) == ["persist:prepare", "send:Prepare", "emit:prepared"]
    assert actions[0].record == {"type": "prepare", "version": 1, "epoch": 1, "switch_iteration": 8, "time": 10.0}
    assert sends(actions) == [((0, 1, 2), Prepare(JOB, 1, 1, 8, plan(1)))]
    assert state.txn.deadline == 20.0 and state.highest_version == 1


@pytest.mark.parametrize("iteration,every,margin,switch", [(0, 4, 2, 4), (2, 4, 2, 4), (3, 4, 2, 8), (7, 1, 0, 7),
                                                           (10, 5, 0, 10)])
def test_switch_iteration_is_the_first_check_boundary_after_the_margin(iteration, every, margin, switch):
    state = live(every=every, iteration=iteration, timing=Timing(switch_margin=margin))
    state, _ = step(state, Submit(plan(1)), 0.0)
    assert state.txn.switch_iteration == switch


def test_switch_iteration_follows_the_highest_reported_iteration():
    state, _ = run(live(every=4), [Progress(1, 9), Progress(0, 3)])
    assert state.iteration == 9
    state, _ = step(state, Submit(plan(1)), 0.0)
    assert state.txn.switch_iteration == 12


@pytest.mark.parametrize("setup,submitted,expect", [
    (lambda: live(), plan(1, world_size=4), "is for 4 ranks but job j has 3"),
    (lambda: committed(5), plan(5), "not higher than version 5 that job j already had; use version 6"),
    (lambda: committed(5), plan(3), "not higher than version 5"),
    (lambda: step(live(), Left(2), 0.0)[0], plan(1), "job j is not live: rank(s) 2 are not connected"),
    (lambda: step(live(), Submit(plan(1)), 0.0)[0], plan(2), "plan v1 is still being voted on"),
    (lambda: committed(1, acked=False), plan(2), "committed plan v1 is not yet acknowledged by rank(s) 0, 1, 2"),
])
def test_submit_is_refused_with_one_line_and_the_state_unchanged(setup, submitted, expect):
    state = setup()
    after, actions = step(state, Submit(submitted), 1.0)
    assert after is state
    assert len(actions) == 1 and isinstance(actions[0], Refuse) and expect in actions[0].reason
    assert "\n" not in actions[0].reason


def test_a_submit_after_an_abort_needs_no_acks():
    state, _ = run(live(), [Submit(plan(1)), VoteIn(Vote(JOB, 0, 1, 1, False, "no memory"))])
    assert state.txn.decision == "abort"
    _, actions = step(state, Submit(plan(2)), 1.0)
    assert kinds(actions)[0] == "persist:prepare"


# ------------------------------------------------------------------ votes
def test_all_yes_commits_persisting_the_decision_before_sending_commit():
    state, actions = run(live(iteration=1), [Submit(plan(1))])
    state, actions = run(state, [yes(r, 1) for r in range(N)], now=2.0)
    assert kinds(actions) == ["emit:voted", "emit:voted", "emit:voted", "persist:decision:commit", "send:Commit",
                              "emit:commit"]
    assert actions[3].record == {"type": "decision", "version": 1, "decision": "commit", "reason": "",
                                 "switch_iteration": 4, "epoch": 1, "time": 2.0}
    assert sends(actions) == [((0, 1, 2), Commit(JOB, 1, 1, 4))]
    assert (state.committed, state.committed_plan, state.committed_switch) == (1, plan(1), 4)
    assert state.holders == frozenset()        # nobody acked yet


def test_one_no_aborts_at_once_with_the_ranks_reason():
    state, _ = run(live(), [Submit(plan(1)), yes(0, 1)])
    state, actions = step(state, VoteIn(Vote(JOB, 2, 1, 1, False, "cannot create subgroup (0, 2)")), 3.0)
    assert kinds(actions) == ["emit:voted", "persist:decision:abort", "send:Abort", "emit:abort"]
    assert sends(actions) == [((0, 1, 2), Abort(JOB, 1, 1, "rank 2 voted no: cannot create subgroup (0, 2)"))]
    assert state.committed == 0 and state.txn.decision == "abort"


def test_the_vote_deadline_aborts_naming_the_silent_ranks():
    state, _ = run(live(), [Submit(plan(1)), yes(1, 1)], now=0.0)
    same, actions = step(state, Tick(), 9.9)
    assert same.txn.decision is None and not any(isinstance(a, Persist) for a in actions)
    state, actions = step(state, Tick(), 10.0)
    assert kinds(actions) == ["persist:decision:abort", "send:Abort", "emit:abort"]
    assert actions[0].record["reason"] == "rank(s) 0, 2 did not vote within 10 s"


def test_a_lost_rank_does_not_block_the_transaction_forever():
    state, _ = run(live(), [Submit(plan(1)), yes(0, 1), yes(1, 1), Left(2)])
    state, _ = step(state, yes(2, 1), 1.0)          # from a broken stream: not counted
    assert state.txn.decision is None
    state, _ = step(state, Tick(), 10.0)
    assert state.txn.decision == "abort" and "rank(s) 2 did not vote" in state.txn.reason


def test_left_forgets_the_ranks_vote_and_a_rejoin_gets_the_prepare_again():
    state, _ = run(live(), [Submit(plan(1)), yes(2, 1), Left(2)])
    assert 2 not in state.txn.votes
    state, actions = step(state, Joined(2, 0, (), 0), 1.0)
    assert sends(actions) == [((2,), Prepare(JOB, 1, 1, 4, plan(1)))]
    state, _ = run(state, [yes(r, 1) for r in range(N)])
    assert state.committed == 1


@pytest.mark.parametrize("stray", [
    yes(0, 1, epoch=0), yes(0, 1, epoch=2), yes(0, 2), VoteIn(Vote("other", 0, 1, 1, True)), yes(7, 1),
])
def test_votes_from_another_epoch_version_job_or_rank_are_ignored(stray):
    state, _ = run(live(), [Submit(plan(1)), yes(1, 1), yes(2, 1)])
    after, actions = step(state, stray, 1.0)
    assert after is state and actions == []


def test_duplicate_votes_and_votes_after_the_decision_are_harmless():
    state, _ = run(live(), [Submit(plan(1)), yes(0, 1)])
    again, actions = step(state, yes(0, 1), 1.0)
    assert again is state and actions == []
    state, _ = run(state, [yes(1, 1), yes(2, 1)])
    decided = state
    state, actions = run(state, [yes(0, 1), VoteIn(Vote(JOB, 1, 1, 1, False, "late"))])
    assert state is decided and actions == []


def test_the_decision_is_made_once():
    state, _ = run(live(), [Submit(plan(1))] + [yes(r, 1) for r in range(N)])
    state, actions = run(state, [Tick(), VoteIn(Vote(JOB, 0, 1, 1, False, "x"))], now=100.0)
    assert not any(isinstance(a, Persist) for a in actions) and state.txn.decision == "commit"


# ------------------------------------------------------------------ acks, holders, re-sends
def test_acks_make_holders_and_unlock_the_next_submit():
    state = committed(1, acked=False)
    state, actions = run(state, [ack(0, 1), ack(1, 1), ack(1, 1)])
    assert state.holders == {0, 1} and actions == []
    state, actions = step(state, ack(2, 1), 1.0)
    assert kinds(actions) == ["emit:acknowledged"] and state.everyone_holds_committed()
    assert state.txn.acked == {0, 1, 2}


def test_acks_of_another_version_or_epoch_are_ignored():
    state = committed(2, acked=False)
    for stray in (ack(0, 1), ack(0, 2, epoch=2), ack(0, 3)):
        after, _ = step(state, stray, 1.0)
        assert after is state


def test_commit_is_resent_every_interval_to_unacked_ranks_with_the_plan_where_it_was_lost():
    state = committed(1, acked=False)
    state, _ = run(state, [ack(0, 1), ack(1, 1, have_plan=False)], now=0.0)
    assert state.lacking == {1}
    same, actions = step(state, Tick(), 0.5)
    assert actions == []
    state, actions = step(same, Tick(), 1.0)
    assert sends(actions) == [((1,), Prepare(JOB, 1, 1, 4, plan(1))), ((1,), Commit(JOB, 1, 1, 4)),
                              ((2,), Commit(JOB, 1, 1, 4))]
    _, actions = step(state, Tick(), 1.5)
    assert actions == []                                          # not before the next interval


def test_abort_is_resent_to_connected_ranks_that_did_not_ack_it():
    state, _ = run(live(), [Submit(plan(1)), VoteIn(Vote(JOB, 0, 1, 1, False, "x")),
                            AckIn(Ack(JOB, 0, 1, 1, False)), Left(1)])
    _, actions = step(state, Tick(), 5.0)
    assert sends(actions) == [((2,), Abort(JOB, 1, 1, "rank 0 voted no: x"))]


def test_prepare_is_resent_to_connected_ranks_that_have_not_voted():
    state, _ = run(live(), [Submit(plan(1)), yes(0, 1)])
    _, actions = step(state, Tick(), 1.0)
    assert sends(actions) == [((1, 2), Prepare(JOB, 1, 1, 4, plan(1)))]


def test_a_rank_that_rejoins_without_the_committed_plan_gets_prepare_and_commit():
    state = committed(1)
    state, _ = step(state, Left(1), 1.0)
    assert state.holders == {0, 2}
    state, actions = step(state, Joined(1, 0, (), 2), 2.0)
    assert sends(actions) == [((1,), Prepare(JOB, 1, 1, 4, plan(1))), ((1,), Commit(JOB, 1, 1, 4))]
    assert 1 in state.lacking and not state.everyone_holds_committed()


@pytest.mark.parametrize("running,held", [(1, ()), (0, (1,))])
def test_a_rank_that_rejoins_holding_the_committed_plan_is_a_holder_at_once(running, held):
    state, _ = step(committed(1), Left(1), 1.0)
    state, actions = step(state, Joined(1, running, held, 2), 2.0)
    assert sends(actions) == [] and state.everyone_holds_committed()


def test_after_a_job_restart_the_committed_plan_is_resent_with_a_switch_the_ranks_can_reach():
    state, _ = run(live(every=4, iteration=1000), [Submit(plan(1))] + [yes(r, 1) for r in range(N)])
    assert state.committed_switch == 1004
    state, _ = run(state, [Left(0), Joined(0, 0, (), 0)])        # the job restarted at iteration 0
    assert state.iteration == 1000                                 # the others have not re-registered yet
    _, actions = step(state, Left(1), 0.0)
    assert sends(actions) == []
    state, actions = run(state, [Left(1), Joined(1, 0, (), 0), Left(2), Joined(2, 0, (), 0)])
    assert state.iteration == 0
    assert sends(actions)[-1] == ((2,), Commit(JOB, 1, 1, 4))


def test_a_rank_that_rejoins_during_a_transaction_without_the_previous_commit_delays_the_decision():
    """The next plan commits only while every rank holds the previous one."""
    state, _ = run(committed(1), [Submit(plan(2)), Left(2), Joined(2, 0, (), 0)])
    state, _ = run(state, [yes(r, 2) for r in range(N)])
    assert state.txn.decision is None and state.committed == 1
    state, actions = step(state, ack(2, 1), 1.0)
    assert state.committed == 2 and "persist:decision:commit" in kinds(actions)


def test_the_deadline_names_ranks_that_do_not_hold_the_previous_commit():
    state, _ = run(committed(1), [Submit(plan(2)), Left(2), Joined(2, 0, (), 0)] + [yes(r, 2) for r in range(N)])
    state, _ = step(state, Tick(), 10.0)
    assert state.txn.reason == "rank(s) 2 did not confirm they hold committed plan v1 within 10 s"


def test_a_rank_that_rejoins_after_an_abort_it_did_not_ack_gets_the_abort():
    state, _ = run(live(), [Submit(plan(1)), VoteIn(Vote(JOB, 0, 1, 1, False, "x")), Left(1)])
    _, actions = step(state, Joined(1, 0, (), 0), 1.0)
    assert sends(actions) == [((1,), Abort(JOB, 1, 1, "rank 0 voted no: x"))]


def test_unknown_events_are_a_type_error():
    with pytest.raises(TypeError, match="no rule for str"):
        step(live(), "tick", 0.0)


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(InvalidInputError, match="switch_every >= 1"):
        Coordinator.new(JOB, 3, 1, 0)
    with pytest.raises(InvalidInputError, match="vote_timeout > 0"):
        Timing(vote_timeout=0)


# ------------------------------------------------------------------ recovery
def log_of(*events, n=N):
    """The durable log the coordinator writes for ``events``."""
    state, actions = run(live(n), list(events))
    return [a.record for a in actions if isinstance(a, Persist)]


def test_recover_aborts_what_was_prepared_without_a_decision():
    log = log_of(Submit(plan(1)), yes(0, 1))
    state, actions = recover(JOB, N, 4, log, {1: plan(1)}, epoch=2, now=50.0)
    assert kinds(actions) == ["persist:recover", "emit:recovered", "persist:decision:abort", "send:Abort",
                              "emit:abort"]
    assert actions[0].record == {"type": "recover", "epoch": 2, "time": 50.0}
    reason = "the coordinator restarted (epoch 2) before plan v1 was decided"
    assert sends(actions) == [((0, 1, 2), Abort(JOB, 1, 2, reason))]
    assert state.committed == 0 and state.txn.decision == "abort" and state.connected == frozenset()
    _, refused = step(state, Submit(plan(1)), 51.0)
    assert "not higher than version 1" in refused[0].reason


def test_recover_keeps_a_decided_commit_and_resends_it_to_ranks_that_join_without_it():
    log = log_of(Submit(plan(1)), *[yes(r, 1) for r in range(N)])
    state, actions = recover(JOB, N, 4, log, {1: plan(1)}, epoch=2, now=50.0)
    assert kinds(actions) == ["persist:recover", "emit:recovered"]
    assert (state.committed, state.committed_plan, state.committed_switch) == (1, plan(1), 4)
    assert state.txn.decision == "commit" and state.holders == frozenset()
    state, actions = step(state, Joined(0, 0, (), 3), 51.0)
    assert sends(actions) == [((0,), Prepare(JOB, 1, 2, 4, plan(1))), ((0,), Commit(JOB, 1, 2, 4))]
    state, actions = step(state, Joined(1, 1, (), 3), 51.0)         # already runs it
    assert sends(actions) == [] and state.holders == {1}
    state, _ = step(state, Joined(2, 0, (1,), 3), 51.0)            # holds it
    _, refused = step(state, Submit(plan(2)), 52.0)
    assert "not yet acknowledged by rank(s) 0" in refused[0].reason
    state, _ = step(state, ack(0, 1, epoch=2), 53.0)
    _, actions = step(state, Submit(plan(2)), 54.0)
    assert kinds(actions)[0] == "persist:prepare"


def test_recover_after_an_abort_then_commit_history_keeps_the_newest_commit():
    log = log_of(Submit(plan(1)), *[yes(r, 1) for r in range(N)], *[ack(r, 1) for r in range(N)],
                 Submit(plan(2)), VoteIn(Vote(JOB, 1, 2, 1, False, "x")))
    state, actions = recover(JOB, N, 4, log, {1: plan(1), 2: plan(2)}, epoch=2, now=0.0)
    assert state.committed == 1 and state.txn.version == 2 and state.txn.decision == "abort"
    assert state.highest_version == 2 and sends(actions) == []
    _, actions = step(state, Joined(0, 1, (), 0), 1.0)
    assert sends(actions) == [((0,), Abort(JOB, 2, 2, "rank 1 voted no: x"))]


def test_a_recovered_coordinator_ignores_answers_from_the_old_epoch():
    log = log_of(Submit(plan(1)), *[yes(r, 1) for r in range(N)])
    state, _ = recover(JOB, N, 4, log, {1: plan(1)}, epoch=2, now=0.0)
    state, _ = run(state, [Joined(r, 0, (), 0) for r in range(N)])
    after, _ = step(state, ack(0, 1, epoch=1), 1.0)
    assert after is state


def test_recover_twice_keeps_the_decisions():
    log = log_of(Submit(plan(1)))
    state, actions = recover(JOB, N, 4, log, {1: plan(1)}, epoch=2, now=0.0)
    log += [a.record for a in actions if isinstance(a, Persist)]
    state, actions = recover(JOB, N, 4, log, {1: plan(1)}, epoch=3, now=1.0)
    assert kinds(actions) == ["persist:recover", "emit:recovered"] and state.txn.decision == "abort"


@pytest.mark.parametrize("epoch,plans,expect", [
    (1, {1: plan(1)}, "restarted with epoch 1, but its log already has epoch 1; take epoch 2"),
    (2, {}, "commits plan v1 but the store has no such plan"),
])
def test_recover_refuses_a_stale_epoch_or_a_missing_plan(epoch, plans, expect):
    log = log_of(Submit(plan(1)), *[yes(r, 1) for r in range(N)])
    with pytest.raises(InvalidInputError, match=expect):
        recover(JOB, N, 4, log, plans, epoch=epoch, now=0.0)


def test_the_module_exposes_first_boundary():
    assert [co.first_boundary(i, 4) for i in (0, 1, 4, 5)] == [0, 4, 4, 8]
