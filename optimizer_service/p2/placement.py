"""Parallelism placement: parallelism matrices (P² §3.1) and device numbering.

A parallelism matrix ``x`` has one row per parallelism axis and one column per
hierarchy level. Equation (1): each column multiplies to the level's
cardinality; equation (2): each row multiplies to the axis size. Entry
``x[a][j]`` says into how many parts level ``j`` splits axis ``a``.

Device numbering (our convention, the paper leaves it implicit). A device's
index ``i_j`` at hardware level ``j`` is split into one digit per axis,
``d[a][j]`` in ``[0, x[a][j])``, axis 0 most significant; the device's
coordinate on axis ``a`` is the mixed-radix number of ``d[a][0..n]``, outer
level most significant. So for ``x = [[1 2 2 1] [1 1 1 4]]`` on
``[1 2 2 4]`` (P² Figure 2b) device A0 is data replica 0, shard 0, and the
four GPUs of one CPU hold the four shards of one replica. The global id is
linear in the digits: ``g = Σ d[a][j]·w[a][j]`` with
``w[a][j] = (devices per instance of level j)·Π_{b>a} x[b][j]`` — lowering
uses this to place a synthesized pattern on every reduction group.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from optimizer_service.errors import InvalidInputError


@dataclass(frozen=True)
class ParallelismMatrix:
    """Rows are parallelism axes, columns are hierarchy levels (outermost first)."""

    rows: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.rows or not self.rows[0]:
            raise InvalidInputError("a parallelism matrix needs at least one row and one column")
        width = len(self.rows[0])
        for row in self.rows:
            if len(row) != width:
                raise InvalidInputError(f"parallelism matrix {self.rows!r} has rows of different lengths")
            for value in row:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise InvalidInputError(f"parallelism matrix entry {value!r} must be a whole number >= 1")

    @property
    def axes(self) -> tuple[int, ...]:
        """Row products: the parallelism axis sizes (equation 2)."""
        return tuple(math.prod(row) for row in self.rows)

    @property
    def hierarchy(self) -> tuple[int, ...]:
        """Column products: the hierarchy cardinalities (equation 1)."""
        return tuple(math.prod(column) for column in zip(*self.rows))

    def __str__(self) -> str:
        return "[" + " ".join("[" + " ".join(map(str, row)) + "]" for row in self.rows) + "]"

    @classmethod
    def parse(cls, text: str) -> ParallelismMatrix:
        """Read the text form ``[[1 4] [4 4]]`` (commas are accepted too)."""
        cleaned = text.strip()
        if not re.fullmatch(r"\[\s*(\[[0-9,\s]*\]\s*,?\s*)+\]", cleaned):
            raise InvalidInputError(f"parallelism matrix {text!r} is not of the form [[1 4] [4 4]]")
        rows = re.findall(r"\[([0-9,\s]*)\]", cleaned[1:-1])
        parsed = tuple(tuple(int(v) for v in re.split(r"[,\s]+", row.strip()) if v) for row in rows)
        return cls(parsed)

    def to_lists(self) -> list[list[int]]:
        return [list(row) for row in self.rows]

    # ------------------------------------------------------------ numbering
    def digit_weights(self) -> tuple[tuple[int, ...], ...]:
        """``w[a][j]`` such that device id ``g = Σ d[a][j]·w[a][j]`` (module docstring)."""
        hierarchy = self.hierarchy
        weights = []
        for a in range(len(self.rows)):
            row = []
            for j in range(len(hierarchy)):
                below = math.prod(hierarchy[j + 1:])
                inner_axes = math.prod(self.rows[b][j] for b in range(a + 1, len(self.rows)))
                row.append(below * inner_axes)
            weights.append(tuple(row))
        return tuple(weights)

    def axis_coordinates(self, device: int) -> tuple[int, ...]:
        """The coordinate of ``device`` on every parallelism axis."""
        hierarchy = self.hierarchy
        level_index = []
        rest = device
        for cardinality in reversed(hierarchy):
            level_index.append(rest % cardinality)
            rest //= cardinality
        level_index.reverse()
        coordinates = [0] * len(self.rows)
        for j, index in enumerate(level_index):
            digits = []
            for a in reversed(range(len(self.rows))):
                digits.append(index % self.rows[a][j])
                index //= self.rows[a][j]
            digits.reverse()
            for a, digit in enumerate(digits):
                coordinates[a] = coordinates[a] * self.rows[a][j] + digit
        return tuple(coordinates)


def check_axes(hierarchy: Sequence[int], axes: Sequence[int], reduce: Sequence[int]) -> tuple[int, ...]:
    """Validate a placement request; return the reduction axes sorted."""
    devices = math.prod(hierarchy)
    if not axes:
        raise InvalidInputError("give at least one parallelism axis, e.g. --axes 4,16")
    for size in axes:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidInputError(f"axis size {size!r} must be a whole number >= 1")
    if math.prod(axes) != devices:
        raise InvalidInputError(
            f"axes {list(axes)} multiply to {math.prod(axes)} but the hierarchy {list(hierarchy)} has "
            f"{devices} devices; the product of the axes must equal the device count")
    if not reduce:
        raise InvalidInputError("give at least one reduction axis, e.g. --reduce 0")
    for axis in reduce:
        if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < len(axes):
            raise InvalidInputError(
                f"reduction axis {axis!r} is out of range; axes are numbered 0..{len(axes) - 1}")
    if len(set(reduce)) != len(reduce):
        raise InvalidInputError(f"reduction axes {list(reduce)} name an axis twice")
    return tuple(sorted(reduce))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _row_choices(target: int, capacity: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Rows ``r`` with ``Π r = target`` and ``r[j] | capacity[j]``, lexicographic."""
    if len(capacity) == 1:
        if capacity[0] % target == 0:
            yield (target,)
        return
    for d in _divisors(math.gcd(target, capacity[0])):
        for rest in _row_choices(target // d, capacity[1:]):
            yield (d, *rest)


def enumerate_matrices(hierarchy: Sequence[int], axes: Sequence[int]) -> Iterator[ParallelismMatrix]:
    """Every parallelism matrix for ``hierarchy`` and ``axes`` (P² §3.1, equations 1–2),
    in lexicographic order of the flattened matrix."""
    hierarchy, axes = tuple(hierarchy), tuple(axes)
    if math.prod(hierarchy) != math.prod(axes):
        return

    def rows_from(axis: int, capacity: tuple[int, ...]) -> Iterator[tuple[tuple[int, ...], ...]]:
        if axis == len(axes) - 1:
            if math.prod(capacity) == axes[axis]:
                yield (capacity,)
            return
        for row in _row_choices(axes[axis], capacity):
            remaining = tuple(c // r for c, r in zip(capacity, row))
            for rest in rows_from(axis + 1, remaining):
                yield (row, *rest)

    for rows in rows_from(0, hierarchy):
        yield ParallelismMatrix(rows)


def count_matrices(hierarchy: Sequence[int], axes: Sequence[int]) -> int:
    """How many matrices :func:`enumerate_matrices` yields, without building them."""
    hierarchy, axes = tuple(hierarchy), tuple(axes)
    if math.prod(hierarchy) != math.prod(axes):
        return 0

    @cache
    def count_rows(axis: int, capacity: tuple[int, ...]) -> int:
        if axis == len(axes) - 1:
            return 1 if math.prod(capacity) == axes[axis] else 0
        return sum(count_rows(axis + 1, tuple(c // r for c, r in zip(capacity, row)))
                   for row in _row_choices(axes[axis], capacity))

    return count_rows(0, hierarchy)
