"""What one cross-mesh resharding asks for (Zhuang et al., MLSys 2023, §2.2):
the tensor's shape and element size, the source and destination specs on
their (placed, disjoint) meshes, and the unit-task strategy.

Text form (round-trips)::

    reshard 1024x1024x512 S^0RR@[[0,1,2,3],[4,5,6,7]] -> RS^0R@[[8,9,10,11],[12,13,14,15]] element_bytes=4 strategy=broadcast
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.resharding import Strategy
from optimizer_service.resharding.mesh import Mesh, MeshOrShape, parse_mesh, place_meshes
from optimizer_service.resharding.spec import MAX_TENSOR_RANK, ShardingSpec, parse_endpoint
from optimizer_service.units import format_bytes

#: A tensor larger than this (bytes) is refused as absurd.
MAX_TENSOR_BYTES = 2 ** 50


@dataclass(frozen=True)
class ReshardRequest:
    """One resharding, with both meshes placed (module docstring)."""

    shape: tuple[int, ...]
    src_spec: ShardingSpec
    src_mesh: Mesh
    dst_spec: ShardingSpec
    dst_mesh: Mesh
    element_bytes: int = 4
    strategy: Strategy = Strategy.BROADCAST

    def __post_init__(self) -> None:
        text = "x".join(map(str, self.shape)) or "()"
        if not self.shape or len(self.shape) > MAX_TENSOR_RANK or any(length < 1 for length in self.shape):
            raise InvalidInputError(f"tensor shape {text} needs 1 to {MAX_TENSOR_RANK} dimensions, each >= 1")
        if not 1 <= self.element_bytes <= 64:
            raise InvalidInputError(f"element size {self.element_bytes} B must be 1..64 bytes")
        if math.prod(self.shape) * self.element_bytes > MAX_TENSOR_BYTES:
            raise SearchBoundError(f"tensor {text} of {self.element_bytes}-byte elements is larger than "
                                   f"{format_bytes(MAX_TENSOR_BYTES)}; give a smaller --shape")
        self.src_spec.check(self.shape, self.src_mesh.shape)
        self.dst_spec.check(self.shape, self.dst_mesh.shape)
        shared = sorted(set(self.src_mesh.ranks) & set(self.dst_mesh.ranks))
        if shared:
            raise InvalidInputError(f"ranks {shared} are in both meshes; cross-mesh resharding needs disjoint "
                                    f"source and destination meshes")
        object.__setattr__(self, "strategy", Strategy(self.strategy))

    @property
    def src(self) -> str:
        return f"{self.src_spec}@{self.src_mesh}"

    @property
    def dst(self) -> str:
        return f"{self.dst_spec}@{self.dst_mesh}"

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.element_bytes

    def __str__(self) -> str:
        return (f"reshard {'x'.join(map(str, self.shape))} {self.src} -> {self.dst} "
                f"element_bytes={self.element_bytes} strategy={self.strategy}")

    @classmethod
    def parse(cls, text: str) -> ReshardRequest:
        match = re.fullmatch(r"\s*reshard\s+(\d+(?:x\d+)*)\s+(\S+)\s+->\s+(\S+)\s+element_bytes=(\d+)\s+"
                             r"strategy=(\S+)\s*", text)
        if not match:
            raise InvalidInputError(f"resharding request {text!r} is not 'reshard AxB SPEC@MESH -> SPEC@MESH "
                                    f"element_bytes=N strategy=NAME'")
        src_spec, src_mesh = parse_endpoint(match.group(2))
        dst_spec, dst_mesh = parse_endpoint(match.group(3))
        if not isinstance(src_mesh, Mesh) or not isinstance(dst_mesh, Mesh):
            raise InvalidInputError(f"resharding request {text!r}: both meshes must list their ranks")
        return cls(tuple(int(v) for v in match.group(1).split("x")), src_spec, src_mesh, dst_spec, dst_mesh,
                   int(match.group(4)), Strategy.parse(match.group(5)))


def _spec(value: ShardingSpec | str) -> ShardingSpec:
    return value if isinstance(value, ShardingSpec) else ShardingSpec.parse(value)


def _mesh(value: MeshOrShape | str) -> MeshOrShape:
    if isinstance(value, str):
        return parse_mesh(value)
    return value if isinstance(value, Mesh) else tuple(value)


def build_request(shape: tuple[int, ...], src_spec: ShardingSpec | str, src_mesh: MeshOrShape | str,
                  dst_spec: ShardingSpec | str, dst_mesh: MeshOrShape | str, topology: Topology, *,
                  element_bytes: int = 4, strategy: Strategy | str = Strategy.BROADCAST) -> ReshardRequest:
    """A request from loose parts: specs as text or values, meshes as explicit
    :class:`Mesh`, text, or a shape placed on ``topology`` (:func:`place_meshes`)."""
    shape = tuple(int(v) for v in shape)
    src_spec, dst_spec = _spec(src_spec), _spec(dst_spec)
    src, dst = _mesh(src_mesh), _mesh(dst_mesh)
    # spec/mesh mismatches name the spec, before placement complains about the mesh
    for spec, mesh in ((src_spec, src), (dst_spec, dst)):
        spec.check(shape, mesh.shape if isinstance(mesh, Mesh) else mesh)
    src_placed, dst_placed = place_meshes(src, dst, topology)
    strategy = strategy if isinstance(strategy, Strategy) else Strategy.parse(strategy)
    return ReshardRequest(shape, src_spec, src_placed, dst_spec, dst_placed, element_bytes, strategy)


def request_from_endpoints(shape: tuple[int, ...], src: str, dst: str, topology: Topology, *,
                           element_bytes: int = 4, strategy: Strategy | str = Strategy.BROADCAST) -> ReshardRequest:
    """A request from ``SPEC@MESH`` texts (``S^0RR@2x4``)."""
    src_spec, src_mesh = parse_endpoint(src)
    dst_spec, dst_mesh = parse_endpoint(dst)
    return build_request(shape, src_spec, src_mesh, dst_spec, dst_mesh, topology, element_bytes=element_bytes,
                         strategy=strategy)
