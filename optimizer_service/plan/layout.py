"""Where every device's live data sits while a lowered program runs (pure).

A lowered program (:mod:`optimizer_service.p2.lowering`) says which collective
runs over which device groups; it does not say which bytes of the tensor a
device sends. This module works that out once per program, before anything
runs, so the executor's hot path only slices tensors.

**Pieces in place.** The tensor is the interval ``[0, 1)``. Every device holds
a *live set*: a union of sub-intervals whose values are correct for the
collective so far (partial sums of the right contributors). Data never moves
inside a device's buffer — a piece received from a peer is written at its own
position — so the non-contiguous chunk sets that valid programs produce (after
``root InsideGroup ReduceScatter; node Parallel(root) AllGather`` device 0
holds chunks {0, 2}) need no reordering at the end: the buffer *is* the tensor.

Per collective over a group ``m₀ … m_{p-1}`` (group order; ``m₀`` is the root):

* **AllReduce** — every member holds the same live set ``L``; unchanged.
* **ReduceScatter** — same ``L`` on every member; ``L`` is cut by measure into
  ``p`` equal parts in ascending position, member ``i`` keeps part ``i``.
* **AllGather** — members hold disjoint live sets; each ends with their union.
  Member ``i`` contributes its own set as part ``i``.
* **Reduce** — same ``L`` everywhere; the root keeps it, the others end empty.
* **Broadcast** — every member ends with the root's live set.

These are P²'s Figure 8 semantics read as data placement, and the same rules
as the numeric oracle of the tests, which lays gathered chunks out in label
order. Anything else (a ReduceScatter over members with different data, an
AllGather of overlapping pieces, a device that ends without the whole tensor)
is rejected with :class:`LayoutError` before any byte moves.

**Elements.** Fractions become element offsets by ``⌊f·n⌋``. Every device uses
the same map, so the parts of a cut always partition the elements exactly,
whatever ``n`` is: sizes that do not divide give parts that differ by one
element, and parts may be empty (nothing is sent for them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from optimizer_service.errors import LayoutError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.lowered import LoweredProgram

Interval = tuple[Fraction, Fraction]
Pieces = tuple[Interval, ...]
Ranges = tuple[tuple[int, int], ...]  # element [start, stop) ranges, ascending

WHOLE: Pieces = ((Fraction(0), Fraction(1)),)


def merge(pieces: Sequence[Interval]) -> Pieces:
    """Sorted, non-empty, with touching intervals joined."""
    merged: list[list[Fraction]] = []
    for start, stop in sorted(p for p in pieces if p[1] > p[0]):
        if merged and start < merged[-1][1]:
            raise LayoutError(f"pieces overlap at {start}")
        if merged and start == merged[-1][1]:
            merged[-1][1] = stop
        else:
            merged.append([start, stop])
    return tuple((a, b) for a, b in merged)


def measure(pieces: Pieces) -> Fraction:
    return sum((b - a for a, b in pieces), Fraction(0))


def cut(pieces: Pieces, parts: int) -> tuple[Pieces, ...]:
    """``pieces`` cut into ``parts`` pieces of equal measure, in ascending position."""
    total = measure(pieces)
    bounds = [total * i / parts for i in range(parts + 1)]
    out: list[list[Interval]] = [[] for _ in range(parts)]
    offset = Fraction(0)  # measure before the current interval
    for start, stop in pieces:
        for i in range(parts):
            lo = max(bounds[i], offset) - offset + start
            hi = min(bounds[i + 1], offset + stop - start) - offset + start
            if hi > lo:
                out[i].append((lo, hi))
        offset += stop - start
    return tuple(merge(part) for part in out)


def element_ranges(pieces: Pieces, numel: int) -> Ranges:
    """The element ranges of ``pieces`` in a tensor of ``numel`` elements."""
    ranges = []
    for start, stop in pieces:
        lo = start.numerator * numel // start.denominator
        hi = stop.numerator * numel // stop.denominator
        if hi > lo:
            ranges.append((lo, hi))
    return tuple(ranges)


@dataclass(frozen=True)
class GroupMove:
    """What one group of one step moves.

    ``parts[i]`` are member ``i``'s pieces: for ReduceScatter what it keeps, for
    AllGather what it contributes; for AllReduce, Reduce and Broadcast there is
    one part, the data every member reduces or the root sends.
    """

    collective: Collective
    members: tuple[int, ...]
    parts: tuple[Pieces, ...]

    def part_ranges(self, numel: int) -> tuple[Ranges, ...]:
        return tuple(element_ranges(part, numel) for part in self.parts)


@dataclass(frozen=True)
class StepLayout:
    collective: Collective
    moves: tuple[GroupMove, ...]

    def move_of(self, device: int) -> GroupMove | None:
        for move in self.moves:
            if device in move.members:
                return move
        return None


def plan_layout(program: LoweredProgram, devices: int) -> tuple[StepLayout, ...]:
    """The moves of every step of ``program`` on ``devices`` devices.

    Raises :class:`LayoutError` if a step does not fit the live data or some
    device does not end with the whole tensor.
    """
    live: list[Pieces] = [WHOLE] * devices
    layouts = []
    for number, step in enumerate(program.steps, start=1):
        moves = []
        seen: set[int] = set()
        for group in step.groups:
            where = f"step {number} ({step.collective} over {{{','.join(map(str, group))}}})"
            if len(group) < 2:
                raise LayoutError(f"{where}: a group needs at least two devices")
            for device in group:
                if not 0 <= device < devices:
                    raise LayoutError(f"{where}: device {device} is outside 0..{devices - 1}")
                if device in seen:
                    raise LayoutError(f"{where}: device {device} is in two groups of one step")
                seen.add(device)
            moves.append(_apply(step.collective, tuple(group), live, where))
        layouts.append(StepLayout(step.collective, tuple(moves)))
    for device, pieces in enumerate(live):
        if pieces != WHOLE:
            raise LayoutError(f"the program leaves device {device} with {_show(pieces)} of the tensor, "
                              "not the whole reduced tensor")
    return tuple(layouts)


def _apply(collective: Collective, group: tuple[int, ...], live: list[Pieces], where: str) -> GroupMove:
    held = [live[d] for d in group]
    if collective is Collective.BROADCAST:
        for d in group:
            live[d] = held[0]
        return GroupMove(collective, group, (held[0],))
    if collective is Collective.ALL_GATHER:
        try:
            union = merge([piece for pieces in held for piece in pieces])
        except LayoutError:
            raise LayoutError(f"{where}: members hold overlapping pieces "
                              f"({', '.join(_show(p) for p in held)})") from None
        for d in group:
            live[d] = union
        return GroupMove(collective, group, tuple(held))
    if any(pieces != held[0] for pieces in held):
        raise LayoutError(f"{where}: members hold different data ({', '.join(_show(p) for p in held)}); "
                          f"a {collective} reduces the same pieces on every member")
    if collective is Collective.ALL_REDUCE:
        return GroupMove(collective, group, (held[0],))
    if collective is Collective.REDUCE:
        for d in group[1:]:
            live[d] = ()
        return GroupMove(collective, group, (held[0],))
    parts = cut(held[0], len(group))
    for d, part in zip(group, parts):
        live[d] = part
    return GroupMove(collective, group, parts)


def _show(pieces: Pieces) -> str:
    if not pieces:
        return "nothing"
    return " ".join(f"[{a},{b})" for a, b in pieces)
