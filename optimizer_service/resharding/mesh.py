"""Device meshes and where they sit on a topology (Zhuang et al., MLSys 2023, §2.2).

A mesh is an n-dimensional array of devices; the paper works with its 2-D
view ``(m1, m2)`` (a ``(2, 2)`` mesh ``[[0, 1], [2, 3]]``). :class:`Mesh`
holds a 1-D or 2-D shape and the global ranks in row-major order. Text forms:

* ``[[0,1,2,3],[4,5,6,7]]`` (or ``[0,1,2,3]`` for 1-D) — an explicit mesh,
  what ``str(mesh)`` writes and :meth:`Mesh.parse` reads back;
* ``2x4`` (or ``8``) — a shape only, placed by :func:`place_meshes`.

**Automatic placement** (the reading of §2.2 "two non-overlapping device
meshes" and App. A.6 "we run our microbenchmark assuming the sender and
receiver are on different nodes"): each row of a 2-D mesh lies on one host's
first ``cols`` devices, the source rows on the first free hosts and the
destination rows on the hosts after them; a 1-D mesh of ``n`` devices takes
the first ``n`` devices of consecutive free hosts. A host is the outermost
level of the topology: ``host(rank) = rank // devices_per_instance(0)``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Union

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology

#: The largest mesh the planner accepts (devices); beyond it a request is refused.
MAX_MESH_DEVICES = 4096

MeshShape = tuple[int, ...]
MeshOrShape = Union["Mesh", MeshShape]


def _check_shape(shape: tuple[int, ...], what: str = "mesh") -> None:
    if len(shape) not in (1, 2):
        raise InvalidInputError(f"{what} shape {'x'.join(map(str, shape))} has {len(shape)} dimensions; "
                                f"a mesh is 1-D (8) or 2-D (2x4)")
    if any(size < 1 for size in shape):
        raise InvalidInputError(f"{what} shape {'x'.join(map(str, shape))} needs every dimension >= 1")
    if math.prod(shape) > MAX_MESH_DEVICES:
        raise InvalidInputError(f"{what} shape {'x'.join(map(str, shape))} has {math.prod(shape)} devices; "
                                f"at most {MAX_MESH_DEVICES} are supported")


@dataclass(frozen=True)
class Mesh:
    """A 1-D or 2-D array of global ranks, row-major (§2.2's ``Mesh_A``)."""

    shape: MeshShape
    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        _check_shape(self.shape)
        if len(self.ranks) != math.prod(self.shape):
            raise InvalidInputError(f"mesh of shape {'x'.join(map(str, self.shape))} needs "
                                    f"{math.prod(self.shape)} ranks, got {len(self.ranks)}")
        if any(rank < 0 for rank in self.ranks):
            raise InvalidInputError(f"mesh {self} has a negative rank")
        if len(set(self.ranks)) != len(self.ranks):
            repeated = sorted({r for r in self.ranks if self.ranks.count(r) > 1})
            raise InvalidInputError(f"mesh {self} lists rank {repeated[0]} more than once")

    @classmethod
    def grid(cls, rows: list[list[int]] | list[int]) -> Mesh:
        """A mesh from nested lists: ``[[0, 1], [2, 3]]`` or ``[0, 1, 2, 3]``."""
        if rows and all(isinstance(row, (list, tuple)) for row in rows):
            widths = {len(row) for row in rows}
            if len(widths) != 1:
                raise InvalidInputError(f"mesh rows {rows} have different lengths; every row needs as many ranks")
            return cls((len(rows), widths.pop()), tuple(int(r) for row in rows for r in row))
        if any(isinstance(row, (list, tuple)) for row in rows):
            raise InvalidInputError(f"mesh {rows} mixes ranks and rows")
        return cls((len(rows),), tuple(int(r) for r in rows))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def rows(self) -> tuple[tuple[int, ...], ...]:
        """The rows of a 2-D mesh (a 1-D mesh is one row)."""
        cols = self.shape[-1]
        return tuple(self.ranks[i:i + cols] for i in range(0, self.size, cols))

    def position(self, index: int) -> tuple[int, ...]:
        """The mesh coordinates of the ``index``-th rank (row-major)."""
        if self.ndim == 1:
            return (index,)
        return divmod(index, self.shape[1])

    def positions(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(rank, coordinates)`` for every device, row-major."""
        return [(rank, self.position(i)) for i, rank in enumerate(self.ranks)]

    def hosts(self, devices_per_host: int) -> tuple[int, ...]:
        """The hosts the mesh's ranks live on, ascending."""
        return tuple(sorted({rank // devices_per_host for rank in self.ranks}))

    def __str__(self) -> str:
        if self.ndim == 1:
            return "[" + ",".join(map(str, self.ranks)) + "]"
        return "[" + ",".join("[" + ",".join(map(str, row)) + "]" for row in self.rows) + "]"

    @classmethod
    def parse(cls, text: str) -> Mesh:
        compact = re.sub(r"\s+", "", text)
        if re.fullmatch(r"\[\d+(,\d+)*\]", compact):
            return cls.grid([int(v) for v in compact[1:-1].split(",")])
        if re.fullmatch(r"\[(\[\d+(,\d+)*\])(,\[\d+(,\d+)*\])*\]", compact):
            rows = re.findall(r"\[([\d,]+)\]", compact[1:-1])
            return cls.grid([[int(v) for v in row.split(",")] for row in rows])
        raise InvalidInputError(f"mesh {text!r} is not a shape like 2x4 nor ranks like [[0,1,2,3],[4,5,6,7]]")


def parse_mesh_shape(text: str) -> MeshShape:
    """``2x4`` → ``(2, 4)``; ``8`` → ``(8,)``."""
    compact = text.strip().lower()
    if not re.fullmatch(r"\d+(x\d+)*", compact):
        raise InvalidInputError(f"mesh shape {text!r} is not like 2x4 (rows x devices per row) or 8")
    shape = tuple(int(v) for v in compact.split("x"))
    _check_shape(shape)
    return shape


def parse_mesh(text: str) -> MeshOrShape:
    """A mesh's text: explicit ranks (``[[0,1],[2,3]]``) give a :class:`Mesh`,
    a shape (``2x4``) gives the shape tuple, to be placed by :func:`place_meshes`."""
    if text.strip().startswith("["):
        return Mesh.parse(text)
    return parse_mesh_shape(text)


def describe(mesh: MeshOrShape) -> str:
    return str(mesh) if isinstance(mesh, Mesh) else "x".join(map(str, mesh))


def host_of(rank: int, topology: Topology) -> int:
    """The host (outermost topology level) a rank lives on."""
    return rank // topology.devices_per_instance(0)


def place_meshes(src: MeshOrShape, dst: MeshOrShape, topology: Topology) -> tuple[Mesh, Mesh]:
    """Place the source and destination meshes on ``topology`` (module
    docstring): explicit meshes are checked, shapes are placed on whole free
    hosts, source first. Raises :class:`InvalidInputError` (one line) when a
    mesh does not fit."""
    per_host = topology.devices_per_instance(0)
    hosts = topology.hierarchy[0]
    explicit = {role: mesh for role, mesh in (("source", src), ("destination", dst)) if isinstance(mesh, Mesh)}
    for role, mesh in explicit.items():
        outside = [r for r in mesh.ranks if r >= topology.device_count]
        if outside:
            raise InvalidInputError(f"{role} mesh {mesh} names rank {outside[0]}, outside topology "
                                    f"{topology.name!r} ({topology.device_count} devices: ranks 0..{topology.device_count - 1})")
    if len(explicit) == 2:
        shared = sorted(set(explicit["source"].ranks) & set(explicit["destination"].ranks))
        if shared:
            raise InvalidInputError(f"ranks {shared} are in both meshes; cross-mesh resharding needs disjoint "
                                    f"source and destination meshes")
    used = {rank // per_host for mesh in explicit.values() for rank in mesh.ranks}
    free = [host for host in range(hosts) if host not in used]
    wanted = []
    for role, mesh in (("source", src), ("destination", dst)):
        if isinstance(mesh, Mesh):
            continue
        _check_shape(mesh, f"{role} mesh")
        if len(mesh) == 2 and mesh[1] > per_host:
            raise InvalidInputError(f"{role} mesh {describe(mesh)} puts {mesh[1]} devices on a host, but topology "
                                    f"{topology.name!r} has {per_host} per host; use at most {per_host} columns or "
                                    f"an explicit mesh like [[0,1],[2,3]]")
        wanted.append((role, mesh, mesh[0] if len(mesh) == 2 else -(-mesh[0] // per_host)))
    need = sum(count for _, _, count in wanted)
    if need > len(free):
        shapes = " and ".join(f"{role} {describe(mesh)}" for role, mesh, _ in wanted)
        raise InvalidInputError(f"meshes {shapes} need {need} free hosts of up to {per_host} devices; topology "
                                f"{topology.name!r} has {len(free)} free of {hosts}; give a larger --topology or "
                                f"smaller meshes")
    placed = dict(explicit)
    for role, mesh, count in wanted:
        taken, free = free[:count], free[count:]
        if len(mesh) == 2:
            ranks = tuple(host * per_host + col for host in taken for col in range(mesh[1]))
        else:
            ranks = tuple(host * per_host + col for host in taken for col in range(per_host))[:mesh[0]]
        placed[role] = Mesh(tuple(mesh), ranks)
    return placed["source"], placed["destination"]
