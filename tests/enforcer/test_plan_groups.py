"""Multiproc (loopback): a plan on the world and its ``new_group`` subgroups at once, and the sequence
numbers a plan's keys count (every collective of a group, planned or not)."""

import pytest

from tests.enforcer import group_ranks
from tests.support.multiproc import run_world

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


def test_collectives_no_plan_carries_still_take_their_sequence_number():
    for rank, result in enumerate(run_world(2, group_ranks.counted_collectives, backend="p2enforcer")):
        assert result["mismatches"] == [], f"rank {rank}"
        assert result["enforced"] == [("all_reduce", 0), ("all_reduce", 1), ("all_reduce", 2)], f"rank {rank}"


def test_a_plan_runs_on_every_subgroup_it_names_and_leaves_them_when_the_next_does_not():
    results = run_world(4, group_ranks.subgroup_plans, backend="p2enforcer", timeout=240)
    for rank, result in enumerate(results):
        replica, peer = ((0, 1) if rank < 2 else (2, 3)), ((0, 2) if rank % 2 == 0 else (1, 3))
        assert result["built"] == sorted([replica, peer, (0, 1, 2, 3)]), f"rank {rank}"
        assert result["mismatches"] == [], f"rank {rank}"
        assert result["enforced"] == sorted([replica, peer, (0, 1, 2, 3)]), f"rank {rank}"
        assert result["after"] == [True, True, 8], f"rank {rank}"
