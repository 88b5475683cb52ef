"""Execution-plan options of a comm-op (Syndicate §4.2–4.3).

An **option** is one way to run a comm-op: a motif decomposition built with
the operators of :mod:`optimizer_service.plan.motif` (segmentation, splining,
their composition) plus a channel for every motif — the paper's logical and
physical plan. The joint optimizer picks one option per comm-op.

What we offer, per collective (``p`` members, ``C`` the topology's channels):

* **AllReduce** — ``ring`` (ReduceScatter → AllGather), ``tree<n>`` (Reduce
  over blocks of ``n`` → AllReduce of the roots → Broadcast, recursively; ``n =
  2`` is the binary tree, ``n`` = the devices of a node the hierarchy-aware
  one), and, when the op spans every device, the P² hierarchical programs
  (``p2-<k>``, the ``P2_PROGRAMS`` best of :mod:`optimizer_service.p2.planner`
  for one reduction axis over the whole system, as motifs via
  :mod:`optimizer_service.syndicate.program_motifs`);
* **AllToAll** — ``a2a`` whole, and splined into windows of ``n`` destinations
  (``spline<n>``, ``n`` = p/2, p/4, …, §4.2.1: N/n motifs);
* **AllGather / ReduceScatter / Reduce** — the whole motif;
* **Broadcast** — whole, or ``halves`` (Figure 9);

each also **segmented** into ``k`` ∈ :data:`SEGMENTS` pieces (App. A.1; the
piece is segmented first, then splined) while a piece keeps at least
:data:`MIN_SEGMENT_BYTES` (a size in bytes, so an op of 1-byte elements is
offered the same cuts as a 4-byte op of as many bytes), and on **every
channel** — all motifs on channel ``c`` (``@ch<c>``), or, for ``k ≥ 2``, over several (multipath,
Syndicate Figure 2 ③): with two channels ``@split<j>`` puts ``j`` of the ``k``
segments on the second channel and the rest on the first (channels are
rarely equally fast, so uneven splits matter), with more ``@striped`` puts
segment ``s`` on channel ``s mod |C|``.

Every option counts the op's own elements (its motifs keep the op's
``element_bytes``), and P² is asked for the op's real byte size.

Option names read ``<base>[/seg<k>]@<channel>``, e.g. ``tree2/seg4@ch0``,
``a2a/seg4@split1``.
The first option of every op is its *default* (``ring``/``a2a``/whole on
channel 0, unsegmented): what a communication library runs unless told
otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Composition, Motif, Par, motifs_of, on_channel, rewrite
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)

SEGMENTS = (1, 2, 4, 8)
#: The smallest segment offered, in bytes (one fp32 element: what the 4-byte planner allowed).
MIN_SEGMENT_BYTES = 4
#: How many of P²'s best programs become all-reduce options.
P2_PROGRAMS = 2


@dataclass(frozen=True)
class Option:
    name: str
    plan: Composition          # motifs over global ranks, each on its channel

    @property
    def base(self) -> str:
        """The decomposition family (``ring``, ``tree2``, ``spline4``, ``p2-1``, …)."""
        return self.name.split("/")[0].split("@")[0]

    @property
    def segments(self) -> int:
        head = self.name.split("@")[0]
        return int(head.split("/seg")[1]) if "/seg" in head else 1

    @property
    def channel(self) -> str:
        return self.name.split("@")[1]


def options_for(op: Motif, topology: Topology, channels: Sequence[int] | None = None,
                programs: Sequence[Composition] = ()) -> list[Option]:
    """Every option of ``op`` (whole, on global ranks) on ``channels`` (default: all
    of the topology's); ``programs`` are extra all-reduce decompositions of the
    whole op (P² programs, built by the caller), named ``p2-1``, ``p2-2``, …"""
    channels = tuple(topology.channels if channels is None else channels)
    bases = _bases(op, topology, programs)
    out: list[Option] = []
    longest = max((b - a for a, b in op.ranges), default=0)
    for k in SEGMENTS:
        if k > 1 and (longest < k or longest * op.element_bytes < k * MIN_SEGMENT_BYTES):
            continue
        pieces = [op] if k == 1 else motifs_of(segment(op, -(-longest // k)))
        for base, build in bases:
            if base.startswith("p2-") and k > 1:
                continue                         # P² programs come whole (their layout is per op)
            built = [build(piece) for piece in pieces]
            label = base + (f"/seg{k}" if k > 1 else "")
            for c in channels:
                out.append(Option(f"{label}@ch{c}", _par([on_channel(b, c) for b in built])))
            if k > 1 and len(channels) == 2:
                for j in range(1, k):
                    split = [on_channel(b, channels[1] if s < j else channels[0]) for s, b in enumerate(built)]
                    out.append(Option(f"{label}@split{j}", _par(split)))
            elif k > 1 and len(channels) > 2:
                striped = [on_channel(b, channels[s % len(channels)]) for s, b in enumerate(built)]
                out.append(Option(f"{label}@striped", _par(striped)))
    return out


def library_option(op: Motif, topology: Topology) -> Option:
    """``op``'s default option, :func:`options_for`'s first: its base decomposition whole on channel 0,
    what a communication library runs unless told otherwise (how passthrough is priced, and the one
    option of an op no plan can carry)."""
    base, build = _bases(op, topology, ())[0]
    return Option(f"{base}@ch0", on_channel(build(op), 0))


def _bases(op: Motif, topology: Topology, programs: Sequence[Composition]) -> list[tuple[str, object]]:
    p = len(op.ranks)
    if op.kind is Collective.ALL_REDUCE:
        bases: list[tuple[str, object]] = [("ring", spline_ring)] if p > 1 else [("whole", lambda m: m)]
        node = topology.devices_per_instance(0) if len(topology.levels) > 1 else p
        for n in sorted({2, node}):
            if 2 <= n < p:
                bases.append((f"tree{n}", lambda m, n=n: spline_tree(m, n)))
        for index, program in enumerate(programs, 1):
            bases.append((f"p2-{index}", lambda m, program=program: program))
        return bases
    if op.kind is Collective.ALL_TO_ALL:
        bases = [("a2a", lambda m: m)]
        n = p // 2
        while n >= 1:
            bases.append((f"spline{n}", lambda m, n=n: spline_all_to_all(m, n)))
            n //= 2
        return bases
    if op.kind is Collective.BROADCAST and p > 2:
        return [("whole", lambda m: m), ("halves", spline_broadcast)]
    return [("whole", lambda m: m)]


def _par(parts: list[Composition]) -> Composition:
    return parts[0] if len(parts) == 1 else Par(tuple(parts))


def on_ranks(plan: Composition, ranks: Sequence[int]) -> Composition:
    """``plan`` over group positions ``0..p-1`` mapped onto global ``ranks``."""
    return rewrite(plan, lambda m: replace(m, ranks=tuple(ranks[r] for r in m.ranks)))


def p2_programs(op: Motif, topology: Topology, count: int = P2_PROGRAMS) -> list[Composition]:
    """P²'s ``count`` best hierarchical programs for ``op`` as motif plans, when
    ``op`` is an AllReduce over every device of ``topology`` in rank order (one
    reduction axis over the whole hierarchy); otherwise none."""
    if op.kind is not Collective.ALL_REDUCE or op.ranks != tuple(range(topology.device_count)) or len(topology.levels) < 2:
        return []
    from optimizer_service.p2.planner import synthesize_placements
    from optimizer_service.syndicate.program_motifs import program_motifs
    (lo, hi), = op.ranges
    report = synthesize_placements(topology, [topology.device_count], [0], nbytes=max(1, hi - lo) * op.element_bytes)
    plans = []
    for placement in report.placements:
        for ranked in placement.programs[:count]:
            motifs = program_motifs(ranked.lowered, len(op.ranks), hi - lo, element_bytes=op.element_bytes)
            plans.append(rewrite(motifs, lambda m, lo=lo: m if lo == 0 else replace(
                m, ranges=tuple((a + lo, b + lo) for a, b in m.ranges))))
    return plans[:count]
