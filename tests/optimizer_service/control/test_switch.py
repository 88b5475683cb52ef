"""The in-band check at switch boundaries (PROTOCOL.md, "The in-band check"):
every rank proposes, all take the MIN, all switch together or none does."""

from __future__ import annotations

import pytest

from optimizer_service.control.participant import Discard, Participant, Prepared, SwitchTo
from optimizer_service.control.switch import SwitchError, agree, is_check, proposal
from optimizer_service.plan import Plan


def plan(version):
    return Plan(version=version, world_size=2, channels={0: None}, ops=())


def rank(running=0, **entries):
    """A rank holding ``v3=(switch, built, committed)`` entries."""
    prepared = {int(name[1:]): Prepared(int(name[1:]), switch, built, committed, plan(int(name[1:])))
                for name, (switch, built, committed) in entries.items()}
    return Participant("j", 0, 2, epoch=1, running=running, prepared=prepared)


@pytest.mark.parametrize("iteration,every,expect", [(0, 4, True), (4, 4, True), (6, 4, False), (7, 1, True)])
def test_is_check(iteration, every, expect):
    assert is_check(iteration, every) is expect


def test_is_check_refuses_a_bad_setting():
    with pytest.raises(ValueError, match="switch_every must be >= 1"):
        is_check(3, 0)


def test_proposal_is_the_newest_committed_built_and_due_version():
    state = rank(running=1, v2=(4, True, True), v3=(8, True, True), v4=(4, True, False), v5=(4, None, True))
    assert proposal(state, 4) == 2                 # v3 not due, v4 not committed, v5 not built
    assert proposal(state, 8) == 3
    assert proposal(rank(running=6), 8) == 6       # nothing held: what it runs


def test_proposal_is_never_below_the_running_version():
    assert proposal(rank(running=5, v3=(0, True, True)), 8) == 5


def test_agree_switches_to_the_common_version_and_discards_older_ones():
    state = rank(running=1, v2=(4, True, True), v3=(4, True, True), v4=(4, True, False))
    state, actions = agree(state, 8, 3)
    assert actions == [SwitchTo(3), Discard(2)]
    assert state.running == 3 and sorted(state.prepared) == [4]


def test_agree_on_the_running_version_changes_nothing_held_above_it():
    state = rank(running=1, v2=(4, True, True))
    after, actions = agree(state, 4, 1)
    assert actions == [] and after.prepared == state.prepared


def test_agree_raises_when_the_rank_cannot_run_the_common_version():
    with pytest.raises(SwitchError, match="rank 0 must switch to plan v3 at iteration 8 but does not hold it"):
        agree(rank(running=1, v4=(4, True, True)), 8, 3)
    with pytest.raises(SwitchError, match="holds it still building and committed"):
        agree(rank(running=1, v3=(4, None, True)), 8, 3)
    with pytest.raises(SwitchError, match="below the running plan v4"):
        agree(rank(running=4), 8, 3)


def test_three_ranks_that_heard_different_things_agree_on_the_oldest_common_plan():
    ranks = [rank(running=1, v2=(4, True, True), v3=(4, True, True)),    # heard both commits
             rank(running=1, v2=(4, True, True), v3=(4, True, False)),   # v3's Commit is late
             rank(running=1, v2=(4, True, True))]                        # v3's Prepare is late
    common = min(proposal(r, 4) for r in ranks)
    assert common == 2
    after = [agree(r, 4, common)[0] for r in ranks]
    assert {r.running for r in after} == {2}
    assert [sorted(r.prepared) for r in after] == [[3], [3], []]
