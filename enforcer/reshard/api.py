"""Cross-mesh resharding for PyTorch users, and its DTensor adapter (Zhuang et al., MLSys 2023, §2.2).

The program comes from the planner in the user's script (the enforcer does not
plan); without a clock the planner is deterministic, so every rank may plan
the same program itself (or rank 0 plans and broadcasts its text)::

    from optimizer_service.resharding.mesh import Mesh
    from optimizer_service.resharding.planner import plan_resharding

    program = plan_resharding(shape, "S^0RR", "[[0,1],[2,3]]", "RS^0R", "[[4,5],[6,7]]", topology).program
    out = reshard(local, program)          # every rank; sources pass their shard

    # a DTensor on DeviceMesh src, to DeviceMesh dst with placements dst_placements:
    program = plan_resharding(tuple(dt.shape), spec_from_placements(dt.placements, dt.ndim),
                              Mesh.grid(mesh_ranks(src)), spec_from_placements(dst_placements, dt.ndim),
                              Mesh.grid(mesh_ranks(dst)), topology).program
    moved = reshard_dtensor(dt, dst, dst_placements, program)

* :func:`reshard` — one call per resharding on every rank of the world. The
  first call with a program builds its :class:`~enforcer.reshard.resharder.Resharder`
  (collective: all ranks, same programs, same order); later calls with the same
  program (the same object, or an equal one) reuse it. Source ranks pass their
  local shard; destination ranks get their slice (they pass ``dtype=`` or
  ``out=``, or a tensor of the right dtype as ``local``); other ranks get ``None``.
* DTensor: :func:`spec_from_placements` and :func:`mesh_ranks` turn a DTensor's
  placements and ``DeviceMesh`` into the paper's spec and mesh for the planner;
  :func:`reshard_dtensor` moves a DTensor to a destination mesh with a program.

DTensor and the paper's specs. ``Shard(d)`` on mesh dimension ``i`` is the
paper's ``S^i`` on tensor dimension ``d``; ``Shard(d)`` on both dimensions of a
2-D mesh is ``S^01``; ``Replicate()`` is ``R``. ``Partial`` (pending reductions)
has no counterpart in the paper and is refused. A 1-D ``DeviceMesh`` is a 1-D
mesh (``S^0`` shards over all its ranks).

Where they differ: DTensor shards *nested* — ``[Shard(d), Shard(d)]`` first cuts
dimension ``d`` into ``m1`` chunks (``torch.chunk``: ceil-sized, the tail short
or empty), then each chunk into ``m2`` — while ``S^01`` cuts the dimension once,
flat, into ``m1·m2`` ceil-sized chunks. The two agree when the size divides by
``m1·m2`` (and in some other cases); where they do not (say 5 rows over a 2×2
mesh: nested 2,1,1,1, flat 2,2,1,0) :func:`reshard_dtensor` refuses with one
line, as it refuses any program whose boxes are not the DTensor's shards.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
import torch.distributed as dist
from enforcer.comm.subgroups import GroupCache
from enforcer.reshard.resharder import Resharder
from optimizer_service.plan import InvalidInputError
from optimizer_service.plan.resharding import Box, ReshardProgram


class _Cache:
    """The Resharders :func:`reshard` built, for the current default group."""

    def __init__(self) -> None:
        self.world: object = None
        self.by_id: dict[tuple[int, int], tuple[ReshardProgram, object, Resharder]] = {}
        self.by_text: dict[tuple[str, int], Resharder] = {}
        self.groups = GroupCache()

    def get(self, program: ReshardProgram, group: dist.ProcessGroup | None) -> Resharder:
        world = dist.group.WORLD
        if world is not self.world:          # a new world: nothing built for the old one is valid
            self.__init__()
            self.world = world
        hit = self.by_id.get((id(program), id(group)))
        if hit is not None and hit[0] is program and hit[1] is group:
            return hit[2]
        key = (str(program), id(group))
        resharder = self.by_text.get(key)
        if resharder is None:
            resharder = self.by_text[key] = Resharder(program, group, groups=self.groups)
        self.by_id[(id(program), id(group))] = (program, group, resharder)   # holds both: ids stay unique
        return resharder


_CACHE = _Cache()


def reshard(local: torch.Tensor | None, program: ReshardProgram, group: dist.ProcessGroup | None = None, *,
            out: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """Run ``program`` once on this rank (every rank of the world calls it; see the module docstring)."""
    return _CACHE.get(program, group)(local, out=out, dtype=dtype)


def clear_cache() -> None:
    """Forget the Resharders :func:`reshard` built (collective only in that the next calls rebuild)."""
    _CACHE.__init__()


# ---- DTensor ---------------------------------------------------------------------------------------------------


def _shard_dim(placement, ndim: int, mesh_dim: int) -> int | None:
    """The tensor dimension ``placement`` shards, ``None`` for Replicate; refuses the rest."""
    name = type(placement).__name__
    if placement.is_replicate():
        return None
    if placement.is_partial():
        raise InvalidInputError(f"DTensor placement Partial ({placement}) on mesh dimension {mesh_dim} is a pending "
                                "reduction, which the paper's specs (S, R) cannot express; redistribute it to "
                                "Replicate() or Shard(d) first")
    if not placement.is_shard() or name != "Shard":
        raise InvalidInputError(f"DTensor placement {placement} on mesh dimension {mesh_dim} has no resharding spec; "
                                "use Shard(d) or Replicate()")
    dim = placement.dim + ndim if placement.dim < 0 else placement.dim
    if not 0 <= dim < ndim:
        raise InvalidInputError(f"DTensor placement {placement} shards dimension {placement.dim} of a "
                                f"{ndim}-D tensor")
    return dim


def spec_from_placements(placements: Sequence, tensor_ndim: int) -> str:
    """The paper's sharding spec (``"S^0RR"``) of DTensor ``placements`` on a 1-D or 2-D mesh."""
    if not 1 <= len(placements) <= 2:
        raise InvalidInputError(f"{len(placements)} placements: the paper's specs cover 1-D and 2-D meshes only")
    mesh_dims: list[list[int]] = [[] for _ in range(tensor_ndim)]
    for mesh_dim, placement in enumerate(placements):
        dim = _shard_dim(placement, tensor_ndim, mesh_dim)
        if dim is not None:
            mesh_dims[dim].append(mesh_dim)
    return "".join("S^" + "".join(map(str, dims)) if dims else "R" for dims in mesh_dims)


def mesh_ranks(device_mesh) -> list:
    """The global ranks of a 1-D or 2-D ``DeviceMesh`` as the planner's mesh:
    ``[0, 1, 2]`` or ``[[0, 1], [2, 3]]`` (``Mesh.grid`` takes either; mesh
    dimension ``i`` stays dimension ``i``, so ``S^i`` keeps its meaning)."""
    mesh = device_mesh.mesh
    if mesh.dim() not in (1, 2):
        raise InvalidInputError(f"a {mesh.dim()}-D DeviceMesh: the paper's meshes are 1-D or 2-D (hosts x devices); "
                                "flatten it first")
    return mesh.tolist()


def dtensor_boxes(shape: Sequence[int], device_mesh, placements: Sequence) -> dict[int, Box]:
    """The box of the global tensor each rank of ``device_mesh`` holds under DTensor's nested chunking."""
    mesh = device_mesh.mesh
    if len(placements) != mesh.dim():
        raise InvalidInputError(f"{len(placements)} placements for a {mesh.dim()}-D mesh; give one per mesh dimension")
    dims = [_shard_dim(p, len(shape), i) for i, p in enumerate(placements)]
    boxes = {}
    for coordinate in itertools.product(*(range(size) for size in mesh.shape)):
        ranges = [[0, n] for n in shape]
        for mesh_dim, dim in enumerate(dims):
            if dim is None:
                continue
            start, stop = ranges[dim]
            size = -(-(stop - start) // mesh.shape[mesh_dim])
            first = min(stop, start + coordinate[mesh_dim] * size)
            ranges[dim] = [first, min(stop, first + size)]
        boxes[int(mesh[coordinate])] = Box(tuple(a for a, _ in ranges), tuple(b for _, b in ranges))
    return boxes


def _check_layout(kind: str, program_boxes, shape, device_mesh, placements) -> None:
    wanted = dtensor_boxes(shape, device_mesh, placements)
    if set(wanted) != set(program_boxes):
        raise InvalidInputError(f"the program's {kind} ranks {sorted(program_boxes)} are not the {kind} mesh's "
                                f"ranks {sorted(wanted)}; plan it for mesh {device_mesh.mesh.tolist()}")
    for rank, box in sorted(wanted.items()):
        if program_boxes[rank] != box:
            spec = spec_from_placements(placements, len(shape))
            nested = "S^01" in spec and " (DTensor shards both mesh dimensions nested, the paper's S^01 flat: " \
                                        "they differ on this uneven size; pad the dimension to a multiple)"
            raise InvalidInputError(f"rank {rank} holds [{box}] as a DTensor with {tuple(placements)} but "
                                    f"[{program_boxes[rank]}] in the program's {kind} ({spec})"
                                    f"{nested or '; plan the program for this layout'}")


def reshard_dtensor(dtensor, dst_mesh, dst_placements: Sequence, program: ReshardProgram,
                    group: dist.ProcessGroup | None = None):
    """Move ``dtensor`` to ``dst_mesh`` with ``dst_placements`` by ``program``
    (planned for ``spec_from_placements`` of both sides and ``mesh_ranks`` of both
    meshes). Every rank of the world calls it with the same arguments (ranks
    outside the source mesh hold DTensor's empty stand-in). Returns the new
    DTensor on the destination mesh's ranks, ``None`` on the others. Refuses,
    on every rank alike and before any message, a program whose boxes are not
    the two DTensor layouts."""
    from torch.distributed.tensor import DTensor

    shape = tuple(dtensor.shape)
    if tuple(program.shape) != shape:
        raise InvalidInputError(f"the program reshards a {tuple(program.shape)} tensor, the DTensor is {shape}")
    _check_layout("source", program.sources, shape, dtensor.device_mesh, dtensor.placements)
    _check_layout("destination", program.destinations, shape, dst_mesh, dst_placements)
    rank = dist.get_rank()
    local = dtensor.to_local() if rank in program.sources else None
    out = reshard(local, program, group, dtype=dtensor.dtype)
    if out is None:
        return None
    return DTensor.from_local(out, dst_mesh, tuple(dst_placements), run_check=False, shape=dtensor.shape,
                              stride=dtensor.stride())
