"""The multi-to-multi-device micro-benchmark cases (Zhuang et al., MLSys 2023,
§5.1.2, Table 2), with the tensor shape a parameter (the paper's is
(1024, 1024, 512), padded in case 6).

Table 2 is garbled in the text we have; the readings:

* case 3 prints ``RS^0R → S^0RR``, as does case 4; §5.1.2 says case 4
  "schedules 64 unit tasks", which ``RS^01R → S^01RR`` on two (2, 4) meshes
  does (8 × 8 slices), so case 4 is that;
* case 5 prints ``S^1RR → S_0RR``: read ``S^1RR → S^0RR``;
* case 7 prints ``S^1RR → RRR`` from a (1, 4) mesh: kept as printed;
* case 9 ``RS^0R → RRS^0`` as printed.

Placement: each mesh row on its own host, source rows first
(:func:`optimizer_service.resharding.mesh.place_meshes`), so a case needs
``hosts`` hosts of ``devices_per_host`` devices (the emulated 2 × 4 cluster
per mesh; 3 × 4 and 2 × 3 / 3 × 2 where the case needs it).
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.resharding import Strategy
from optimizer_service.resharding.mesh import MeshShape
from optimizer_service.resharding.request import ReshardRequest, build_request

#: The tensor of §5.1.2.
PAPER_SHAPE = (1024, 1024, 512)


@dataclass(frozen=True)
class ReshardCase:
    """One row of Table 2."""

    name: str
    src_spec: str
    dst_spec: str
    src_mesh: MeshShape
    dst_mesh: MeshShape
    note: str = ""

    @property
    def src(self) -> str:
        return f"{self.src_spec}@{'x'.join(map(str, self.src_mesh))}"

    @property
    def dst(self) -> str:
        return f"{self.dst_spec}@{'x'.join(map(str, self.dst_mesh))}"

    @property
    def hosts(self) -> int:
        """Hosts the case needs: one per mesh row."""
        return self.src_mesh[0] + self.dst_mesh[0]

    @property
    def devices_per_host(self) -> int:
        return max(self.src_mesh[-1], self.dst_mesh[-1])

    def request(self, shape: tuple[int, ...], topology: Topology, *, element_bytes: int = 4,
                strategy: Strategy | str = Strategy.BROADCAST) -> ReshardRequest:
        """The case for a tensor of ``shape``, meshes placed on ``topology``."""
        return build_request(shape, self.src_spec, self.src_mesh, self.dst_spec, self.dst_mesh, topology,
                             element_bytes=element_bytes, strategy=strategy)

    def __str__(self) -> str:
        return f"{self.name}: {self.src} -> {self.dst}"


TABLE2_CASES: tuple[ReshardCase, ...] = (
    ReshardCase("case1", "S^0RR", "S^0RR", (2, 4), (2, 4)),
    ReshardCase("case2", "RRR", "S^0RR", (2, 4), (2, 4)),
    ReshardCase("case3", "RS^0R", "S^0RR", (2, 4), (2, 4)),
    ReshardCase("case4", "RS^01R", "S^01RR", (2, 4), (2, 4), "read from '64 unit tasks' (§5.1.2)"),
    ReshardCase("case5", "S^1RR", "S^0RR", (2, 4), (2, 4), "printed S_0RR"),
    ReshardCase("case6", "S^0RR", "S^0RR", (2, 4), (3, 4), "uneven: padded layout, pad never sent"),
    ReshardCase("case7", "S^1RR", "RRR", (1, 4), (2, 4)),
    ReshardCase("case8", "RRR", "RRR", (2, 3), (3, 2)),
    ReshardCase("case9", "RS^0R", "RRS^0", (2, 4), (2, 4)),
)


def table2_case(name: str) -> ReshardCase:
    for case in TABLE2_CASES:
        if case.name == name:
            return case
    raise InvalidInputError(f"unknown Table 2 case {name!r}; use one of {', '.join(c.name for c in TABLE2_CASES)}")


def scaled_shape(divisor: int, shape: tuple[int, ...] = PAPER_SHAPE) -> tuple[int, ...]:
    """The paper's tensor with every dimension divided by ``divisor`` (at least 1)."""
    if divisor < 1:
        raise InvalidInputError(f"shape divisor {divisor} must be >= 1")
    return tuple(max(1, length // divisor) for length in shape)
