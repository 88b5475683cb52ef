"""Motifs and Syndicate's transformation algebra (Syndicate §4.2, App. A.1).

A **motif** is one unit of communication work: a collective over a process
group (``ranks``, the root first for Reduce and Broadcast) on a slice of each
rank's buffer, on one channel. A comm-op becomes a **plan**: motifs composed
sequentially (:class:`Seq`, the paper's →) and in parallel (:class:`Par`, ∥).

Buffers. Every rank holds ``D`` elements (for all-to-all, ``N`` blocks of
``D``: block ``j`` is for rank ``j``). A motif's payload is given explicitly:

* AllReduce, Reduce, Broadcast — one element range of the buffer;
* ReduceScatter, AllGather — one range per member: what member ``k`` ends up
  owning (ReduceScatter) or contributes (AllGather);
* AllToAll — a column range ``[lo, hi)`` of every block, and a window of
  destination offsets: rank ``i`` sends to ``(i + o) mod N`` for ``o`` in it.

Operators (each returns a plan that computes what its input computes):

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

Composition: operators apply to any motif of a plan (:func:`rewrite`), e.g.
segment, then ring-spline every segment.

Text form: ``str(plan)`` prints a plan the way logs, tests and the enforcer's
installed plans show it, and :func:`parse_plan` reads it back
(``parse_plan(str(p)) == p``)::

    (ReduceScatter(0,1)[0:2] [2:4] ch1 -> AllGather(0,1)[0:2] [2:4] ch1)
    (AllReduce(0,1)[0:3] || AllReduce(0,1)[3:6])
    AllToAll(0,1,2,3)[0:5] dst+[0:2]

:func:`execute` runs a plan on numbers (one vector per rank) so tests can
compare every decomposition with the collective it replaces; parallel parts
are run in both orders and must agree, which checks that they are
independent. :func:`moved_bytes` counts the point-to-point bytes of a plan
under each motif's canonical pattern (rings for ReduceScatter/AllGather/
AllReduce, a star for Reduce/Broadcast, direct sends for AllToAll).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from optimizer_service.errors import InvalidInputError

Range = tuple[int, int]


class Kind(str, Enum):
    ALL_REDUCE = "AllReduce"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_GATHER = "AllGather"
    REDUCE = "Reduce"
    BROADCAST = "Broadcast"
    ALL_TO_ALL = "AllToAll"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Motif:
    kind: Kind
    ranks: tuple[int, ...]
    ranges: tuple[Range, ...]            # one range, or one per member (ReduceScatter/AllGather)
    window: tuple[int, int] = (0, 0)     # AllToAll: destination offsets [start, stop)
    channel: int = 0

    def __str__(self) -> str:
        parts = " ".join(f"[{a}:{b}]" for a, b in self.ranges)
        window = f" dst+[{self.window[0]}:{self.window[1]}]" if self.kind is Kind.ALL_TO_ALL else ""
        channel = f" ch{self.channel}" if self.channel else ""
        return f"{self.kind}({','.join(map(str, self.ranks))}){parts}{window}{channel}"

    @property
    def elements(self) -> int:
        return sum(b - a for a, b in self.ranges)

    @classmethod
    def parse(cls, text: str) -> Motif:
        """The motif ``str(motif)`` printed (see :func:`parse_plan`)."""
        plan = parse_plan(text)
        if not isinstance(plan, Motif):
            raise InvalidInputError(f"expected one motif, got a composition: {_excerpt(text.strip(), 0)}")
        return plan


@dataclass(frozen=True)
class Seq:
    parts: tuple[Plan, ...]

    def __str__(self) -> str:
        return "(" + " -> ".join(map(str, self.parts)) + ")"


@dataclass(frozen=True)
class Par:
    parts: tuple[Plan, ...]

    def __str__(self) -> str:
        return "(" + " || ".join(map(str, self.parts)) + ")"


Plan = Motif | Seq | Par


def even_split(lo: int, hi: int, parts: int) -> tuple[Range, ...]:
    """``[lo, hi)`` cut into ``parts`` ranges whose sizes differ by at most one."""
    size = hi - lo
    bounds = [lo + size * k // parts for k in range(parts + 1)]
    return tuple((bounds[k], bounds[k + 1]) for k in range(parts))


# ------------------------------------------------------------------ comm-ops
def comm_op(kind: Kind, ranks: Sequence[int], elements: int) -> Motif:
    """A whole comm-op as one motif (``elements`` per rank, or per block for AllToAll)."""
    ranks = tuple(ranks)
    if len(ranks) < 1 or len(set(ranks)) != len(ranks):
        raise InvalidInputError(f"a {kind} needs distinct ranks, got {list(ranks)}")
    if elements < 0:
        raise InvalidInputError(f"a {kind} of {elements} elements is not possible")
    if kind in (Kind.REDUCE_SCATTER, Kind.ALL_GATHER):
        return Motif(kind, ranks, even_split(0, elements, len(ranks)))
    if kind is Kind.ALL_TO_ALL:
        return Motif(kind, ranks, ((0, elements),), (0, len(ranks)))
    return Motif(kind, ranks, ((0, elements),))


# ----------------------------------------------------------------- operators
def segment(motif: Motif, d: int) -> Plan:
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


def spline_ring(motif: Motif) -> Plan:
    """AllReduce =p= ReduceScatter → AllGather (App. A.1)."""
    _expect(motif, Kind.ALL_REDUCE, "ring splining")
    (lo, hi), = motif.ranges
    parts = even_split(lo, hi, len(motif.ranks))
    return Seq((replace(motif, kind=Kind.REDUCE_SCATTER, ranges=parts),
                replace(motif, kind=Kind.ALL_GATHER, ranges=parts)))


def spline_tree(motif: Motif, n: int) -> Plan:
    """AllReduce =p= ∥ Reduce over blocks of ``n`` → AllReduce of the block roots
    → ∥ Broadcast over the blocks; recursive on the inner AllReduce."""
    _expect(motif, Kind.ALL_REDUCE, "tree splining")
    if n < 2:
        raise InvalidInputError(f"tree splining needs blocks of at least 2 ranks, got {n}")
    ranks = motif.ranks
    if len(ranks) <= n:
        return Seq((replace(motif, kind=Kind.REDUCE), replace(motif, kind=Kind.BROADCAST)))
    blocks = [ranks[c:c + n] for c in range(0, len(ranks), n)]
    reduces = [replace(motif, kind=Kind.REDUCE, ranks=b) for b in blocks if len(b) > 1]
    broadcasts = [replace(motif, kind=Kind.BROADCAST, ranks=b) for b in blocks if len(b) > 1]
    inner = spline_tree(replace(motif, ranks=tuple(b[0] for b in blocks)), n)
    return Seq((_par(reduces), inner, _par(broadcasts)))


def spline_all_to_all(motif: Motif, n: int) -> Plan:
    """AllToAll =p= ∥ AllToAll over destination windows of ``n`` (N/n motifs)."""
    _expect(motif, Kind.ALL_TO_ALL, "all-to-all splining")
    if n < 1:
        raise InvalidInputError(f"all-to-all splining needs windows of at least 1 destination, got {n}")
    start, stop = motif.window
    windows = [(w, min(w + n, stop)) for w in range(start, stop, n)]
    return _par([replace(motif, window=w) for w in windows])


def spline_broadcast(motif: Motif) -> Plan:
    """Broadcast =p= ∥ Broadcast from the root to each half of the receivers (Figure 9)."""
    _expect(motif, Kind.BROADCAST, "broadcast splining")
    root, receivers = motif.ranks[0], motif.ranks[1:]
    if len(receivers) < 2:
        return motif
    half = (len(receivers) + 1) // 2
    return Par((replace(motif, ranks=(root, *receivers[:half])), replace(motif, ranks=(root, *receivers[half:]))))


def rewrite(plan: Plan, operator: Callable[[Motif], Plan], where: Callable[[Motif], bool] = lambda m: True) -> Plan:
    """Apply ``operator`` to every motif of ``plan`` that ``where`` accepts (composition)."""
    if isinstance(plan, Motif):
        return operator(plan) if where(plan) else plan
    return type(plan)(tuple(rewrite(p, operator, where) for p in plan.parts))


def on_channel(plan: Plan, channel: int) -> Plan:
    """The same plan with every motif on ``channel`` (a physical plan)."""
    return rewrite(plan, lambda m: replace(m, channel=channel))


def motifs_of(plan: Plan) -> list[Motif]:
    if isinstance(plan, Motif):
        return [plan]
    return [m for p in plan.parts for m in motifs_of(p)]


def _par(motifs: list[Plan]) -> Plan:
    return motifs[0] if len(motifs) == 1 else Par(tuple(motifs))


def _expect(motif: Motif, kind: Kind, what: str) -> None:
    if motif.kind is not kind:
        raise InvalidInputError(f"{what} applies to {kind}, not {motif.kind}")


# ------------------------------------------------------------------- bytes
def moved_elements(plan: Plan) -> int:
    """Point-to-point elements a plan sends under each motif's canonical pattern."""
    total = 0
    for m in motifs_of(plan):
        p = len(m.ranks)
        if m.kind in (Kind.REDUCE_SCATTER, Kind.ALL_GATHER):
            total += (p - 1) * m.elements                  # ring: every part travels p-1 hops
        elif m.kind is Kind.ALL_REDUCE:
            (lo, hi), = m.ranges
            total += 2 * (p - 1) * (hi - lo)               # = ReduceScatter + AllGather
        elif m.kind in (Kind.REDUCE, Kind.BROADCAST):
            total += (p - 1) * m.elements                  # star into / out of the root
        else:
            total += p * (m.window[1] - m.window[0]) * m.elements
    return total


def moved_bytes(plan: Plan, element_bytes: int = 4) -> int:
    return moved_elements(plan) * element_bytes


# --------------------------------------------------------------- execution
def execute(plan: Plan, buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Run ``plan`` on numbers: ``buffers[r]`` is rank r's buffer (``(N, D)`` for
    AllToAll, whose result is written to a fresh output). Returns new buffers."""
    state = {r: b.copy() for r, b in buffers.items()}
    outputs = {r: np.full_like(b, np.nan, dtype=float) for r, b in buffers.items()}
    _run(plan, state, outputs)
    if any(m.kind is Kind.ALL_TO_ALL for m in motifs_of(plan)):
        return outputs
    return state


def _run(plan: Plan, state, outputs) -> None:
    if isinstance(plan, Motif):
        _run_motif(plan, state, outputs)
    elif isinstance(plan, Seq):
        for part in plan.parts:
            _run(part, state, outputs)
    else:
        forward = ({r: b.copy() for r, b in state.items()}, {r: b.copy() for r, b in outputs.items()})
        for part in plan.parts:
            _run(part, *forward)
        for part in reversed(plan.parts):
            _run(part, state, outputs)
        for r in state:
            if not (np.array_equal(state[r], forward[0][r], equal_nan=True)
                    and np.array_equal(outputs[r], forward[1][r], equal_nan=True)):
                raise InvalidInputError(f"parallel parts of {plan} depend on each other's order")


def _run_motif(m: Motif, state, outputs) -> None:
    ranks = m.ranks
    if m.kind is Kind.ALL_TO_ALL:
        (lo, hi), = m.ranges
        n = len(ranks)
        for i, src in enumerate(ranks):
            for offset in range(*m.window):
                dst = ranks[(i + offset) % n]
                outputs[dst][i, lo:hi] = state[src][(i + offset) % n, lo:hi]
        return
    if m.kind in (Kind.REDUCE_SCATTER, Kind.ALL_GATHER):
        for k, (lo, hi) in enumerate(m.ranges):
            if m.kind is Kind.REDUCE_SCATTER:
                state[ranks[k]][lo:hi] = sum(state[r][lo:hi] for r in ranks)
            else:
                value = state[ranks[k]][lo:hi].copy()
                for r in ranks:
                    state[r][lo:hi] = value
        return
    (lo, hi), = m.ranges
    if m.kind is Kind.BROADCAST:
        value = state[ranks[0]][lo:hi].copy()
        for r in ranks[1:]:
            state[r][lo:hi] = value
        return
    total = sum(state[r][lo:hi] for r in ranks)
    targets = ranks if m.kind is Kind.ALL_REDUCE else ranks[:1]
    for r in targets:
        state[r][lo:hi] = total


# --------------------------------------------------------------- text form
_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<word>[A-Za-z]+)|(?P<sym>->|\|\||[()\[\]:,+])|(?P<bad>\S))")
_SEPARATORS = {"->": Seq, "||": Par}


def parse_plan(text: str) -> Plan:
    """Read a plan from its text form (what ``str`` prints; Syndicate §4.2's
    ``→`` is ``->``, ``∥`` is ``||``).

    Grammar (whitespace between tokens is free)::

        plan   := motif | "(" plan ( ("->" plan)+ | ("||" plan)+ )? ")"
        motif  := Kind "(" int ("," int)* ")" range+ ["dst" "+" range] ["ch" int]
        range  := "[" int ":" int "]"

    Parentheses around a single plan only group it, so a one-part ``Seq`` or
    ``Par`` (which no operator produces) has no text form of its own. Every
    motif must be well formed (:func:`check_motif`). Malformed text raises
    :class:`InvalidInputError` naming the column and the offending part.
    """
    return _PlanParser(text).parse()


def check_motif(m: Motif) -> None:
    """Raise :class:`InvalidInputError` unless ``m`` is a well-formed motif:
    distinct ranks, one range (one per member for ReduceScatter/AllGather)
    with ``0 <= lo <= hi``, a destination window inside ``[0, len(ranks)]``
    only for AllToAll, a channel ``>= 0``."""
    if not m.ranks or len(set(m.ranks)) != len(m.ranks) or min(m.ranks) < 0:
        raise InvalidInputError(f"{m.kind} needs distinct ranks >= 0, got {list(m.ranks)}")
    wanted = len(m.ranks) if m.kind in (Kind.REDUCE_SCATTER, Kind.ALL_GATHER) else 1
    if len(m.ranges) != wanted:
        raise InvalidInputError(f"{m.kind} over {len(m.ranks)} ranks needs {wanted} range(s), got {len(m.ranges)}")
    for lo, hi in m.ranges:
        if not 0 <= lo <= hi:
            raise InvalidInputError(f"range [{lo}:{hi}] of {m.kind} is not a range (needs 0 <= start <= end)")
    start, stop = m.window
    if m.kind is Kind.ALL_TO_ALL and not 0 <= start <= stop <= len(m.ranks):
        raise InvalidInputError(f"destination window [{start}:{stop}] of {m.kind} over {len(m.ranks)} ranks "
                                f"must lie in [0:{len(m.ranks)}]")
    if m.kind is not Kind.ALL_TO_ALL and m.window != (0, 0):
        raise InvalidInputError(f"only AllToAll has a destination window, not {m.kind}")
    if m.channel < 0:
        raise InvalidInputError(f"channel {m.channel} must be >= 0")


class _PlanParser:
    """Recursive descent over the tokens of :func:`parse_plan`'s grammar."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(self._tokenize(text))
        self.at = 0

    @staticmethod
    def _tokenize(text: str):
        position = 0
        while (match := _TOKEN.match(text, position)) and match.lastgroup:
            if match.lastgroup == "bad":
                raise InvalidInputError(f"cannot parse plan at column {match.start('bad') + 1} "
                                        f"{_excerpt(text, match.start('bad'))}: unexpected character "
                                        f"{match.group('bad')!r}")
            yield match.lastgroup, match.group(match.lastgroup), match.start(match.lastgroup)
            position = match.end()

    def parse(self) -> Plan:
        if not self.tokens:
            raise InvalidInputError("empty plan text")
        plan = self._plan()
        if self.at < len(self.tokens):
            self._fail("unexpected text after the end of the plan")
        return plan

    # -- grammar
    def _plan(self) -> Plan:
        if self._peek() != "(":
            return self._motif()
        self._expect("(")
        parts, separator = [self._plan()], None
        while self._peek() in _SEPARATORS:
            if separator is not None and self._peek() != separator:
                self._fail("'->' and '||' mixed in one parenthesis; parenthesize the inner part")
            separator = self._take()
            parts.append(self._plan())
        self._expect(")", "'->', '||' or ')'")
        return parts[0] if separator is None else _SEPARATORS[separator](tuple(parts))

    def _motif(self) -> Motif:
        start = self.at
        name = self._expect_kind("word", "a motif kind")
        try:
            kind = Kind(name)
        except ValueError:
            self.at = start
            self._fail(f"unknown motif kind {name!r} (expected one of {', '.join(k.value for k in Kind)})")
        self._expect("(")
        ranks = [self._int()]
        while self._peek() == ",":
            self._take()
            ranks.append(self._int())
        self._expect(")", "',' or ')'")
        ranges = [self._range()]
        while self._peek() == "[":
            ranges.append(self._range())
        window = None
        if self._peek() == "dst":
            self._take()
            self._expect("+")
            window = self._range()
        channel = 0
        if self._peek() == "ch":
            self._take()
            channel = self._int()
        if (window is None) == (kind is Kind.ALL_TO_ALL):
            self.at = start
            self._fail("AllToAll needs a destination window 'dst+[start:stop]'" if window is None
                       else f"only AllToAll has a destination window, not {kind}")
        motif = Motif(kind, tuple(ranks), tuple(ranges), window or (0, 0), channel)
        try:
            check_motif(motif)
        except InvalidInputError as error:
            self.at = start
            self._fail(str(error))
        return motif

    def _range(self) -> Range:
        self._expect("[")
        lo = self._int()
        self._expect(":")
        hi = self._int()
        self._expect("]")
        return lo, hi

    # -- tokens
    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self) -> str:
        value = self.tokens[self.at][1]
        self.at += 1
        return value

    def _int(self) -> int:
        return int(self._expect_kind("int", "a number"))

    def _expect(self, symbol: str, wanted: str | None = None) -> None:
        if self._peek() != symbol:
            self._fail(f"expected {wanted or repr(symbol)}")
        self.at += 1

    def _expect_kind(self, kind: str, wanted: str) -> str:
        if self.at >= len(self.tokens) or self.tokens[self.at][0] != kind:
            self._fail(f"expected {wanted}")
        return self._take()

    def _fail(self, what: str):
        if self.at >= len(self.tokens):
            raise InvalidInputError(f"cannot parse plan: the text ends early: {what}")
        column = self.tokens[self.at][2]
        raise InvalidInputError(f"cannot parse plan at column {column + 1} {_excerpt(self.text, column)}: {what}")


def _excerpt(text: str, column: int, width: int = 32) -> str:
    """``near '...'``: the text from ``column``, cut to one short line."""
    piece = text[column:column + width]
    return f"near {piece!r}" + ("..." if len(text) > column + width else "")
