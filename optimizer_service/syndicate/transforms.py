"""Syndicate's transformation algebra on motifs (Syndicate §4.2, App. A.1).

Each operator returns a composition that computes what its input computes
(the motif values are in :mod:`optimizer_service.plan.motif`); every motif it
builds keeps its input's element size and channel (they are built with
:func:`dataclasses.replace`), so an op planned in bfloat16 stays in bfloat16:

* :func:`segment` (``=s=``) — the payload cut into pieces of at most ``d``
  elements, one motif each, in parallel (App. A.1 "Segmented All-Reduce",
  §4.2.1 "Segmented All-To-All"; for ReduceScatter/AllGather every member's
  part is cut alike, so piece ``s`` is the ``s``-th piece of every part);
* :func:`spline_ring` — AllReduce → ReduceScatter → AllGather over the same
  range, ``p`` near-equal parts (App. A.1 "Ring All-Reduce");
* :func:`spline_tree` — AllReduce → ∥ Reduce over blocks of ``n`` → AllReduce
  over the block roots → ∥ Broadcast over the blocks, applied again to the
  inner AllReduce while it has more than ``n`` members (App. A.1 "Tree
  All-Reduce"; our reading of the garbled ``PG[∪ c·n]``: the inner group is
  the blocks' first ranks);
* :func:`spline_all_to_all` — the destination window cut into ``N/n`` windows
  of ``n`` (§4.2.1; the last one smaller when ``n`` does not divide ``N``);
* :func:`spline_broadcast` — the receivers cut into two halves, the root
  sending the whole payload to each half (Figure 9).

Operators apply to any motif of a composition
(:func:`~optimizer_service.plan.motif.rewrite`), e.g. segment, then
ring-spline every segment. :func:`moved_bytes` counts the point-to-point
bytes of a composition under each motif's canonical pattern (rings for
ReduceScatter/AllGather/AllReduce, a star for Reduce/Broadcast, direct sends
for AllToAll).
"""

from __future__ import annotations

from dataclasses import replace

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Composition, Motif, Par, Seq, even_split, motifs_of


def segment(motif: Motif, d: int) -> Composition:
    """``=s=``: pieces of at most ``d`` elements (per part for ReduceScatter/AllGather), in parallel."""
    if d < 1:
        raise InvalidInputError(f"segment size {d} must be at least 1 element")
    longest = max((b - a for a, b in motif.ranges), default=0)
    pieces = max(1, -(-longest // d))
    if pieces == 1:
        return motif
    motifs = []
    for s in range(pieces):
        ranges = tuple((min(a + s * d, b), min(a + (s + 1) * d, b)) for a, b in motif.ranges)
        motifs.append(replace(motif, ranges=ranges))
    return Par(tuple(motifs))



def spline_ring(motif: Motif) -> Composition:
    """AllReduce =p= ReduceScatter → AllGather (App. A.1)."""
    _expect(motif, Collective.ALL_REDUCE, "ring splining")
    (lo, hi), = motif.ranges
    parts = even_split(lo, hi, len(motif.ranks))
    return Seq((replace(motif, kind=Collective.REDUCE_SCATTER, ranges=parts),
                replace(motif, kind=Collective.ALL_GATHER, ranges=parts)))



def spline_tree(motif: Motif, n: int) -> Composition:
    """AllReduce =p= ∥ Reduce over blocks of ``n`` → AllReduce of the block roots
    → ∥ Broadcast over the blocks; recursive on the inner AllReduce."""
    _expect(motif, Collective.ALL_REDUCE, "tree splining")
    if n < 2:
        raise InvalidInputError(f"tree splining needs blocks of at least 2 ranks, got {n}")
    ranks = motif.ranks
    if len(ranks) <= n:
        return Seq((replace(motif, kind=Collective.REDUCE), replace(motif, kind=Collective.BROADCAST)))
    blocks = [ranks[c:c + n] for c in range(0, len(ranks), n)]
    reduces = [replace(motif, kind=Collective.REDUCE, ranks=b) for b in blocks if len(b) > 1]
    broadcasts = [replace(motif, kind=Collective.BROADCAST, ranks=b) for b in blocks if len(b) > 1]
    inner = spline_tree(replace(motif, ranks=tuple(b[0] for b in blocks)), n)
    return Seq((_par(reduces), inner, _par(broadcasts)))



def spline_all_to_all(motif: Motif, n: int) -> Composition:
    """AllToAll =p= ∥ AllToAll over destination windows of ``n`` (N/n motifs)."""
    _expect(motif, Collective.ALL_TO_ALL, "all-to-all splining")
    if n < 1:
        raise InvalidInputError(f"all-to-all splining needs windows of at least 1 destination, got {n}")
    start, stop = motif.window
    windows = [(w, min(w + n, stop)) for w in range(start, stop, n)]
    return _par([replace(motif, window=w) for w in windows])



def spline_broadcast(motif: Motif) -> Composition:
    """Broadcast =p= ∥ Broadcast from the root to each half of the receivers (Figure 9)."""
    _expect(motif, Collective.BROADCAST, "broadcast splining")
    root, receivers = motif.ranks[0], motif.ranks[1:]
    if len(receivers) < 2:
        return motif
    half = (len(receivers) + 1) // 2
    return Par((replace(motif, ranks=(root, *receivers[:half])), replace(motif, ranks=(root, *receivers[half:]))))



def _par(motifs: list[Composition]) -> Composition:
    return motifs[0] if len(motifs) == 1 else Par(tuple(motifs))



def _expect(motif: Motif, kind: Collective, what: str) -> None:
    if motif.kind is not kind:
        raise InvalidInputError(f"{what} applies to {kind}, not {motif.kind}")



def moved_elements(plan: Composition) -> int:
    """Point-to-point elements a plan sends under each motif's canonical pattern."""
    return sum(_moved(m) for m in motifs_of(plan))


def moved_bytes(plan: Composition) -> int:
    """Point-to-point bytes a plan sends: each motif's elements in its own element size."""
    return sum(_moved(m) * m.element_bytes for m in motifs_of(plan))


def _moved(m: Motif) -> int:
    p = len(m.ranks)
    if m.kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return (p - 1) * m.elements                  # ring: every part travels p-1 hops
    if m.kind is Collective.ALL_REDUCE:
        (lo, hi), = m.ranges
        return 2 * (p - 1) * (hi - lo)               # = ReduceScatter + AllGather
    if m.kind in (Collective.REDUCE, Collective.BROADCAST):
        return (p - 1) * m.elements                  # star into / out of the root
    return p * (m.window[1] - m.window[0]) * m.elements
