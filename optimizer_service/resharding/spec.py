"""Sharding specs and the data slice each device holds (Zhuang et al., MLSys
2023, §2.2, following GSPMD).

A spec is one letter per tensor dimension: ``R`` (replicated) or ``S`` with the
mesh dimensions it is sharded over, ``S^0``, ``S^1`` or ``S^01`` (both, mesh
dimension 0 major: device ``(i, j)`` of an ``(m1, m2)`` mesh holds shard
``i·m2 + j``). ``S^0RR`` shards a 3-D tensor's first dimension over the mesh
rows. The garbled forms ``S0``, ``S_0``, ``S01`` and ``S^{01}`` are read too;
``str`` writes the ``S^0`` form, which parses back. A mesh dimension shards at
most one tensor dimension; ``S^1`` and ``S^01`` need a 2-D mesh.

**Uneven lengths** (the paper's case 6 pads (1024, 1024, 512) onto a (3, 4)
mesh). Reading: a dimension of length ``l`` in ``k`` shards is laid out
padded — every shard is ``c = ceil(l / k)`` long, shard ``s`` covers
``[s·c, (s+1)·c)`` — and the padding is never stored nor sent: the slice a
device holds is that range clipped to ``[0, l)``, so the last shards may be
shorter or empty. This is ``torch.chunk``'s and DTensor ``Shard``'s layout.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.resharding import Box
from optimizer_service.resharding.mesh import Mesh, MeshOrShape, MeshShape, parse_mesh

#: The largest tensor rank the planner accepts.
MAX_TENSOR_RANK = 8


class DimSharding(str, Enum):
    """How one tensor dimension is laid out over the mesh."""

    R = "R"
    S0 = "S^0"
    S1 = "S^1"
    S01 = "S^01"

    def __str__(self) -> str:
        return self.value

    @property
    def mesh_dims(self) -> tuple[int, ...]:
        return {"R": (), "S^0": (0,), "S^1": (1,), "S^01": (0, 1)}[self.value]


_TOKEN = re.compile(r"R|S(?:\^|_)?\{?(01|0|1)?\}?")


def shard_range(length: int, shards: int, index: int) -> tuple[int, int]:
    """``[start, stop)`` of shard ``index`` of ``shards`` over ``length`` (the padded layout, clipped)."""
    size = -(-length // shards)
    return min(index * size, length), min((index + 1) * size, length)


@dataclass(frozen=True)
class ShardingSpec:
    """One :class:`DimSharding` per tensor dimension (module docstring)."""

    dims: tuple[DimSharding, ...]

    def __post_init__(self) -> None:
        if not self.dims:
            raise InvalidInputError("a sharding spec needs one letter per tensor dimension, e.g. S^0RR")
        if len(self.dims) > MAX_TENSOR_RANK:
            raise InvalidInputError(f"sharding spec {self} has {len(self.dims)} dimensions; at most "
                                    f"{MAX_TENSOR_RANK} are supported")
        used = [d for dim in self.dims for d in dim.mesh_dims]
        if len(used) != len(set(used)):
            twice = next(d for d in used if used.count(d) > 1)
            raise InvalidInputError(f"sharding spec {self} shards over mesh dimension {twice} twice; each mesh "
                                    f"dimension shards at most one tensor dimension")

    def __str__(self) -> str:
        return "".join(dim.value for dim in self.dims)

    @classmethod
    def parse(cls, text: str) -> ShardingSpec:
        compact = re.sub(r"\s+", "", text).upper()
        dims, at = [], 0
        while at < len(compact):
            match = _TOKEN.match(compact, at)
            if not match or match.end() == at:
                raise InvalidInputError(f"sharding spec {text!r}: cannot read {compact[at:]!r}; use one of R, S^0, "
                                        f"S^1, S^01 per tensor dimension, e.g. S^0RR")
            if match.group(0).startswith("S") and match.group(1) is None:
                raise InvalidInputError(f"sharding spec {text!r}: 'S' needs the mesh dimensions it shards over "
                                        f"(S^0, S^1 or S^01)")
            dims.append(DimSharding("R" if match.group(0) == "R" else f"S^{match.group(1)}"))
            at = match.end()
        return cls(tuple(dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    def check(self, shape: tuple[int, ...], mesh_shape: MeshShape) -> None:
        """Raise (one line) unless the spec fits a tensor of ``shape`` on a mesh of ``mesh_shape``."""
        if len(shape) != self.rank:
            raise InvalidInputError(f"sharding spec {self} has {self.rank} dimensions but the tensor "
                                    f"{'x'.join(map(str, shape))} has {len(shape)}; give one letter per dimension")
        if len(mesh_shape) == 1:
            needs_2d = [dim for dim in self.dims if 1 in dim.mesh_dims]
            if needs_2d:
                raise InvalidInputError(f"sharding spec {self} uses {needs_2d[0]}, which needs a 2-D mesh, but "
                                        f"the mesh is 1-D ({mesh_shape[0]}); use a mesh like 2x4")

    def shard_counts(self, mesh_shape: MeshShape) -> tuple[int, ...]:
        """How many shards each tensor dimension is split into."""
        return tuple(math.prod(mesh_shape[d] for d in dim.mesh_dims) for dim in self.dims)

    def shard_index(self, mesh_shape: MeshShape, position: tuple[int, ...]) -> tuple[int, ...]:
        """The shard, per tensor dimension, the device at ``position`` holds (0 where replicated)."""
        index = []
        for dim in self.dims:
            if dim is DimSharding.S01:
                index.append(position[0] * mesh_shape[1] + position[1])
            elif dim.mesh_dims:
                index.append(position[dim.mesh_dims[0]])
            else:
                index.append(0)
        return tuple(index)

    def cut_points(self, shape: tuple[int, ...], mesh_shape: MeshShape) -> tuple[tuple[int, ...], ...]:
        """Per tensor dimension, the boundaries of its shards (App. B.2's ``Cut(d)``)."""
        return tuple(tuple(sorted({shard_range(length, k, s)[0] for s in range(k)} | {length}))
                     for length, k in zip(shape, self.shard_counts(mesh_shape)))

    def box(self, shape: tuple[int, ...], mesh_shape: MeshShape, position: tuple[int, ...]) -> Box:
        """The slice the device at ``position`` holds (possibly empty)."""
        ranges = [shard_range(length, k, s) for length, k, s in
                  zip(shape, self.shard_counts(mesh_shape), self.shard_index(mesh_shape, position))]
        return Box(tuple(a for a, _ in ranges), tuple(b for _, b in ranges))

    def boxes(self, shape: tuple[int, ...], mesh: Mesh) -> dict[int, Box]:
        """Rank → the slice it holds, for every device of ``mesh``."""
        self.check(shape, mesh.shape)
        return {rank: self.box(shape, mesh.shape, position) for rank, position in mesh.positions()}


def parse_endpoint(text: str) -> tuple[ShardingSpec, MeshOrShape]:
    """``S^0RR@2x4`` → (spec, shape); ``S^0R@[[0,1],[2,3]]`` → (spec, :class:`Mesh`)."""
    spec_text, at, mesh_text = text.partition("@")
    if not at or not spec_text.strip() or not mesh_text.strip():
        raise InvalidInputError(f"endpoint {text!r} is not SPEC@MESH, e.g. S^0RR@2x4 or S^0R@[[0,1],[2,3]]")
    return ShardingSpec.parse(spec_text), parse_mesh(mesh_text)
