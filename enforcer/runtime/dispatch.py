"""The dispatcher's decisions, as a pure function (Syndicate Pseudocode 2, §4.4).

The plan runtime (:mod:`enforcer.runtime.plan_runtime`) runs one dispatcher thread per
group. What that thread does next — hand a motif to its channel, wait for an
op the program has not submitted yet, promote an op the program waits on, skip
a planned op that never came, end the iteration — is decided here by
:func:`next_step`, from values only: no torch, no threads, no clock (the
current time is an argument). The thread only blocks, reads the clock, and
carries out the returned :class:`Step`.

The rules (Pseudocode 2, with our reading of the deadlock case):

* **Plan order.** The iteration's motifs are walked as *slots*
  ``(order, op, motif)`` in the plan's order numbers across all ops of the
  group (ties: by op index, then motif index). Motifs sharing an order number
  are therefore handed over one right after the other, with no wait between
  them once their ops have come: they run at once when their channels differ.
* **Waits.** For the next slot the dispatcher waits until its op has been
  submitted. What it reports as the slot's wait, ``(order, seconds)`` when
  above :data:`MIN_WAIT` (the trace's ``waits``, the optimizer's replanning
  signal), is the time from the first moment it held back *ready* work for it
  — another submitted op with motifs not handed over — to resolving the slot.
  Our reading of §4.4's "wait time in the busy loop": time the dispatcher
  idles because the program is still computing the next op is not the plan's
  doing (any order waits for it); time it holds back an op that came is, and
  only that says the plan's order is off (Syndicate replans when it passes
  5 % of the iteration). Counting the first would put most of every
  iteration in "waits" and replan forever.
* **Promotion.** While the slot's op has not been submitted, an op of the
  iteration the program already waits on (``wait()``) whose motifs are not all
  handed over is *promoted*: its remaining motifs are handed over at once, in
  their order numbers; the slot is then looked at again (its wait goes on).
  This decision depends only on the program's own order of submissions and
  waits, so every rank takes it alike.
* **Missing ops.** Once the iteration is closed (``enforcer.step()`` or the
  plan's last op of the group), a slot whose op never came is skipped.
* **End.** After the last slot the iteration is over once it is closed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Protocol

#: Waits at most this long (seconds) are not reported.
MIN_WAIT = 1e-5


@dataclass(frozen=True)
class Slot:
    """One motif of the iteration in plan order: its order number, op index and motif index."""

    order: int
    op: int
    motif: int


@dataclass(frozen=True)
class Schedule:
    """The group's planned ops as the dispatcher sees them: each op's motif order numbers."""

    orders: tuple[tuple[int, ...], ...]          # per op (plan op index), per motif: its order number
    slots: tuple[Slot, ...]                      # every motif, in plan order

    @classmethod
    def of(cls, orders: Sequence[Sequence[int]]) -> Schedule:
        orders = tuple(tuple(op) for op in orders)
        slots = sorted((order, i, m) for i, op in enumerate(orders) for m, order in enumerate(op))
        return cls(orders, tuple(Slot(*slot) for slot in slots))

    def in_order(self, op: int) -> list[int]:
        """The motifs of ``op`` sorted by their order numbers (ties: motif index)."""
        order = self.orders[op]
        return sorted(range(len(order)), key=order.__getitem__)


class Submitted(Protocol):
    """What the dispatcher reads of a submitted op."""

    @property
    def dispatched(self) -> AbstractSet[int]: ...  # motif indices already handed over

    @property
    def waited(self) -> bool: ...                  # the program called wait() on it


class Iteration(Protocol):
    """What the dispatcher reads of the current iteration."""

    @property
    def ops(self) -> Mapping[int, Submitted]: ...  # submitted planned ops by op index, in submission order

    @property
    def closed(self) -> bool: ...                  # no more ops come in this iteration


@dataclass(frozen=True)
class Cursor:
    """Where the dispatcher is in the iteration: the next slot, and since when it holds ready work back for it."""

    position: int = 0
    since: float | None = None


@dataclass(frozen=True)
class Step:
    """What the dispatcher does next; then it calls :func:`next_step` again with ``cursor``."""

    cursor: Cursor
    hand_over: tuple[tuple[int, int], ...] = ()   # (op index, motif index), in this order
    missing: int | None = None                    # a planned op that did not come: its motifs are skipped
    waited: tuple[int, float] | None = None       # (order number, seconds) waited for the slot's op
    blocked: bool = False                         # nothing to do until the iteration changes
    finished: bool = False                        # the iteration is walked and closed


def promoted(schedule: Schedule, iteration: Iteration) -> int | None:
    """The first submitted op (submission order) the program waits on whose motifs are not all handed over."""
    for op, submitted in iteration.ops.items():
        if submitted.waited and len(submitted.dispatched) < len(schedule.orders[op]):
            return op
    return None


def _holds_back(schedule: Schedule, iteration: Iteration, waiting_for: int) -> bool:
    """Whether an op other than ``waiting_for`` came and has motifs not handed over."""
    return any(op != waiting_for and len(submitted.dispatched) < len(schedule.orders[op])
               for op, submitted in iteration.ops.items())


def next_step(schedule: Schedule, cursor: Cursor, iteration: Iteration, now: float) -> Step:
    """Decide the dispatcher's next step at time ``now`` (Pseudocode 2; see the module doc).

    Pure: reads ``iteration`` and returns what to do; the caller hands the
    motifs over (marking them dispatched) and passes the new cursor back.
    """
    if cursor.position >= len(schedule.slots):
        return Step(cursor, finished=True) if iteration.closed else Step(cursor, blocked=True)
    slot = schedule.slots[cursor.position]
    submitted = iteration.ops.get(slot.op)
    since = cursor.since
    if since is None and submitted is None and _holds_back(schedule, iteration, slot.op):
        since = now
    if submitted is None:
        waiting = promoted(schedule, iteration)
        if waiting is not None:
            done = iteration.ops[waiting].dispatched
            motifs = tuple((waiting, m) for m in schedule.in_order(waiting) if m not in done)
            return Step(Cursor(cursor.position, since), hand_over=motifs)
        if not iteration.closed:
            return Step(Cursor(cursor.position, since), blocked=True)
    waited = 0.0 if since is None else now - since
    step_on = Cursor(cursor.position + 1)
    report = (slot.order, waited) if waited > MIN_WAIT else None
    if submitted is None:
        return Step(step_on, missing=slot.op, waited=report)
    hand_over = () if slot.motif in submitted.dispatched else ((slot.op, slot.motif),)
    return Step(step_on, hand_over=hand_over, waited=report)
