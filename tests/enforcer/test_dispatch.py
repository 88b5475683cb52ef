"""The dispatcher's decisions (Syndicate Pseudocode 2) on hand-built iterations, without processes.

:func:`enforcer.runtime.dispatch.next_step` is driven the way the runtime's dispatcher
thread drives it: hand over what it returns (marking the motifs dispatched),
and stop where it blocks; the test then changes the iteration (ops submitted,
waited on, the iteration closed) and time, and drives it on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from enforcer.runtime.dispatch import MIN_WAIT, Cursor, Schedule, Slot, next_step


@dataclass
class Op:
    dispatched: set[int] = field(default_factory=set)
    waited: bool = False


@dataclass
class Iteration:
    ops: dict[int, Op] = field(default_factory=dict)
    closed: bool = False


class Driver:
    """Runs the decisions until the dispatcher blocks or finishes the iteration, logging what it does."""

    def __init__(self, orders: list[list[int]]) -> None:
        self.schedule = Schedule.of(orders)
        self.iteration = Iteration()
        self.cursor = Cursor()
        self.handed: list[tuple[int, int]] = []
        self.missing: list[int] = []
        self.waits: list[tuple[int, float]] = []
        self.finished = False

    def submit(self, *ops: int) -> Driver:
        for op in ops:
            self.iteration.ops[op] = Op()
        return self

    def run(self, now: float = 0.0) -> Driver:
        for _ in range(1000):
            step = next_step(self.schedule, self.cursor, self.iteration, now)
            for op, motif in step.hand_over:
                assert motif not in self.iteration.ops[op].dispatched
                self.iteration.ops[op].dispatched.add(motif)
                self.handed.append((op, motif))
            if step.missing is not None:
                self.missing.append(step.missing)
            if step.waited is not None:
                self.waits.append(step.waited)
            self.cursor = step.cursor
            if step.blocked:
                return self
            if step.finished:
                self.finished = True
                return self
        raise AssertionError("the dispatcher made no progress")


def test_slots_follow_plan_order_across_ops():
    schedule = Schedule.of([[2, 0], [1], [0, 3]])
    assert schedule.slots == (Slot(0, 0, 1), Slot(0, 2, 0), Slot(1, 1, 0), Slot(2, 0, 0), Slot(3, 2, 1))
    assert schedule.in_order(0) == [1, 0]


def test_in_order_arrival_hands_over_every_motif_without_waits():
    driver = Driver([[0, 1], [2, 3]]).submit(0, 1).run()
    assert driver.handed == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert not driver.finished                       # walked, but the iteration is still open
    driver.iteration.closed = True
    driver.run()
    assert driver.finished and driver.waits == [] and driver.missing == []


def test_an_op_arriving_late_is_waited_for_but_idling_for_compute_is_no_wait():
    driver = Driver([[0], [1], [2]]).submit(0).run(now=10.0)
    assert driver.handed == [(0, 0)]                 # blocked on op 1, nothing else came
    driver.run(now=10.5)                             # woken with nothing new: still blocked, no wait reported
    assert driver.handed == [(0, 0)] and driver.waits == []
    driver.submit(1, 2).run(now=12.0)
    assert driver.handed == [(0, 0), (1, 0), (2, 0)]
    assert driver.waits == []                        # nothing was held back: any order would have idled


def test_a_wait_is_measured_from_when_ready_work_is_held_back():
    driver = Driver([[0], [1], [2]]).submit(0).run(now=10.0)
    driver.submit(2).run(now=11.0)                   # op 2 came; the plan holds it back for op 1
    assert driver.handed == [(0, 0)]
    driver.submit(1).run(now=13.5)
    assert driver.handed == [(0, 0), (1, 0), (2, 0)]
    assert driver.waits == [(1, 2.5)]


def test_plan_order_can_reverse_submission_order():
    driver = Driver([[1], [0]]).submit(0).run(now=1.0)
    assert driver.handed == []                       # op 1 comes first in the plan
    driver.submit(1).run(now=3.0)
    assert driver.handed == [(1, 0), (0, 0)]
    assert driver.waits == [(0, 2.0)]


def test_short_waits_are_not_reported():
    driver = Driver([[0], [1]]).submit(0).run(now=1.0)
    driver.submit(1).run(now=1.0 + MIN_WAIT / 2)
    assert driver.handed == [(0, 0), (1, 0)] and driver.waits == []


def test_an_op_the_program_waits_on_is_promoted():
    # Plan: op 1 first, then op 0's three motifs. The program submits op 0 and waits on it.
    driver = Driver([[3, 1, 2], [0]]).submit(0).run(now=0.0)
    assert driver.handed == []
    driver.iteration.ops[0].waited = True
    driver.run(now=1.0)
    assert driver.handed == [(0, 1), (0, 2), (0, 0)]  # all of op 0, in its order numbers
    assert driver.waits == []                         # the slot of op 1 is still being waited for
    driver.submit(1).run(now=4.0)
    assert driver.handed[3:] == [(1, 0)]              # op 0's slots are then passed over
    assert driver.waits == [(0, 4.0)]


def test_a_waited_on_op_already_handed_over_is_not_promoted_again():
    driver = Driver([[0], [1]]).submit(0).run()
    driver.iteration.ops[0].waited = True
    driver.run(now=1.0)
    assert driver.handed == [(0, 0)] and driver.cursor.position == 1


def test_a_partly_handed_over_op_is_promoted_for_its_remaining_motifs():
    driver = Driver([[0, 2, 3], [1]]).submit(0).run()
    assert driver.handed == [(0, 0)]
    driver.iteration.ops[0].waited = True
    driver.run()
    assert driver.handed == [(0, 0), (0, 1), (0, 2)]


def test_promotion_follows_submission_order():
    driver = Driver([[2], [3], [0]]).submit(1, 0).run()
    driver.iteration.ops[0].waited = True
    driver.iteration.ops[1].waited = True
    driver.run()
    assert driver.handed == [(1, 0), (0, 0)]


def test_ops_sharing_an_order_number_are_handed_over_together():
    driver = Driver([[0, 1], [0, 1], [2]]).submit(1).run()
    assert driver.handed == []                       # slot (0, op 0) first
    driver.submit(0).run()
    assert driver.handed == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_a_planned_op_that_never_comes_is_skipped_when_the_iteration_closes():
    driver = Driver([[0], [1], [2]]).submit(0).run(now=5.0)
    assert driver.handed == [(0, 0)]
    driver.submit(2)
    driver.iteration.closed = True
    driver.run(now=6.0)
    assert driver.missing == [1]
    assert driver.handed == [(0, 0), (2, 0)]
    assert driver.waits == []                        # op 2 was seen held back only as the iteration closed
    assert driver.finished


def test_a_waited_on_op_is_promoted_before_a_missing_one_is_skipped():
    driver = Driver([[1], [0]]).submit(0)
    driver.iteration.ops[0].waited = True
    driver.iteration.closed = True
    driver.run()
    assert driver.handed == [(0, 0)] and driver.missing == [1] and driver.finished


def test_an_empty_schedule_ends_when_the_iteration_closes():
    driver = Driver([]).run()
    assert not driver.finished
    driver.iteration.closed = True
    assert driver.run().finished
