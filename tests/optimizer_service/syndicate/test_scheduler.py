"""optSched, the critical-path list scheduler: hand-computed DAGs and invariants."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.syndicate.scheduler import COMPUTE, Task, bottom_levels, schedule


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
@given(data=st.data(), count=st.integers(1, 25), capacity=st.integers(1, 3),
       drag=st.sampled_from([0.0, 0.25, 1.0]))
def test_random_dags_respect_dependencies_and_capacities(data, count, capacity, drag):
    tasks = []
    for index in range(count):
        after = tuple(sorted(set(data.draw(st.lists(st.integers(0, index - 1), max_size=3)) if index else [])))
        channel = data.draw(st.sampled_from([COMPUTE, 0, 1]))
        tasks.append(Task(f"t{index}", data.draw(st.floats(0, 5)), channel, after))
    s = schedule(tasks, capacity, slowdown={0: drag})
    assert sorted(s.order) == list(range(count))
    for index, task in enumerate(tasks):
        took = s.end[index] - s.start[index]
        if task.is_compute:     # slowed by at most `capacity` channel-0 motifs at once
            assert task.seconds - 1e-9 <= took <= task.seconds * (1 + drag * capacity) + 1e-9
            if drag == 0.0:
                assert s.end[index] == s.start[index] + task.seconds
        else:
            assert s.end[index] == s.start[index] + task.seconds
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


def test_compute_runs_slower_while_a_gpu_driven_motif_runs():
    # channel 0 slows compute by 0.25 (rate 1/1.25), channel 1 not at all
    tasks = [Task("C", 10.0), Task("m0", 4.0, channel=0), Task("m1", 4.0, channel=1), Task("next", 1.0, after=(0,))]
    s = schedule(tasks, slowdown={0: 0.25})
    # 4 s at rate 0.8 do 3.2 s of C's work; the other 6.8 s at full rate
    assert s.end[0] == pytest.approx(10.8) and s.start[3] == s.end[0] and s.end[1:3] == (4.0, 4.0)
    assert s.compute_idle_fraction(tasks) == pytest.approx(0.0, abs=1e-12)     # busy, if slower
    assert schedule(tasks).end[0] == 10.0 and schedule(tasks, slowdown={0: 0.0, 7: 1.0}).end[0] == 10.0


def test_a_motif_that_starts_mid_task_slows_the_rest_of_it():
    # m (ch0, slowdown 0.5) waits for p on ch1: it runs 2..5 while C runs, so C does 2 s of work in 0..2,
    # 2 s in 2..5 (rate 1/1.5), and its last 6 s after 5
    tasks = [Task("C", 10.0), Task("p", 2.0, channel=1), Task("m", 3.0, channel=0, after=(1,))]
    s = schedule(tasks, slowdown={0: 0.5})
    assert (s.start[2], s.end[2]) == (2.0, 5.0) and s.end[0] == pytest.approx(11.0)


def test_motifs_running_together_add_their_slowdowns():
    tasks = [Task("C", 4.0), Task("a", 2.0, channel=0), Task("b", 2.0, channel=0), Task("x", 2.0, channel=1)]
    # capacity 2: a and b both run 0..2 with x: compute at 1/(1 + 0.25 + 0.25 + 0.5) for 2 s
    s = schedule(tasks, capacity=2, slowdown={0: 0.25, 1: 0.5})
    assert s.end[0] == pytest.approx(2.0 + (4.0 - 2.0 / 2.0))
    # capacity 1: a 0..2 and x 0..2 (rate 1/1.75), then b 2..4 (rate 1/1.25), then full rate
    s = schedule(tasks, capacity=1, slowdown={0: 0.25, 1: 0.5})
    assert s.end[0] == pytest.approx(4.0 + (4.0 - 2.0 / 1.75 - 2.0 / 1.25))


def test_a_compute_task_ends_before_the_decisions_after_it():
    # C's successor D is a motif on the critical path; it must see C's slowed end, not its base one:
    # C runs 0..3 at rate 1/2 while m runs (1.5 s of work), then 1.5 s at full rate: ends at 4.5
    tasks = [Task("C", 3.0), Task("m", 3.0, channel=0), Task("D", 1.0, channel=1, after=(0,)),
             Task("E", 1.0, channel=1)]
    s = schedule(tasks, slowdown={0: 1.0})
    assert s.end[0] == pytest.approx(4.5) and s.start[2] == s.end[0] and s.start[3] == 0.0


def test_bad_graphs_are_one_line_errors():
    with pytest.raises(InvalidInputError, match="cycle"):
        schedule([Task("a", 1.0, after=(1,)), Task("b", 1.0, after=(0,))])
    with pytest.raises(InvalidInputError, match="does not exist"):
        schedule([Task("a", 1.0, after=(5,))])
    with pytest.raises(InvalidInputError, match="capacity"):
        schedule([Task("a", 1.0)], capacity=0)
    for bad in (-0.5, float("inf"), float("nan")):
        with pytest.raises(InvalidInputError, match="channel 0 has compute slowdown .* must be a number >= 0"):
            schedule([Task("a", 1.0, channel=0)], slowdown={0: bad})
