"""P² reduction programs as motif plans of an all_reduce (pure).

A lowered program (:mod:`optimizer_service.p2.lowering`) is a sequence of steps,
each a collective over disjoint device groups. :mod:`optimizer_service.plan.layout` works
out which element ranges every group moves; here each step becomes a ``Par``
of motifs and the program the ``Seq`` of its steps, so a plan can offer a P²
program as one more way to run an all_reduce (Syndicate's execution-plan
options, with P²'s hierarchical programs among them — issue 5 §1).

Devices of the program are the op group's positions ``0..p-1``. A member's
part may be several element ranges (after a ReduceScatter then AllGather over
another axis a device can hold chunks {0, 2}); a ReduceScatter or AllGather
then becomes one motif per piece index — piece ``j`` of every member — which
needs every member to hold the same number of pieces (true of the programs P²
synthesizes on regular hierarchies). Where members hold different numbers of
pieces, every piece still has one owner, so the ReduceScatter becomes ∥ Reduce
of each piece into its owner and the AllGather ∥ Broadcast from it — correct,
but chains instead of one ring. An AllReduce, Reduce or Broadcast part of
several ranges becomes one motif per range. Empty pieces stay as empty ranges.
"""

from __future__ import annotations

from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES
from optimizer_service.plan.layout import plan_layout
from optimizer_service.plan.lowered import LoweredProgram
from optimizer_service.plan.motif import Composition, Motif, Par, Seq


def _piece_ranges(pieces, numel: int) -> list[tuple[int, int]]:
    """Element range of each piece, empty ones kept (so every member has its piece count)."""
    out = []
    for start, stop in pieces:
        lo = start.numerator * numel // start.denominator
        out.append((lo, max(lo, stop.numerator * numel // stop.denominator)))
    return out


def program_motifs(program: LoweredProgram, group_size: int, elements: int, channel: int = 0,
                   element_bytes: int = DEFAULT_ELEMENT_BYTES) -> Composition:
    """``program`` as motifs on an all_reduce buffer of ``elements`` elements of ``element_bytes`` bytes."""
    stages = []
    for step in plan_layout(program, group_size):
        parts: list[Composition] = []
        for move in step.moves:
            kind = move.collective
            ranges = [_piece_ranges(part, elements) for part in move.parts]
            if kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
                counts = {len(r) for r in ranges}
                if len(counts) == 1:
                    for j in range(max(counts.pop(), 1)):
                        parts.append(Motif(kind, move.members, tuple(r[j] if r else (0, 0) for r in ranges),
                                           channel=channel, element_bytes=element_bytes))
                    continue
                # Members hold different numbers of pieces: every piece is owned by one member,
                # so ReduceScatter = ∥ Reduce into its owner, AllGather = ∥ Broadcast from it.
                single = Collective.REDUCE if kind is Collective.REDUCE_SCATTER else Collective.BROADCAST
                for owner, owned in enumerate(ranges):
                    order = (move.members[owner], *[m for m in move.members if m != move.members[owner]])
                    parts += [Motif(single, order, (piece,), channel=channel, element_bytes=element_bytes)
                              for piece in owned]
            else:
                for lo, hi in ranges[0] or [(0, 0)]:
                    parts.append(Motif(kind, move.members, ((lo, hi),), channel=channel, element_bytes=element_bytes))
        stages.append(parts[0] if len(parts) == 1 else Par(tuple(parts)))
    return stages[0] if len(stages) == 1 else Seq(tuple(stages))
