"""The synthesis hierarchy and the device groups a reduction derives.

P² §2.5 / §3.4 / Theorem 3.2: programs are synthesized over hierarchy (d), the
parallelism factors of the reduction axes only, with a ``(root, 1)`` level on
top (App. B) — it is at least as expressive as the system hierarchy, column-
or row-based factors, and much smaller. With several reduction axes, factors
from the same hardware level are collapsed into one level (Table 1:
``[1 2 3 7 8 9]`` → ``[7 16 27]``). We also drop levels whose factor is 1:
they only repeat groups other instructions already derive. Each kept level is
named after its hardware level.

Devices of the synthesis hierarchy are numbered mixed-radix over its levels.
Groups (P² §3.3, Table 2), for slice level ``s``:

* ``InsideGroup`` — devices under the same instance of ``s``;
* ``Parallel(e)``, ``e`` an ancestor of ``s`` — devices at the same position
  of their ``s``-group, among the ``s``-groups under one instance of ``e``;
* ``Master(e)`` — of those, only the group of first positions, for each
  instance of ``e``. (Table 2 shows only ``Master(rack)`` with one rack; we
  read "only reduces over the first device group" per instance of ``e``, which
  is what Reduce–AllReduce–Broadcast across the roots of sub-groups needs.)

Group members are in ascending device order, so a group's first device — the
root of Reduce and Broadcast — is its smallest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import ROOT_LEVEL, Level
from optimizer_service.p2.placement import ParallelismMatrix
from optimizer_service.p2.program import Form, FormKind, Reduction
from optimizer_service.plan.lowered import Groups


@dataclass(frozen=True)
class SynthesisHierarchy:
    """Levels of the hierarchy programs are synthesized over; level 0 is the root."""

    levels: tuple[Level, ...]

    def __post_init__(self) -> None:
        if not self.levels or self.levels[0].cardinality != 1:
            raise InvalidInputError("a synthesis hierarchy starts with a root level of cardinality 1")
        names = [level.name for level in self.levels]
        if len(set(names)) != len(names):
            raise InvalidInputError(f"synthesis hierarchy level names {names} are not unique")
        for level in self.levels:
            if level.cardinality < 1:
                raise InvalidInputError(f"level {level.name!r} has cardinality {level.cardinality} < 1")

    @classmethod
    def for_reduction(cls, matrix: ParallelismMatrix, level_names: Sequence[str],
                      reduce: Sequence[int]) -> SynthesisHierarchy:
        """Hierarchy (d) of P² §3.4 for reducing over ``reduce`` with placement ``matrix``."""
        levels = [Level(ROOT_LEVEL, 1)]
        for j, name in enumerate(level_names):
            factor = math.prod(matrix.rows[a][j] for a in reduce)
            if factor > 1:
                levels.append(Level(name, factor))
        return cls(tuple(levels))

    @property
    def cardinalities(self) -> tuple[int, ...]:
        return tuple(level.cardinality for level in self.levels)

    @cached_property
    def device_count(self) -> int:
        return math.prod(self.cardinalities)

    def level_index(self, name: str) -> int:
        for index, level in enumerate(self.levels):
            if level.name == name:
                return index
        names = ", ".join(level.name for level in self.levels)
        raise InvalidInputError(f"level {name!r} is not in the synthesis hierarchy ({names})")

    def stride(self, level: int) -> int:
        """Devices per instance of ``level``."""
        return math.prod(self.cardinalities[level + 1:])

    def groups(self, slice_name: str, form: Form) -> Groups:
        """The device groups ``(slice, form)`` derives (Table 2)."""
        s = self.level_index(slice_name)
        if form.kind is FormKind.INSIDE_GROUP:
            return self.groups_at(s, FormKind.INSIDE_GROUP, None)
        assert form.level is not None
        e = self.level_index(form.level)
        if e >= s:
            raise InvalidInputError(
                f"in '{slice_name} {form}', {form.level!r} must be an ancestor of the slice {slice_name!r}")
        return self.groups_at(s, form.kind, e)

    def groups_for(self, reduction: Reduction) -> Groups:
        return self.groups(reduction.slice, reduction.form)

    def groups_at(self, s: int, kind: FormKind, e: int | None) -> Groups:
        """Groups by level indices (the synthesizer's form of :meth:`groups`)."""
        slice_stride = self.stride(s)
        buckets: dict[tuple[int, int], list[int]] = {}
        for device in range(self.device_count):
            if kind is FormKind.INSIDE_GROUP:
                key = (device // slice_stride, 0)
            else:
                assert e is not None
                position = device % slice_stride
                if kind is FormKind.MASTER and position:
                    continue
                key = (device // self.stride(e), position)
            buckets.setdefault(key, []).append(device)
        return tuple(sorted(tuple(members) for members in buckets.values()))

    def __str__(self) -> str:
        return "[" + ", ".join(str(level) for level in self.levels) + "]"

    @classmethod
    def parse(cls, text: str) -> SynthesisHierarchy:
        pairs = re.findall(r"\(\s*([A-Za-z][\w-]*)\s*,\s*([0-9]+)\s*\)", text)
        if not pairs:
            raise InvalidInputError(f"synthesis hierarchy {text!r} is not of the form [(root, 1), (node, 2)]")
        return cls(tuple(Level(name, int(card)) for name, card in pairs))
