"""Topology-aware cost simulator (P² §5).

P² predicts a program's time from the topology's link bandwidths, knowing which
interconnect each transfer crosses; it states assumptions (effective NIC, PCIe,
NVLink, NVSwitch bandwidths) but no formulas. Ours, for one lowered step:

**Flows.** Each group's collective is an algorithm over its ``p`` members
``m₀ < … < m_{p-1}`` with per-device input ``n`` bytes, expressed as flows
``u → v`` carrying ``V`` bytes, plus a number of sequential rounds ``R``:

=================  ===========================================  ==========  ===========
collective         ring flows                                   ``V``        ``R``
=================  ===========================================  ==========  ===========
AllReduce          ``mᵢ → mᵢ₊₁ mod p``                          2(p−1)/p·n   2(p−1)
ReduceScatter      ``mᵢ → mᵢ₊₁ mod p``                          (p−1)/p·n    p−1
AllGather          ``mᵢ → mᵢ₊₁ mod p``                          (p−1)·n      p−1
Reduce             chain ``mᵢ₊₁ → mᵢ`` into the root ``m₀``      n            p−1
Broadcast          chain ``mᵢ → mᵢ₊₁`` from the root ``m₀``      n            p−1
=================  ===========================================  ==========  ===========

With ``tree``, AllReduce follows NCCL's double binary tree: two trees each
carry ``n/2``, up (child → parent) then down, ``R = 2·depth``; Reduce and
Broadcast use one tree rooted at ``m₀`` carrying ``n``, ``R = depth``.
Trees are hierarchy-aware like NCCL's: members are split by the outermost
level at which they differ, the first member of each part joins a binary heap
over the parts, and each part recurses. The second tree is built over the
members in reverse order, so leaves of one are inner nodes of the other.
ReduceScatter and AllGather have no tree algorithm in NCCL and use the ring.

**Links.** A flow whose endpoints first differ at level ``L`` crosses every
link serving ``L`` on the model's channel (channel 0 unless asked otherwise); device ``d`` uses instance ``⌊d / shared_by⌋`` of a link.
All flows of all groups of the step run at once, so every link instance ``ℓ``
carries ``E(ℓ)`` bytes out and ``I(ℓ)`` bytes in (links are full duplex). A
flow ``u → v`` is limited by its most loaded crossing:

    t(u → v) = max over links ℓ crossed of max(E(ℓ_u), I(ℓ_v)) / bandwidth(ℓ)

**Incast.** A link with ``incast`` κ > 0 (:class:`Link`) serves the flows
coming into an instance more slowly when more of them converge there than it
has devices behind it: with ``k`` incoming flows, its incoming bandwidth is
``bandwidth / (1 + κ·max(0, k − shared_by))``. Rings, trees and P² steps put
at most one incoming flow per device on a link; a whole all-to-all puts one per
sender, which is the incast Syndicate's splining reduces (§6.6, "the effects
of incast are significant as we increase the message sizes and more splining
helps reduce incast").

**Reduction.** A link with a ``reduction`` rate ρ (:class:`Link`) bounds how
fast a device combines what it receives over that link: each flow carries a
reduced fraction of its volume (½ of a ring AllReduce's flows — its
ReduceScatter half —, all of a ReduceScatter's and a Reduce's, the upward
flows of a tree; nothing of an AllGather, a Broadcast or an all-to-all), and a
flow into device ``v`` takes at least ``D(v)/ρ``, where ``D(v)`` is what ``v``
reduces from all flows over that link. Reduction pipelines with the transfer,
so the bound is a ``max`` like the links', not a sum. This is Syndicate §6.6's
reason for running all-reduce on the GPU-driven channel (Figure 18).

**Time.** Group ``g`` takes ``T_g = R·α_g + max over flows of t(flow)`` where
``α_g`` is the largest path latency (sum of the latencies of the links a flow
crosses) among its flows. A step takes ``max_g T_g``; a program is the sum of
its steps; a flat AllReduce is a one-step program.

The bandwidth term is the classic bottleneck bound (each ring or pipelined tree
edge moves ``V`` bytes, the slowest edge paces the whole collective), and
sharing is exact for the concurrent groups of one step: sixteen groups whose
rings each cross a node's NIC get a sixteenth of it each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

import numpy as np

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.lowered import LoweredProgram, LoweredStep


class Algorithm(str, Enum):
    RING = "ring"
    TREE = "tree"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> Algorithm:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise InvalidInputError(f"unknown algorithm {text!r}; use ring or tree") from None


@dataclass(frozen=True)
class FlowPattern:
    """Flows between group positions, volumes per byte of input, the fraction
    of each flow's volume its receiver reduces, and rounds."""

    src: np.ndarray
    dst: np.ndarray
    volume: np.ndarray
    rounds: int
    reduced: np.ndarray


@lru_cache(maxsize=4096)
def ring_pattern(collective: Collective, p: int) -> FlowPattern:
    positions = np.arange(p, dtype=np.int64)
    if collective in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        factor = {Collective.ALL_REDUCE: 2 * (p - 1) / p,
                  Collective.REDUCE_SCATTER: (p - 1) / p,
                  Collective.ALL_GATHER: float(p - 1)}[collective]
        rounds = 2 * (p - 1) if collective is Collective.ALL_REDUCE else p - 1
        reduced = {Collective.ALL_REDUCE: 0.5, Collective.REDUCE_SCATTER: 1.0,
                   Collective.ALL_GATHER: 0.0}[collective]
        return FlowPattern(positions, (positions + 1) % p, np.full(p, factor), rounds, np.full(p, reduced))
    chain_src, chain_dst = positions[:-1], positions[1:]
    reduced = float(collective is Collective.REDUCE)
    if collective is Collective.REDUCE:
        chain_src, chain_dst = chain_dst, chain_src
    return FlowPattern(chain_src, chain_dst, np.ones(p - 1), p - 1, np.full(p - 1, reduced))


def tree_edges(members: Sequence[int], spans: Sequence[int]) -> tuple[list[tuple[int, int]], int]:
    """Hierarchy-aware binary tree over ``members`` (global ids, in tree order).

    Returns ``(child, parent)`` position pairs and the depth. ``spans[j]`` is the
    number of devices per instance of level ``j``.
    """
    def build(positions: list[int]) -> tuple[list[tuple[int, int]], int]:
        if len(positions) == 1:
            return [], 0
        for span in spans:
            instances = [members[q] // span for q in positions]
            if len(set(instances)) > 1:
                break
        parts: dict[int, list[int]] = {}
        for q, instance in zip(positions, instances):
            parts.setdefault(instance, []).append(q)
        ordered = list(parts.values())
        roots = [part[0] for part in ordered]
        edges = [(roots[i], roots[(i - 1) // 2]) for i in range(1, len(roots))]
        depth = 0
        for i, part in enumerate(ordered):
            sub_edges, sub_depth = build(part)
            edges += sub_edges
            depth = max(depth, (i + 1).bit_length() - 1 + sub_depth)
        return edges, depth

    return build(list(range(len(members))))


def tree_pattern(collective: Collective, members: Sequence[int], spans: Sequence[int]) -> FlowPattern:
    p = len(members)
    if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        return ring_pattern(collective, p)
    first, depth_first = tree_edges(members, spans)
    if collective in (Collective.REDUCE, Collective.BROADCAST):
        children = np.array([c for c, _ in first], dtype=np.int64)
        parents = np.array([q for _, q in first], dtype=np.int64)
        if collective is Collective.REDUCE:
            return FlowPattern(children, parents, np.ones(len(first)), depth_first, np.ones(len(first)))
        return FlowPattern(parents, children, np.ones(len(first)), depth_first, np.zeros(len(first)))
    reversed_members = list(reversed(members))
    second_rev, depth_second = tree_edges(reversed_members, spans)
    second = [(p - 1 - c, p - 1 - q) for c, q in second_rev]
    src, dst = [], []
    for child, parent in first + second:
        src += [child, parent]
        dst += [parent, child]
    up = np.tile([1.0, 0.0], len(first) + len(second))
    return FlowPattern(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64),
                       np.full(len(src), 0.5), 2 * max(depth_first, depth_second), up)


class CostModel:
    """Predicts lowered steps and programs on one topology with one algorithm."""

    def __init__(self, topology: Topology, algorithm: Algorithm = Algorithm.RING, channel: int = 0) -> None:
        self.topology = topology
        self.algorithm = algorithm
        self.channel = channel
        levels = len(topology.levels)
        self._spans = tuple(topology.devices_per_instance(j) for j in range(levels))
        self._span_array = np.array(self._spans, dtype=np.int64)
        crossed = [topology.links_at(j, channel) for j in range(levels)]
        self._path_latency = np.array([sum(link.latency for link in links) for links in crossed] + [0.0])
        self._links = []
        for link in dict.fromkeys(link for links in crossed for link in links):
            serves = np.zeros(levels + 1, dtype=bool)
            for j, links in enumerate(crossed):
                serves[j] = link in links
            self._links.append((serves, link.shared_by, link.bandwidth,
                                topology.device_count // link.shared_by, link.incast, link.reduction))

    def _pattern(self, collective: Collective, group: np.ndarray) -> FlowPattern:
        if self.algorithm is Algorithm.RING:
            return ring_pattern(collective, len(group))
        return tree_pattern(collective, [int(x) for x in group], self._spans)

    def first_differing_level(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Index of the outermost level at which ``u`` and ``v`` differ."""
        same = (u[..., None] // self._span_array) == (v[..., None] // self._span_array)
        return same.sum(axis=-1)

    def step_seconds(self, collective: Collective, groups: np.ndarray, input_bytes: float) -> float:
        """Time of one step: ``groups`` is (G, p) global ids, each member passes ``input_bytes``."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.ndim != 2 or groups.shape[1] < 2:
            return 0.0
        pattern = self._pattern(collective, groups[0])
        src = groups[:, pattern.src]              # (G, F)
        dst = groups[:, pattern.dst]
        volume = np.broadcast_to(pattern.volume * input_bytes, src.shape)
        return self.flows_seconds(src, dst, volume, pattern.rounds, pattern.reduced)

    def groups_seconds(self, collective: Collective, groups: Sequence[Sequence[int]],
                       input_bytes: Sequence[float]) -> float:
        """Time of one step whose groups differ in size or payload: group ``g``
        (global ids, at least two) passes ``input_bytes[g]`` per member. Its flows
        share links with every other group's, as in :meth:`step_seconds`; a group
        with fewer flows than the largest is padded with flows that cross no link."""
        if len(groups) != len(input_bytes):
            raise ValueError("groups_seconds needs one payload per group")
        members = [np.asarray(group, dtype=np.int64) for group in groups]
        patterns = [self._pattern(collective, group) for group in members]
        width = max(len(pattern.src) for pattern in patterns)
        shape = (len(members), width)
        src, dst = np.empty(shape, dtype=np.int64), np.empty(shape, dtype=np.int64)
        volume, reduced = np.zeros(shape), np.zeros(shape)
        rounds = np.zeros(len(members))
        for g, (group, pattern, nbytes) in enumerate(zip(members, patterns, input_bytes)):
            n = len(pattern.src)
            src[g], dst[g] = group[0], group[0]
            src[g, :n], dst[g, :n] = group[pattern.src], group[pattern.dst]
            volume[g, :n] = pattern.volume * float(nbytes)
            reduced[g, :n] = pattern.reduced
            rounds[g] = pattern.rounds
        return self.flows_seconds(src, dst, volume, rounds, reduced)

    def flows_seconds(self, src: np.ndarray, dst: np.ndarray, volume: np.ndarray, rounds: int | np.ndarray,
                      reduced: float | np.ndarray = 0.0) -> float:
        """Time of concurrent flows ``src[g, f] → dst[g, f]`` carrying ``volume[g, f]``
        bytes, of which the receiver reduces the fraction ``reduced[g, f]``, as groups
        ``g`` of ``rounds`` (or ``rounds[g]``) sequential rounds (the module docstring)."""
        src, dst = np.atleast_2d(src), np.atleast_2d(dst)
        volume = np.broadcast_to(volume, src.shape)
        if src.size == 0:
            return 0.0
        level = self.first_differing_level(src, dst)
        flow_time = np.zeros(src.shape)
        for serves, shared_by, bandwidth, instances, incast, reduction in self._links:
            crosses = serves[level]
            if not crosses.any():
                continue
            out_instance = src // shared_by
            in_instance = dst // shared_by
            out_load = np.bincount(out_instance[crosses], weights=volume[crosses], minlength=instances)
            in_load = np.bincount(in_instance[crosses], weights=volume[crosses], minlength=instances)
            if incast:
                flows_in = np.bincount(in_instance[crosses], minlength=instances)
                in_load = in_load * (1.0 + incast * np.maximum(flows_in - shared_by, 0))
            busy = np.maximum(out_load[out_instance], in_load[in_instance]) / bandwidth
            if reduction:
                combined = np.broadcast_to(reduced, src.shape) * volume
                load = np.bincount(dst[crosses], weights=combined[crosses], minlength=instances * shared_by)
                busy = np.maximum(busy, load[dst] / reduction)
            flow_time = np.maximum(flow_time, np.where(crosses, busy, 0.0))
        latency = self._path_latency[level].max(axis=1) * rounds
        return float((latency + flow_time.max(axis=1)).max())

    def lowered_step_seconds(self, step: LoweredStep, nbytes: int) -> float:
        return self.step_seconds(step.collective, np.asarray(step.groups, dtype=np.int64),
                                 float(step.input_fraction * nbytes))

    def flat_allreduce_seconds(self, groups: np.ndarray, nbytes: int) -> float:
        """One AllReduce over every reduction group (0 when the groups are single devices)."""
        return self.step_seconds(Collective.ALL_REDUCE, groups, float(nbytes))

    def program_seconds(self, program: LoweredProgram, nbytes: int) -> float:
        return sum(self.lowered_step_seconds(step, nbytes) for step in program.steps)
