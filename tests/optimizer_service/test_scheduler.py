"""optSched, the critical-path list scheduler: hand-computed DAGs and invariants."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.scheduler import COMPUTE, Task, bottom_levels, schedule


def test_a_chain_runs_back_to_back():
    tasks = [Task("fwd", 2.0), Task("ar", 3.0, channel=0, after=(0,)), Task("opt", 1.0, after=(1,))]
    s = schedule(tasks)
    assert s.start == (0.0, 2.0, 5.0) and s.seconds == 6.0
    assert s.sequence == {1: 0}
    assert s.compute_idle_fraction(tasks) == pytest.approx(0.5)


def test_communication_overlaps_compute():
    tasks = [Task("A", 2.0), Task("M1", 3.0, channel=0), Task("B", 2.0, after=(0,)),
             Task("M2", 1.0, channel=0, after=(0,))]
    s = schedule(tasks)
    assert s.start == (0.0, 0.0, 2.0, 3.0) and s.seconds == 4.0


def test_the_motif_on_the_critical_path_goes_first():
    tasks = [Task("X", 1.0, channel=0), Task("Y", 2.0, channel=0), Task("C", 5.0, after=(0,))]
    assert bottom_levels(tasks) == [6.0, 2.0, 5.0]
    s = schedule(tasks)
    assert s.order.index(0) < s.order.index(1)
    assert s.seconds == 6.0  # Y first would give 8


def test_channels_bound_concurrency_and_overlapping_motifs_share_a_number():
    same = [Task("a", 2.0, channel=0), Task("b", 2.0, channel=0)]
    assert schedule(same).seconds == 4.0
    assert schedule(same, capacity=2).seconds == 2.0
    apart = [Task("a", 2.0, channel=0), Task("b", 2.0, channel=1)]
    s = schedule(apart)
    assert s.seconds == 2.0 and s.sequence == {0: 0, 1: 0}
    assert schedule(same).sequence == {0: 0, 1: 1}


def test_a_slower_option_on_a_disjoint_channel_beats_the_greedy_choice():
    # In the spirit of Syndicate's Figure 6: op A is fastest on channel 0 (4 s) but can also run on
    # channel 1 (5 s); op B only runs on channel 0 (4 s); the optimizer step needs both.
    def plan(a_channel, a_seconds):
        return [Task("A", a_seconds, channel=a_channel), Task("B", 4.0, channel=0), Task("step", 1.0, after=(0, 1))]

    greedy, joint = schedule(plan(0, 4.0)), schedule(plan(1, 5.0))
    assert greedy.seconds == 9.0 and joint.seconds == 6.0


@settings(max_examples=80, deadline=None)
@given(data=st.data(), count=st.integers(1, 25), capacity=st.integers(1, 3))
def test_random_dags_respect_dependencies_and_capacities(data, count, capacity):
    tasks = []
    for index in range(count):
        after = tuple(sorted(set(data.draw(st.lists(st.integers(0, index - 1), max_size=3)) if index else [])))
        channel = data.draw(st.sampled_from([COMPUTE, 0, 1]))
        tasks.append(Task(f"t{index}", data.draw(st.floats(0, 5)), channel, after))
    s = schedule(tasks, capacity)
    assert sorted(s.order) == list(range(count))
    for index, task in enumerate(tasks):
        assert s.end[index] == pytest.approx(s.start[index] + task.seconds)
        for before in task.after:
            assert s.start[index] >= s.end[before] - 1e-12
    for channel, limit in ((COMPUTE, 1), (0, capacity), (1, capacity)):
        mine = [i for i, t in enumerate(tasks) if t.channel == channel and t.seconds > 0]
        for i in mine:  # at any task's start, at most `limit` tasks of the resource are running
            running = [j for j in mine if s.start[j] <= s.start[i] < s.end[j]]
            assert len(running) <= limit
    critical = max(bottom_levels(tasks), default=0.0)
    assert s.seconds >= critical - 1e-9
    numbers = [s.sequence[i] for i in sorted(s.sequence, key=lambda i: s.start[i])]
    assert numbers == sorted(numbers)


def test_bad_graphs_are_one_line_errors():
    with pytest.raises(InvalidInputError, match="cycle"):
        schedule([Task("a", 1.0, after=(1,)), Task("b", 1.0, after=(0,))])
    with pytest.raises(InvalidInputError, match="does not exist"):
        schedule([Task("a", 1.0, after=(5,))])
    with pytest.raises(InvalidInputError, match="capacity"):
        schedule([Task("a", 1.0)], capacity=0)
