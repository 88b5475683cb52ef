"""Decomposing a cross-mesh resharding into unit tasks (Zhuang et al., MLSys
2023, §2.2 and Appendix B.2).

Each tensor dimension ``d`` gets the cut points of both specs' shards
(``Cut(d)``, initialised to ``{0, l_d}``; uneven shards cut at multiples of
``ceil(l_d / k)``, :mod:`optimizer_service.resharding.spec`); the slices are
the cross product of the intervals between consecutive cut points. Every
slice lies inside exactly one shard of each spec, so one unit task per slice:
the source devices holding it (``N_i``) and the destination devices needing
it (``M_i``), both grouped by host. Tasks are numbered in the lexicographic
order of their slices (the "arbitrary order" the naive schedule uses).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.plan.resharding import Box
from optimizer_service.resharding.mesh import Mesh
from optimizer_service.resharding.spec import ShardingSpec

#: The most unit tasks one resharding may decompose into (the search is bounded by it).
MAX_UNIT_TASKS = 4096

Groups = tuple[tuple[int, ...], ...]


def groups_text(hosts: tuple[int, ...], groups: Groups) -> str:
    """``h0:0,1 h1:4,5``: ranks grouped by host (what :meth:`UnitTask.__str__` writes)."""
    return " ".join(f"h{host}:{','.join(map(str, ranks))}" for host, ranks in zip(hosts, groups))


def _parse_groups(text: str) -> tuple[tuple[int, ...], Groups]:
    hosts, groups = [], []
    for part in text.split():
        match = re.fullmatch(r"h(\d+):(\d+(?:,\d+)*)", part)
        if not match:
            raise InvalidInputError(f"host group {part!r} is not hHOST:RANK,RANK")
        hosts.append(int(match.group(1)))
        groups.append(tuple(int(r) for r in match.group(2).split(",")))
    return tuple(hosts), tuple(groups)


@dataclass(frozen=True)
class UnitTask:
    """One unique data slice ``box``: held by ``source_groups`` (``N_i``),
    needed by ``destination_groups`` (``M_i``), each grouped by host."""

    index: int
    box: Box
    nbytes: int
    source_hosts: tuple[int, ...]
    source_groups: Groups
    destination_hosts: tuple[int, ...]
    destination_groups: Groups

    def __post_init__(self) -> None:
        for what, hosts, groups in (("source", self.source_hosts, self.source_groups),
                                    ("destination", self.destination_hosts, self.destination_groups)):
            if not hosts or len(hosts) != len(groups) or any(not group for group in groups):
                raise InvalidInputError(f"unit task {self.index}: needs at least one {what} host, each with ranks")

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(rank for group in self.source_groups for rank in group)

    @property
    def destinations(self) -> tuple[int, ...]:
        return tuple(rank for group in self.destination_groups for rank in group)

    def sources_on(self, host: int) -> tuple[int, ...]:
        return self.source_groups[self.source_hosts.index(host)]

    def __str__(self) -> str:
        return (f"unit {self.index} [{self.box}] {self.nbytes}B from {groups_text(self.source_hosts, self.source_groups)}"
                f" to {groups_text(self.destination_hosts, self.destination_groups)}")

    @classmethod
    def parse(cls, text: str) -> UnitTask:
        match = re.fullmatch(r"\s*unit\s+(\d+)\s+\[([^\]]*)\]\s+(\d+)B\s+from\s+(.+?)\s+to\s+(.+?)\s*", text)
        if not match:
            raise InvalidInputError(f"unit task {text!r} is not 'unit N [BOX] BYTESB from hH:R,R to hH:R,R'")
        source_hosts, source_groups = _parse_groups(match.group(4))
        destination_hosts, destination_groups = _parse_groups(match.group(5))
        return cls(int(match.group(1)), Box.parse(match.group(2)), int(match.group(3)), source_hosts, source_groups,
                   destination_hosts, destination_groups)


def _by_host(ranks: list[int], devices_per_host: int) -> tuple[tuple[int, ...], Groups]:
    grouped: dict[int, list[int]] = defaultdict(list)
    for rank in sorted(ranks):
        grouped[rank // devices_per_host].append(rank)
    hosts = tuple(sorted(grouped))
    return hosts, tuple(tuple(grouped[host]) for host in hosts)


def _owners(spec: ShardingSpec, mesh: Mesh) -> dict[tuple[int, ...], list[int]]:
    """Shard index (per tensor dimension) → the ranks holding that shard."""
    owners: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for rank, position in mesh.positions():
        owners[spec.shard_index(mesh.shape, position)].append(rank)
    return owners


def decompose(shape: tuple[int, ...], src_spec: ShardingSpec, src_mesh: Mesh, dst_spec: ShardingSpec,
              dst_mesh: Mesh, *, devices_per_host: int, element_bytes: int = 4,
              max_unit_tasks: int = MAX_UNIT_TASKS) -> tuple[UnitTask, ...]:
    """The unit tasks of resharding a tensor of ``shape`` (App. B.2, module docstring)."""
    if not shape or any(length < 1 for length in shape):
        raise InvalidInputError(f"tensor shape {'x'.join(map(str, shape)) or '()'} needs every dimension >= 1")
    src_spec.check(shape, src_mesh.shape)
    dst_spec.check(shape, dst_mesh.shape)
    src_cuts = src_spec.cut_points(shape, src_mesh.shape)
    dst_cuts = dst_spec.cut_points(shape, dst_mesh.shape)
    cuts = [sorted(set(a) | set(b)) for a, b in zip(src_cuts, dst_cuts)]
    count = math.prod(len(c) - 1 for c in cuts)
    if count > max_unit_tasks:
        raise SearchBoundError(f"resharding {src_spec} -> {dst_spec} of {'x'.join(map(str, shape))} makes {count} "
                               f"unit tasks; at most {max_unit_tasks} are planned (use fewer shards)")
    intervals = [list(zip(c[:-1], c[1:])) for c in cuts]
    src_counts = src_spec.shard_counts(src_mesh.shape)
    dst_counts = dst_spec.shard_counts(dst_mesh.shape)
    src_owners, dst_owners = _owners(src_spec, src_mesh), _owners(dst_spec, dst_mesh)
    tasks = []
    for ranges in itertools.product(*intervals):
        src_shard = tuple(start // -(-length // k) for (start, _), length, k in zip(ranges, shape, src_counts))
        dst_shard = tuple(start // -(-length // k) for (start, _), length, k in zip(ranges, shape, dst_counts))
        box = Box(tuple(a for a, _ in ranges), tuple(b for _, b in ranges))
        source_hosts, source_groups = _by_host(src_owners[src_shard], devices_per_host)
        destination_hosts, destination_groups = _by_host(dst_owners[dst_shard], devices_per_host)
        tasks.append(UnitTask(len(tasks), box, box.elements * element_bytes, source_hosts, source_groups,
                              destination_hosts, destination_groups))
    return tuple(tasks)
