"""Motifs and their compositions: the values a plan is made of (Syndicate §4.2).

A **motif** is one unit of communication work: a collective over a process
group (``ranks``, the root first for Reduce and Broadcast) on a slice of each
rank's buffer, on one channel. A comm-op becomes a **composition** of motifs:
in sequence (:class:`Seq`, the paper's →) and in parallel (:class:`Par`, ∥).
Syndicate's operators that build compositions (segmentation, splining) are in
:mod:`optimizer_service.syndicate.transforms`; the text form's parser is
:mod:`optimizer_service.plan.motif_text`; running a composition on numbers is
:mod:`optimizer_service.plan.numeric`.

Buffers. Every rank holds ``D`` elements (for all-to-all, ``N`` blocks of
``D``: block ``j`` is for rank ``j``). A motif's payload is given explicitly:

* AllReduce, Reduce, Broadcast — one element range of the buffer;
* ReduceScatter, AllGather — one range per member: what member ``k`` ends up
  owning (ReduceScatter) or contributes (AllGather);
* AllToAll — a column range ``[lo, hi)`` of every block, and a window of
  destination offsets: rank ``i`` sends to ``(i + o) mod N`` for ``o`` in it.

Elements. A motif's ranges count elements of ``element_bytes`` bytes each
(the op's dtype: 2 for bfloat16, 8 for int64; 4, fp32, unless said), so its
payload is :attr:`Motif.nbytes` = elements × element size. The enforcer reads
the ranges as ranges of the op's own buffer, whatever its dtype; the element
size is what the planner priced them with, and an op key that names a dtype
must agree with it (:class:`~optimizer_service.plan.op_plan.OpPlan`).

Text form: ``str(composition)`` prints it the way logs, tests and the
enforcer's installed plans show it::

    (ReduceScatter(0,1)[0:2] [2:4] ch1 -> AllGather(0,1)[0:2] [2:4] ch1)
    (AllReduce(0,1)[0:3] || AllReduce(0,1)[3:6])
    AllToAll(0,1,2,3)[0:5] dst+[0:2]
    AllGather(0,1)[0:512] [512:1024] ch1 2B

A motif of other than 4-byte elements ends with its element size in bytes,
``<n>B`` (``2B`` for bfloat16 or float16, ``8B`` for float64 or int64, ``1B``
for int8, uint8 or bool); 4-byte motifs print none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES, DTYPE_BYTES

Range = tuple[int, int]

#: The element sizes a motif may count in (those of :data:`~optimizer_service.plan.dtypes.DTYPE_BYTES`).
ELEMENT_SIZES = tuple(sorted(set(DTYPE_BYTES.values())))


@dataclass(frozen=True)
class Motif:
    kind: Collective
    ranks: tuple[int, ...]
    ranges: tuple[Range, ...]            # one range, or one per member (ReduceScatter/AllGather)
    window: tuple[int, int] = (0, 0)     # AllToAll: destination offsets [start, stop)
    channel: int = 0
    element_bytes: int = DEFAULT_ELEMENT_BYTES   # bytes per element of the ranges (the op's dtype)

    def __str__(self) -> str:
        parts = " ".join(f"[{a}:{b}]" for a, b in self.ranges)
        window = f" dst+[{self.window[0]}:{self.window[1]}]" if self.kind is Collective.ALL_TO_ALL else ""
        channel = f" ch{self.channel}" if self.channel else ""
        size = f" {self.element_bytes}B" if self.element_bytes != DEFAULT_ELEMENT_BYTES else ""
        return f"{self.kind}({','.join(map(str, self.ranks))}){parts}{window}{channel}{size}"

    @property
    def elements(self) -> int:
        return sum(b - a for a, b in self.ranges)

    @property
    def nbytes(self) -> int:
        """Bytes of the ranges (per destination block for AllToAll)."""
        return self.elements * self.element_bytes



@dataclass(frozen=True)
class Seq:
    parts: tuple[Composition, ...]

    def __str__(self) -> str:
        return "(" + " -> ".join(map(str, self.parts)) + ")"


@dataclass(frozen=True)
class Par:
    parts: tuple[Composition, ...]

    def __str__(self) -> str:
        return "(" + " || ".join(map(str, self.parts)) + ")"


Composition = Motif | Seq | Par


def even_split(lo: int, hi: int, parts: int) -> tuple[Range, ...]:
    """``[lo, hi)`` cut into ``parts`` ranges whose sizes differ by at most one."""
    size = hi - lo
    bounds = [lo + size * k // parts for k in range(parts + 1)]
    return tuple((bounds[k], bounds[k + 1]) for k in range(parts))


# ------------------------------------------------------------------ comm-ops
def comm_op(kind: Collective, ranks: Sequence[int], elements: int,
            element_bytes: int = DEFAULT_ELEMENT_BYTES) -> Motif:
    """A whole comm-op as one motif (``elements`` of ``element_bytes`` bytes per
    rank, or per block for AllToAll)."""
    ranks = tuple(ranks)
    if len(ranks) < 1 or len(set(ranks)) != len(ranks):
        raise InvalidInputError(f"a {kind} needs distinct ranks, got {list(ranks)}")
    if elements < 0:
        raise InvalidInputError(f"a {kind} of {elements} elements is not possible")
    if element_bytes not in ELEMENT_SIZES:
        raise InvalidInputError(_bad_size(element_bytes))
    if kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return Motif(kind, ranks, even_split(0, elements, len(ranks)), element_bytes=element_bytes)
    if kind is Collective.ALL_TO_ALL:
        return Motif(kind, ranks, ((0, elements),), (0, len(ranks)), element_bytes=element_bytes)
    return Motif(kind, ranks, ((0, elements),), element_bytes=element_bytes)


# ----------------------------------------------------------------- operators


def rewrite(plan: Composition, operator: Callable[[Motif], Composition],
            where: Callable[[Motif], bool] = lambda m: True) -> Composition:
    """Apply ``operator`` to every motif of ``plan`` that ``where`` accepts (composition)."""
    if isinstance(plan, Motif):
        return operator(plan) if where(plan) else plan
    return type(plan)(tuple(rewrite(p, operator, where) for p in plan.parts))


def on_channel(plan: Composition, channel: int) -> Composition:
    """The same plan with every motif on ``channel`` (a physical plan)."""
    return rewrite(plan, lambda m: replace(m, channel=channel))


def motifs_of(plan: Composition) -> list[Motif]:
    if isinstance(plan, Motif):
        return [plan]
    return [m for p in plan.parts for m in motifs_of(p)]


# ------------------------------------------------------------------- bytes


# --------------------------------------------------------------- execution


# --------------------------------------------------------------- text form


def check_motif(m: Motif) -> None:
    """Raise :class:`InvalidInputError` unless ``m`` is a well-formed motif:
    distinct ranks, one range (one per member for ReduceScatter/AllGather)
    with ``0 <= lo <= hi``, a destination window inside ``[0, len(ranks)]``
    only for AllToAll, a channel ``>= 0``, an element size of
    :data:`ELEMENT_SIZES`."""
    if not m.ranks or len(set(m.ranks)) != len(m.ranks) or min(m.ranks) < 0:
        raise InvalidInputError(f"{m.kind} needs distinct ranks >= 0, got {list(m.ranks)}")
    wanted = len(m.ranks) if m.kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER) else 1
    if len(m.ranges) != wanted:
        raise InvalidInputError(f"{m.kind} over {len(m.ranks)} ranks needs {wanted} range(s), got {len(m.ranges)}")
    for lo, hi in m.ranges:
        if not 0 <= lo <= hi:
            raise InvalidInputError(f"range [{lo}:{hi}] of {m.kind} is not a range (needs 0 <= start <= end)")
    start, stop = m.window
    if m.kind is Collective.ALL_TO_ALL and not 0 <= start <= stop <= len(m.ranks):
        raise InvalidInputError(f"destination window [{start}:{stop}] of {m.kind} over {len(m.ranks)} ranks "
                                f"must lie in [0:{len(m.ranks)}]")
    if m.kind is not Collective.ALL_TO_ALL and m.window != (0, 0):
        raise InvalidInputError(f"only AllToAll has a destination window, not {m.kind}")
    if m.channel < 0:
        raise InvalidInputError(f"channel {m.channel} must be >= 0")
    if m.element_bytes not in ELEMENT_SIZES:
        raise InvalidInputError(_bad_size(m.element_bytes))


def _bad_size(element_bytes: int) -> str:
    return (f"element size {element_bytes} B is not one a dtype has "
            f"(expected one of {', '.join(f'{size}B' for size in ELEMENT_SIZES)})")


