"""The plan the ``p2enforcer`` backend installs (pure: no torch, no I/O).

Syndicate's enforcer (§4.4, Pseudocode 2) holds two tables: the *execution
plan* ``E_colls`` — for every comm-op the motifs it is deconstructed into
(§4.2, built with the operators of App. A.1, :mod:`optimizer_service.syndicate.transforms`)
— and the *scheduling order* ``S`` — a sequence number per motif. Motifs are
dispatched in increasing number across all the ops of an iteration; motifs
that share a number may run together. This module is both tables as one JSON
document, its parser, and the checks that make a plan safe to install::

    {"format": "p2enforcer-plan", "version": 3, "world_size": 8,
     "channels": {"0": null, "1": "nic1"},
     "topology": "emulated-2x4", "predicted_iteration_seconds": 0.12,
     "ops": [{"seq": 3, "kind": "all_reduce", "bytes": 4096,
              "group": [0, 1, 2, 3, 4, 5, 6, 7],
              "plan": "(ReduceScatter(0,1,...)[0:128]... -> AllGather(0,1,...)[0:128]...)",
              "order": [5, 6]}]}

**Channels** map a channel id to the network interface its motifs use;
``null`` leaves the choice to each node (the enforcer takes the node's NIC for
the channel from ``P2_CHANNEL_IFNAMES``, else the inner backend's default).

**Ops.** An op is keyed by ``(seq, kind, bytes, group)`` (:class:`OpKey`):
``seq`` is its 0-based position among the ops of its process group in the
iteration, ``group`` the group's global ranks in group-rank order, ``bytes``
the size of its *buffer*, and for ``broadcast`` also ``root``, the group
position of the source. An optional ``dtype`` (a name of
:data:`~optimizer_service.plan.dtypes.DTYPE_BYTES`) narrows the key to ops of
that element type: motif ranges count elements, so a plan made for 2-byte
elements must not be read on a 4-byte buffer of the same size; every motif
of such an op counts elements of that size (its ``element_bytes``, ``2B`` in
the text form). Motif ranks in the plan text are **group positions**
``0..p-1``; motif ranges are **element** ranges of the buffer.

**Buffer model** (``p`` members; ``n`` is the element count the runtime sees):

* ``all_reduce``, ``broadcast`` — the tensor, ``n`` elements on every member;
* ``all_gather`` — the output, ``p·n`` elements; member ``k`` contributes
  block ``k`` = ``[k·n, (k+1)·n)``;
* ``reduce_scatter`` — the input, ``p·n`` elements; member ``k`` ends with the
  sum of block ``k`` (what it holds elsewhere is not part of the result);
* ``all_to_all`` (equal splits) — ``N = p`` blocks of ``D = n/p`` elements,
  block ``j`` for member ``j``: the ``(N, D)`` convention of
  :func:`optimizer_service.execute`; motif ranges are columns of a block.

Only SUM reductions are modelled: a plan checked here computes the sum; the
runtime decides which reduce ops it may hand to a plan.

**Order.** ``order`` holds one dispatch number per motif, in
:func:`~optimizer_service.plan.motif.motifs_of` order. Within an op the ``Seq``
structure (→) gives data dependencies (:meth:`OpPlan.dependencies`), ``Par``
parts (∥) are independent; a motif may not be numbered before a motif it
depends on.

Every problem is a :class:`PlanError` of one line saying what is wrong and
where (``plan op 3 (all_reduce on group [0,1]): motif 2 (...) uses group
position 5 but the group has 2 members``). :meth:`OpPlan.validate` proves, for
a concrete size and in time independent of it, that the motifs compute the op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES, element_bytes
from optimizer_service.plan.motif import Composition, Motif, Seq, check_motif, motifs_of
from optimizer_service.plan.numeric import buffer_extent, wrong_numbers

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
#: The plan kind of each op kind the backend can hand to a plan (the trace's
#: ``kind`` names the torch.distributed call; a plan names the collective).
PLAN_KIND = {"all_reduce": "all_reduce", "broadcast": "broadcast", "all_gather_into_tensor": "all_gather",
             "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all"}

_REDUCING = frozenset({Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.REDUCE, Collective.BROADCAST})

#: The motif kinds that can take part in each op kind's decomposition. A
#: reduce_scatter may reduce more than it must (e.g. a ring all-reduce of the
#: whole input), so it takes what an all_reduce takes; ops that move data
#: without summing it take no summing motif.
MOTIF_KINDS: dict[str, frozenset[Collective]] = {
    "all_reduce": _REDUCING,
    "reduce_scatter": _REDUCING,
    "all_gather": frozenset({Collective.ALL_GATHER, Collective.BROADCAST}),
    "broadcast": frozenset({Collective.BROADCAST, Collective.ALL_GATHER}),
    "all_to_all": frozenset({Collective.ALL_TO_ALL}),
}


# ----------------------------------------------------------------------- ops
@dataclass(frozen=True)
class OpKey:
    """Which op of an iteration a plan entry is for (its identity, and its buffer)."""

    seq: int
    kind: str
    nbytes: int
    group: tuple[int, ...]
    root: int = 0
    dtype: str = ""         # the elements' dtype (a DTYPE_BYTES name); "" matches an op of any dtype

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", tuple(self.group))
        if self.kind not in KINDS:
            self._fail(f"unknown kind {self.kind!r} (expected one of {', '.join(KINDS)})")
        if self.dtype and self.dtype not in DTYPE_BYTES:
            self._fail(f"unknown dtype {self.dtype!r} (expected one of {', '.join(DTYPE_BYTES)})")
        if self.dtype and self.nbytes % DTYPE_BYTES[self.dtype]:
            self._fail(f"bytes {self.nbytes} is not a whole number of {self.dtype} elements "
                       f"({DTYPE_BYTES[self.dtype]} bytes each)")
        if self.seq < 0:
            self._fail(f"seq {self.seq} must be >= 0")
        if self.nbytes < 0:
            self._fail(f"bytes {self.nbytes} must be >= 0")
        if not self.group:
            self._fail("the group is empty")
        if len(set(self.group)) != len(self.group) or min(self.group) < 0:
            self._fail("group ranks must be distinct and >= 0")
        if self.kind != "broadcast" and self.root != 0:
            self._fail(f"root {self.root} is only meaningful for broadcast")
        if not 0 <= self.root < len(self.group):
            self._fail(f"root position {self.root} is outside the group of {len(self.group)} members")

    def __str__(self) -> str:
        source = f" from position {self.root}" if self.kind == "broadcast" else ""
        dtype = f" of {self.dtype}" if self.dtype else ""
        return f"op {self.seq} ({self.kind}{dtype}{source} on group [{','.join(map(str, self.group))}])"

    @property
    def size(self) -> int:
        return len(self.group)

    def buffer_elements(self, elements: int) -> int:
        """Elements of the op's buffer when the runtime sees ``elements``: ``p·n``
        for all_gather (output) and reduce_scatter (input), ``n`` otherwise."""
        return self.size * elements if self.kind in ("all_gather", "reduce_scatter") else elements

    def _fail(self, what: str):
        raise PlanError(f"plan {self}: {what}")


@dataclass(frozen=True)
class OpPlan:
    """One op's motifs (``plan``, group positions, element ranges) and their
    dispatch numbers (Pseudocode 2's ``E_colls[coll]`` and ``S[motif]``)."""

    key: OpKey
    plan: Composition
    order: tuple[int, ...]
    motifs: tuple[Motif, ...] = field(init=False, repr=False, compare=False)
    _dependencies: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", tuple(self.order))
        object.__setattr__(self, "motifs", tuple(motifs_of(self.plan)))
        object.__setattr__(self, "_dependencies", _dependencies(self.plan))
        self._check_structure(self.plan)
        for index, motif in enumerate(self.motifs):
            self._check_motif(index, motif)
        self._check_order()

    @classmethod
    def of(cls, key: OpKey, plan: Composition, order: Sequence[int] | None = None, base: int = 0) -> OpPlan:
        """``plan`` for ``key``; without ``order`` each motif is numbered
        ``base`` + its stage: 0 without dependencies, else one more than the
        latest stage it depends on (the motifs of one Seq part share a number)."""
        if order is None:
            stages: list[int] = []
            for before in _dependencies(plan):
                stages.append(1 + max((stages[i] for i in before), default=-1))
            order = [base + stage for stage in stages]
        return cls(key, plan, tuple(order))

    def dependencies(self) -> tuple[tuple[int, ...], ...]:
        """For each motif (``motifs`` order), the motifs that must complete
        before it starts: the *immediate* ones only, i.e. the motifs that end
        the preceding part of the innermost enclosing ``Seq`` (earlier stages
        are reached transitively). ``Par`` parts do not wait for each other."""
        return self._dependencies

    def buffer_elements(self, elements: int) -> int:
        return self.key.buffer_elements(elements)

    def validate(self, elements: int) -> None:
        """Check that the motifs compute the op on a buffer of ``elements`` as
        the runtime sees them (all_gather: input numel ``n``; reduce_scatter:
        output numel ``n``; all_to_all: input numel ``N·D``), else PlanError.

        Every range must lie in the buffer. Then the plan is run on numbers
        (:func:`execute`, which also checks that ``Par`` parts are
        independent) on a *compressed* buffer: the range boundaries of the
        plan, 0, the end and the block boundaries cut the buffer into
        intervals that every motif treats alike, so one element stands for
        each and the cost does not depend on ``elements``. The inputs are
        random positive integers (exact in float64), so a missing or a double
        contribution always shows.
        """
        extent, block = buffer_extent(self.key, elements)
        for index, motif in enumerate(self.motifs):
            for lo, hi in motif.ranges:
                if hi > extent:
                    unit = "columns per block" if self.key.kind == "all_to_all" else "elements"
                    self._fail(f"motif {index} ({motif}) reaches {hi} but the buffer has {extent} {unit}")
        cuts = {0, extent, *(range(0, extent, block) if block else ())}
        boundaries = sorted(cuts | {b for m in self.motifs for r in m.ranges for b in r})
        try:
            wrong = wrong_numbers(self, boundaries, block)
        except InvalidInputError:
            self._fail("parallel parts of the plan touch the same elements, so their order matters; "
                       "put them in sequence (->)")
        if wrong:
            self._fail(f"the motifs do not compute {self.key.kind}: {wrong}")

    # -- construction checks
    def _check_structure(self, plan: Composition) -> None:
        if isinstance(plan, Motif):
            return
        if len(plan.parts) < 2:
            self._fail(f"a composition needs at least two parts, got {len(plan.parts)} in {plan}")
        for part in plan.parts:
            self._check_structure(part)

    def _check_motif(self, index: int, motif: Motif) -> None:
        where = f"motif {index} ({motif})"
        try:
            check_motif(motif)
        except InvalidInputError as error:
            self._fail(f"{where}: {error}")
        outside = [r for r in motif.ranks if r >= self.key.size]
        if outside:
            self._fail(f"{where} uses group position {outside[0]} but the group has {self.key.size} members")
        if motif.kind not in MOTIF_KINDS[self.key.kind]:
            fits = ", ".join(sorted(k.value for k in MOTIF_KINDS[self.key.kind]))
            self._fail(f"{where}: a {motif.kind} motif cannot be part of {self.key.kind} (use {fits})")
        if self.key.dtype and motif.element_bytes != DTYPE_BYTES[self.key.dtype]:
            self._fail(f"{where} counts {motif.element_bytes}-byte elements but {self.key.dtype} has "
                       f"{DTYPE_BYTES[self.key.dtype]}-byte ones; plan the op in its own elements")
        if motif.kind is Collective.ALL_TO_ALL and motif.ranks != tuple(range(self.key.size)):
            self._fail(f"{where}: AllToAll motifs span the whole group in group order "
                       f"({','.join(map(str, range(self.key.size)))})")

    def _check_order(self) -> None:
        if len(self.order) != len(self.motifs):
            self._fail(f"'order' has {len(self.order)} numbers but the plan has {len(self.motifs)} motifs")
        for index, number in enumerate(self.order):
            if number < 0:
                self._fail(f"motif {index} has a negative order number {number}")
            for before in self._dependencies[index]:
                if number < self.order[before]:
                    self._fail(f"motif {index} ({self.motifs[index]}) is dispatched at {number}, before motif "
                               f"{before} ({self.motifs[before]}) it depends on (at {self.order[before]})")

    def _fail(self, what: str):
        raise PlanError(f"plan {self.key}: {what}")


def whole_op(key: OpKey, elements: int, base: int = 0) -> OpPlan:
    """The trivial plan: the op as one motif over its whole buffer, numbered
    ``base`` (what the optimizer's "default execution plan" is, §4.3.1), in
    the elements of the key's dtype (4 bytes when it names none)."""
    p, everyone, size = key.size, tuple(range(key.size)), element_bytes(key.dtype)
    if key.kind == "all_to_all":
        columns = buffer_extent(key, elements)[0]
        motif = Motif(Collective.ALL_TO_ALL, everyone, ((0, columns),), (0, p), element_bytes=size)
    elif key.kind in ("all_gather", "reduce_scatter"):
        kind = Collective.ALL_GATHER if key.kind == "all_gather" else Collective.REDUCE_SCATTER
        motif = Motif(kind, everyone, tuple((k * elements, (k + 1) * elements) for k in everyone), element_bytes=size)
    elif key.kind == "broadcast":
        ranks = (key.root, *(r for r in everyone if r != key.root))
        motif = Motif(Collective.BROADCAST, ranks, ((0, elements),), element_bytes=size)
    else:
        motif = Motif(Collective.ALL_REDUCE, everyone, ((0, elements),), element_bytes=size)
    return OpPlan(key, motif, (base,))


def _dependencies(plan: Composition) -> tuple[tuple[int, ...], ...]:
    """Immediate predecessors of every motif (motifs_of order), as in
    :func:`optimizer_service.syndicate.dag.to_tasks`: a Seq part waits for the motifs
    that end the part before it."""
    before_of: list[tuple[int, ...]] = []

    def walk(part: Composition, before: tuple[int, ...]) -> tuple[int, ...]:
        if isinstance(part, Motif):
            before_of.append(before)
            return (len(before_of) - 1,)
        if isinstance(part, Seq):
            for inner in part.parts:
                before = walk(inner, before)
            return before
        return tuple(end for inner in part.parts for end in walk(inner, before))

    walk(plan, ())
    return tuple(before_of)


# ------------------------------------------------------------- numeric check


# --------------------------------------------------------------------- plans


# ---------------------------------------------------------- JSON decoding


