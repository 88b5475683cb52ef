"""The plan the ``p2enforcer`` backend installs (pure: no torch, no I/O).

Syndicate's enforcer (§4.4, Pseudocode 2) holds two tables: the *execution
plan* ``E_colls`` — for every comm-op the motifs it is deconstructed into
(§4.2, built with the operators of App. A.1, :mod:`optimizer_service.motifs`)
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

**Ops.** An op is keyed by ``(seq, kind, bytes, group)`` (:class:`OpKey`):
``seq`` is its 0-based position among the ops of its process group in the
iteration, ``group`` the group's global ranks in group-rank order, ``bytes``
the size of its *buffer*, and for ``broadcast`` also ``root``, the group
position of the source. Motif ranks in the plan text are **group positions**
``0..p-1``; motif ranges are **element** ranges of the buffer.

**Buffer model** (``p`` members; ``n`` is the element count the runtime sees):

* ``all_reduce``, ``broadcast`` — the tensor, ``n`` elements on every member;
* ``all_gather`` — the output, ``p·n`` elements; member ``k`` contributes
  block ``k`` = ``[k·n, (k+1)·n)``;
* ``reduce_scatter`` — the input, ``p·n`` elements; member ``k`` ends with the
  sum of block ``k`` (what it holds elsewhere is not part of the result);
* ``all_to_all`` (equal splits) — ``N = p`` blocks of ``D = n/p`` elements,
  block ``j`` for member ``j``: the ``(N, D)`` convention of
  :func:`optimizer_service.motifs.execute`; motif ranges are columns of a block.

Only SUM reductions are modelled: a plan checked here computes the sum; the
runtime decides which reduce ops it may hand to a plan.

**Order.** ``order`` holds one dispatch number per motif, in
:func:`~optimizer_service.motifs.motifs_of` order. Within an op the ``Seq``
structure (→) gives data dependencies (:meth:`OpPlan.dependencies`), ``Par``
parts (∥) are independent; a motif may not be numbered before a motif it
depends on.

Every problem is a :class:`PlanError` of one line saying what is wrong and
where (``plan op 3 (all_reduce on group [0,1]): motif 2 (...) uses group
position 5 but the group has 2 members``). :meth:`OpPlan.validate` proves, for
a concrete size and in time independent of it, that the motifs compute the op.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from optimizer_service import motifs
from optimizer_service.errors import InvalidInputError
from optimizer_service.motifs import Kind, Motif

FORMAT = "p2enforcer-plan"
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
#: The plan kind of each op kind the backend can hand to a plan (the trace's
#: ``kind`` names the torch.distributed call; a plan names the collective).
PLAN_KIND = {"all_reduce": "all_reduce", "broadcast": "broadcast", "all_gather_into_tensor": "all_gather",
             "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all"}

_REDUCING = frozenset({Kind.ALL_REDUCE, Kind.REDUCE_SCATTER, Kind.ALL_GATHER, Kind.REDUCE, Kind.BROADCAST})

#: The motif kinds that can take part in each op kind's decomposition. A
#: reduce_scatter may reduce more than it must (e.g. a ring all-reduce of the
#: whole input), so it takes what an all_reduce takes; ops that move data
#: without summing it take no summing motif.
MOTIF_KINDS: dict[str, frozenset[Kind]] = {
    "all_reduce": _REDUCING,
    "reduce_scatter": _REDUCING,
    "all_gather": frozenset({Kind.ALL_GATHER, Kind.BROADCAST}),
    "broadcast": frozenset({Kind.BROADCAST, Kind.ALL_GATHER}),
    "all_to_all": frozenset({Kind.ALL_TO_ALL}),
}


class PlanError(ValueError):
    """A plan that cannot be installed; the message is one line naming the problem."""


# ----------------------------------------------------------------------- ops
@dataclass(frozen=True)
class OpKey:
    """Which op of an iteration a plan entry is for (its identity, and its buffer)."""

    seq: int
    kind: str
    nbytes: int
    group: tuple[int, ...]
    root: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "group", tuple(self.group))
        if self.kind not in KINDS:
            self._fail(f"unknown kind {self.kind!r} (expected one of {', '.join(KINDS)})")
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
        return f"op {self.seq} ({self.kind}{source} on group [{','.join(map(str, self.group))}])"

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
    plan: motifs.Plan
    order: tuple[int, ...]
    motifs: tuple[Motif, ...] = field(init=False, repr=False, compare=False)
    _dependencies: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "order", tuple(self.order))
        object.__setattr__(self, "motifs", tuple(motifs.motifs_of(self.plan)))
        object.__setattr__(self, "_dependencies", _dependencies(self.plan))
        self._check_structure(self.plan)
        for index, motif in enumerate(self.motifs):
            self._check_motif(index, motif)
        self._check_order()

    @classmethod
    def of(cls, key: OpKey, plan: motifs.Plan, order: Sequence[int] | None = None, base: int = 0) -> OpPlan:
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
        (:func:`motifs.execute`, which also checks that ``Par`` parts are
        independent) on a *compressed* buffer: the range boundaries of the
        plan, 0, the end and the block boundaries cut the buffer into
        intervals that every motif treats alike, so one element stands for
        each and the cost does not depend on ``elements``. The inputs are
        random positive integers (exact in float64), so a missing or a double
        contribution always shows.
        """
        extent, block = _extent(self.key, elements)
        for index, motif in enumerate(self.motifs):
            for lo, hi in motif.ranges:
                if hi > extent:
                    unit = "columns per block" if self.key.kind == "all_to_all" else "elements"
                    self._fail(f"motif {index} ({motif}) reaches {hi} but the buffer has {extent} {unit}")
        cuts = {0, extent, *(range(0, extent, block) if block else ())}
        boundaries = sorted(cuts | {b for m in self.motifs for r in m.ranges for b in r})
        try:
            wrong = _wrong_numbers(self, boundaries, block)
        except InvalidInputError:
            self._fail("parallel parts of the plan touch the same elements, so their order matters; "
                       "put them in sequence (->)")
        if wrong:
            self._fail(f"the motifs do not compute {self.key.kind}: {wrong}")

    # -- construction checks
    def _check_structure(self, plan: motifs.Plan) -> None:
        if isinstance(plan, Motif):
            return
        if len(plan.parts) < 2:
            self._fail(f"a composition needs at least two parts, got {len(plan.parts)} in {plan}")
        for part in plan.parts:
            self._check_structure(part)

    def _check_motif(self, index: int, motif: Motif) -> None:
        where = f"motif {index} ({motif})"
        try:
            motifs.check_motif(motif)
        except InvalidInputError as error:
            self._fail(f"{where}: {error}")
        outside = [r for r in motif.ranks if r >= self.key.size]
        if outside:
            self._fail(f"{where} uses group position {outside[0]} but the group has {self.key.size} members")
        if motif.kind not in MOTIF_KINDS[self.key.kind]:
            fits = ", ".join(sorted(k.value for k in MOTIF_KINDS[self.key.kind]))
            self._fail(f"{where}: a {motif.kind} motif cannot be part of {self.key.kind} (use {fits})")
        if motif.kind is Kind.ALL_TO_ALL and motif.ranks != tuple(range(self.key.size)):
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
    ``base`` (what the optimizer's "default execution plan" is, §4.3.1)."""
    p, everyone = key.size, tuple(range(key.size))
    if key.kind == "all_to_all":
        columns = _extent(key, elements)[0]
        motif = Motif(Kind.ALL_TO_ALL, everyone, ((0, columns),), (0, p))
    elif key.kind in ("all_gather", "reduce_scatter"):
        kind = Kind.ALL_GATHER if key.kind == "all_gather" else Kind.REDUCE_SCATTER
        motif = Motif(kind, everyone, tuple((k * elements, (k + 1) * elements) for k in everyone))
    elif key.kind == "broadcast":
        ranks = (key.root, *(r for r in everyone if r != key.root))
        motif = Motif(Kind.BROADCAST, ranks, ((0, elements),))
    else:
        motif = Motif(Kind.ALL_REDUCE, everyone, ((0, elements),))
    return OpPlan(key, motif, (base,))


def _dependencies(plan: motifs.Plan) -> tuple[tuple[int, ...], ...]:
    """Immediate predecessors of every motif (motifs_of order), as in
    :func:`optimizer_service.dag.to_tasks`: a Seq part waits for the motifs
    that end the part before it."""
    before_of: list[tuple[int, ...]] = []

    def lower(part: motifs.Plan, before: tuple[int, ...]) -> tuple[int, ...]:
        if isinstance(part, Motif):
            before_of.append(before)
            return (len(before_of) - 1,)
        if isinstance(part, motifs.Seq):
            for inner in part.parts:
                before = lower(inner, before)
            return before
        return tuple(end for inner in part.parts for end in lower(inner, before))

    lower(plan, ())
    return tuple(before_of)


# ------------------------------------------------------------- numeric check
def _extent(key: OpKey, elements: int) -> tuple[int, int]:
    """``(extent, block)``: the length of the ranges' coordinate space and
    the block length (0 when the buffer has no blocks). For all_to_all the
    coordinates are the ``D`` columns of one block."""
    if elements < 0:
        raise PlanError(f"plan {key}: {elements} elements is not a size")
    if key.kind == "all_to_all":
        if elements % key.size:
            raise PlanError(f"plan {key}: all_to_all of {elements} elements does not split into "
                            f"{key.size} equal blocks")
        return elements // key.size, 0
    if key.kind in ("all_gather", "reduce_scatter"):
        return key.size * elements, elements
    return elements, 0


def _compress(plan: motifs.Plan, boundaries: list[int]) -> motifs.Plan:
    """``plan`` with every range boundary replaced by its index in ``boundaries``."""
    index = {b: i for i, b in enumerate(boundaries)}
    return motifs.rewrite(plan, lambda m: replace(m, ranges=tuple((index[a], index[b]) for a, b in m.ranges)))


def _wrong_numbers(op: OpPlan, boundaries: list[int], block: int) -> str | None:
    """Run the compressed plan on random positive integers, one vector per
    member, and compare with what the op must produce (module docstring):
    ``None`` when it does, else one line about the first difference."""
    p, cells, kind = op.key.size, len(boundaries) - 1, op.key.kind
    rng = np.random.default_rng(0)
    if kind == "all_to_all":
        inputs = rng.integers(1, 2 ** 24, (p, p, cells)).astype(float)
        want, care = inputs.transpose(1, 0, 2), np.ones(inputs.shape, dtype=bool)
    else:
        values = rng.integers(1, 2 ** 24, (p, cells)).astype(float)
        owner = np.array([b // block for b in boundaries[:-1]] if block else [0] * cells, dtype=int)
        own = owner[None, :] == np.arange(p)[:, None]          # member k's block k
        inputs, care, want = values, np.ones((p, cells), dtype=bool), values.sum(axis=0)
        if kind == "broadcast":
            want = values[op.key.root]
        elif kind == "all_gather":
            inputs, want = np.where(own, values, np.nan), values[owner, np.arange(cells)]
        elif kind == "reduce_scatter":
            care = own
        want = np.broadcast_to(want, (p, cells))
    result = motifs.execute(_compress(op.plan, boundaries), dict(enumerate(inputs)))
    return _first_wrong(op, np.stack([result[k] for k in range(p)]), want, care, boundaries)


def _first_wrong(op: OpPlan, got: np.ndarray, want: np.ndarray, care: np.ndarray,
                 boundaries: list[int]) -> str | None:
    """``None`` when ``got`` equals ``want`` wherever ``care``; else which
    member misses which interval (and, for all_to_all, from which member)."""
    wrong = care & (got != want)          # NaN (never written) differs from every value
    if not wrong.any():
        return None
    member, *source, cell = (int(i) for i in np.argwhere(wrong)[0])
    how = "never receives" if math.isnan(got[(member, *source, cell)]) else "ends with a wrong value in"
    where = f"[{boundaries[cell]}:{boundaries[cell + 1]})"
    what = f"columns {where} from member {source[0]}" if source else f"elements {where}"
    return f"member {member} (rank {op.key.group[member]}) {how} {what}"


# --------------------------------------------------------------------- plans
@dataclass(frozen=True)
class Plan:
    """A whole installed plan: every planned op of an iteration and the channels."""

    version: int
    world_size: int
    channels: dict[int, str | None]
    ops: tuple[OpPlan, ...]
    topology: str | None = None
    predicted_iteration_seconds: float | None = None
    _index: dict[tuple[tuple[int, ...], int], OpPlan] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", dict(self.channels))
        object.__setattr__(self, "ops", tuple(self.ops))
        if self.version < 1:
            raise PlanError(f"plan version must be >= 1, got {self.version}")
        if self.world_size < 1:
            raise PlanError(f"plan world_size must be >= 1, got {self.world_size}")
        for channel in self.channels:
            if channel < 0:
                raise PlanError(f"plan channel {channel} must be >= 0")
        seconds = self.predicted_iteration_seconds
        if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
            raise PlanError(f"plan predicted_iteration_seconds must be a finite number >= 0, got {seconds}")
        index: dict[tuple[tuple[int, ...], int], OpPlan] = {}
        for op in self.ops:
            self._check_op(op)
            if (op.key.group, op.key.seq) in index:
                op._fail(f"a second op with seq {op.key.seq} on this group")
            index[op.key.group, op.key.seq] = op
        object.__setattr__(self, "_index", index)

    def _check_op(self, op: OpPlan) -> None:
        outside = [r for r in op.key.group if r >= self.world_size]
        if outside:
            op._fail(f"group rank {outside[0]} is outside the world of {self.world_size} ranks")
        for index, motif in enumerate(op.motifs):
            if motif.channel not in self.channels:
                op._fail(f"motif {index} ({motif}) uses channel {motif.channel}, which 'channels' does not "
                         f"list (listed: {', '.join(map(str, self.channel_ids())) or 'none'})")

    # -- queries
    def lookup(self, group: Sequence[int], seq: int, kind: str, nbytes: int, root: int = 0) -> OpPlan | None:
        """The plan for the ``seq``-th op of ``group``, or ``None`` when the plan
        has none, or was made for a different op there (kind, bytes or root
        differ: the iteration changed shape and this entry must not run it)."""
        op = self._index.get((tuple(group), seq))
        if op is None or (op.key.kind, op.key.nbytes, op.key.root) != (kind, nbytes, root):
            return None
        return op

    def check_world(self, world_size: int) -> None:
        if world_size != self.world_size:
            raise PlanError(f"the plan is for a world of {self.world_size} ranks but this job has {world_size}")

    def channel_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.channels))

    def member_sets(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        """For each listed channel, the member sets (sorted global ranks) of the
        motifs on it, sorted, so every rank creates the same subgroups in the
        same order before the first op (motif ranks mapped through the op's group)."""
        sets: dict[int, set[tuple[int, ...]]] = {channel: set() for channel in self.channels}
        for op in self.ops:
            for motif in op.motifs:
                sets[motif.channel].add(tuple(sorted(op.key.group[r] for r in motif.ranks)))
        return {channel: tuple(sorted(members)) for channel, members in sorted(sets.items())}

    # -- JSON
    @classmethod
    def parse(cls, text: str) -> Plan:
        """The plan in a JSON document (the module docstring shows one)."""
        return _plan_from_json(_load_json(text))

    def to_json(self) -> str:
        """The JSON document :meth:`parse` reads back; one line per op, so plans diff well."""
        header: dict = {"format": FORMAT, "version": self.version, "world_size": self.world_size,
                        "channels": {str(c): self.channels[c] for c in self.channel_ids()}}
        if self.topology is not None:
            header["topology"] = self.topology
        if self.predicted_iteration_seconds is not None:
            header["predicted_iteration_seconds"] = self.predicted_iteration_seconds
        fields = [f" {json.dumps(name)}: {json.dumps(value)}," for name, value in header.items()]
        ops = ",\n".join(f"  {json.dumps(_op_to_json(op))}" for op in self.ops)
        return "\n".join(["{", *fields, ' "ops": [', *([ops] if ops else []), " ]", "}"]) + "\n"


def _op_to_json(op: OpPlan) -> dict:
    key = op.key
    entry: dict = {"seq": key.seq, "kind": key.kind, "bytes": key.nbytes, "group": list(key.group)}
    if key.kind == "broadcast":
        entry["root"] = key.root
    entry["plan"] = str(op.plan)
    entry["order"] = list(op.order)
    return entry


# ---------------------------------------------------------- JSON decoding
_PLAN_FIELDS = ({"format", "version", "world_size", "ops"},
                {"channels", "topology", "predicted_iteration_seconds"})
_OP_FIELDS = ({"seq", "kind", "bytes", "group", "plan", "order"}, {"root"})


def _load_json(text: str) -> dict:
    try:
        document = json.loads(text)
    except (TypeError, ValueError) as error:
        raise PlanError(f"the plan is not JSON: {error}") from None
    _check_fields(document, "plan", *_PLAN_FIELDS)
    if document["format"] != FORMAT:
        raise PlanError(f"plan format is {document['format']!r}, expected {FORMAT!r}")
    return document


def _plan_from_json(document: dict) -> Plan:
    channels = _channels_from_json(document.get("channels", {"0": None}))
    ops = _typed(document, "ops", list, "plan", "a list")
    topology = document.get("topology")
    if topology is not None and not isinstance(topology, str):
        raise PlanError(f"plan: 'topology' must be a string, got {json.dumps(topology)}")
    seconds = document.get("predicted_iteration_seconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))):
        raise PlanError(f"plan: 'predicted_iteration_seconds' must be a number, got {json.dumps(seconds)}")
    return Plan(version=_integer(document, "version", "plan"),
                world_size=_integer(document, "world_size", "plan"),
                channels=channels,
                ops=tuple(_op_from_json(entry, f"plan ops[{i}]") for i, entry in enumerate(ops)),
                topology=topology,
                predicted_iteration_seconds=None if seconds is None else float(seconds))


def _channels_from_json(value) -> dict[int, str | None]:
    if not isinstance(value, dict):
        raise PlanError(f"plan: 'channels' must be an object of channel id -> interface, got {json.dumps(value)}")
    channels: dict[int, str | None] = {}
    for name, interface in value.items():
        if not (name.isdigit() and name.isascii()):
            raise PlanError(f"plan: channel id {name!r} in 'channels' must be a non-negative integer")
        if interface is not None and not isinstance(interface, str):
            raise PlanError(f"plan: channel {name} must name a network interface or be null, "
                            f"got {json.dumps(interface)}")
        channels[int(name)] = interface
    return channels


def _op_from_json(entry, where: str) -> OpPlan:
    _check_fields(entry, where, *_OP_FIELDS)
    kind = _typed(entry, "kind", str, where, "a string")
    group = _integers(entry, "group", where)
    order = _integers(entry, "order", where)
    text = _typed(entry, "plan", str, where, "a string")
    key = OpKey(_integer(entry, "seq", where), kind, _integer(entry, "bytes", where), tuple(group),
                _integer(entry, "root", where) if "root" in entry else 0)
    try:
        plan = motifs.parse_plan(text)
    except InvalidInputError as error:
        raise PlanError(f"plan {key}: {error}") from None
    return OpPlan(key, plan, tuple(order))


def _check_fields(value, where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(value, dict):
        raise PlanError(f"{where} must be a JSON object, got {json.dumps(value)[:60]}")
    missing = sorted(required - value.keys())
    if missing:
        raise PlanError(f"{where}: missing field {missing[0]!r}")
    unknown = sorted(value.keys() - required - optional)
    if unknown:
        raise PlanError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(required | optional))})")


def _typed(value: dict, name: str, kind: type, where: str, wanted: str):
    if not isinstance(value[name], kind):
        raise PlanError(f"{where}: {name!r} must be {wanted}, got {json.dumps(value[name])[:60]}")
    return value[name]


def _integer(value: dict, name: str, where: str) -> int:
    number = value[name]
    if isinstance(number, bool) or not isinstance(number, int):
        raise PlanError(f"{where}: {name!r} must be an integer, got {json.dumps(number)[:60]}")
    return number


def _integers(value: dict, name: str, where: str) -> list[int]:
    numbers = _typed(value, name, list, where, "a list of integers")
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
        raise PlanError(f"{where}: {name!r} must be a list of integers, got {json.dumps(numbers)[:60]}")
    return numbers
