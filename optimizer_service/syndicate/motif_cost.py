"""What one motif costs on a topology (Syndicate §4.2's physical plan, priced by
the P² simulator of :mod:`optimizer_service.hardware.cost_model`).

A motif runs on one channel: the cost model for channel ``c`` routes its flows
over that channel's links (a second NIC) and channel 0's elsewhere
(:meth:`Topology.links_at`). Collective motifs use the simulator's ring flows
for their group; an all-to-all motif sends its column range of every block
directly from each rank to each destination in its window, all at once, so a
node's NIC is shared by everything crossing it. Reducing motifs (AllReduce,
ReduceScatter, Reduce) are also bounded by the channel's reduction rate where
its links set one (:mod:`optimizer_service.hardware.cost_model`, "Reduction"): a
host-staged channel sums on CPU cores. Every motif also pays a fixed cost —
the cost of launching one more kernel or message that Syndicate names as the
reason over-fine segmentation does not pay (§4.2.1, "Composition of
Operators"): ``channel_dispatch[c]`` for a motif whose ranks span more than one
node (an instance of the topology's outermost level) on channel ``c``,
``host_dispatch`` for one that stays inside a node, ``dispatch_seconds`` where
neither is given. The job's telemetry fits them
(:mod:`optimizer_service.syndicate.telemetry_fit`): on a loaded host the fixed
cost of a motif is milliseconds, not the microseconds of a kernel launch. A
motif of no bytes costs nothing: both runtimes return from it at once.

How payload sizes map onto the simulator's per-member input ``n``: AllReduce,
Reduce and Broadcast pass the whole range; a ReduceScatter passes the union of
its parts (each member ends with one); an AllGather passes one part. A motif's
bytes are its elements times its own element size (:attr:`Motif.nbytes
<optimizer_service.plan.motif.Motif.nbytes>`: 2 for a bfloat16 op, 8 for an
int64 one), so every op is priced with its real byte size (issue 32).

:meth:`MotifCostModel.step_seconds` prices motifs that run together over
disjoint groups (the ∥ Reduce of a tree's blocks, the groups of one P² step)
as one simulator step, so links they share are shared exactly, whatever their
sizes: an op's elements split over four ranks make parts that differ by an
element where four does not divide them, and such a step was once priced as
its largest motif alone, each of four pairs crossing one NIC with the whole
NIC (a DDP replan was priced 35 % under what it then measured). Prices are
cached by what they depend on (kind, ranks, part sizes, element size, window,
channel), so the pieces of a segmented op cost one simulation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import Algorithm, CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif

#: Per-motif launch overhead when nothing better is known (a small NCCL kernel
#: launch plus a progress-thread hand-off is tens of microseconds).
DEFAULT_DISPATCH_SECONDS = 20e-6


def crosses_nodes(topology: Topology, ranks: Sequence[int]) -> bool:
    """Whether ``ranks`` span more than one node (an instance of the topology's
    outermost level): such a motif pays its channel's fixed cost, one inside a
    node the host's, and the telemetry fit sorts its samples by the same rule."""
    node = topology.devices_per_instance(0)
    return len({rank // node for rank in ranks}) > 1


@dataclass
class MotifCostModel:
    topology: Topology
    dispatch_seconds: float = DEFAULT_DISPATCH_SECONDS
    #: channel -> fixed cost of a motif that crosses the network on it (absent: ``dispatch_seconds``)
    channel_dispatch: Mapping[int, float] = field(default_factory=dict)
    #: fixed cost of a motif inside one node (None: ``dispatch_seconds``)
    host_dispatch: float | None = None
    _models: dict[int, CostModel] = field(default_factory=dict, repr=False)

    def fixed_seconds(self, motif: Motif) -> float:
        """What ``motif`` pays besides its bytes (module docstring)."""
        if crosses_nodes(self.topology, motif.ranks):
            return self.channel_dispatch.get(motif.channel, self.dispatch_seconds)
        return self.dispatch_seconds if self.host_dispatch is None else self.host_dispatch

    def model(self, channel: int) -> CostModel:
        if channel not in self.topology.channels:
            raise InvalidInputError(f"topology {self.topology.name!r} has no channel {channel}; its channels are "
                                    f"{', '.join(map(str, self.topology.channels))}")
        if channel not in self._models:
            self._models[channel] = CostModel(self.topology, Algorithm.RING, channel)
        return self._models[channel]

    _cache: dict[tuple, float] = field(default_factory=dict, repr=False)

    def seconds(self, motif: Motif) -> float:
        return self.step_seconds((motif,))

    def step_seconds(self, group: tuple[Motif, ...]) -> float:
        """Motifs of one kind on one channel over disjoint ranks, run at once."""
        first = group[0]
        key = (first.kind, first.channel, first.window,
               tuple((m.ranks, m.element_bytes, tuple(b - a for a, b in m.ranges)) for m in group))
        cached = self._cache.get(key)
        if cached is None:
            if first.kind is Collective.ALL_TO_ALL:
                cached = max(self._price((m,)) for m in group)
            elif len({(len(m.ranks), m.nbytes) for m in group}) > 1:
                cached = self._price_mixed(group)
            else:
                cached = self._price(group)
            self._cache[key] = cached
        return cached

    def _check_ranks(self, motif: Motif) -> None:
        for rank in motif.ranks:
            if not 0 <= rank < self.topology.device_count:
                raise InvalidInputError(f"motif {motif} names rank {rank}; topology {self.topology.name!r} "
                                        f"has ranks 0..{self.topology.device_count - 1}")

    def _price_mixed(self, group: tuple[Motif, ...]) -> float:
        """One simulator step for motifs of one kind and channel whose group sizes or
        payloads differ (an op's elements split into parts that are not all equal:
        131,585 elements over four ranks are three parts of 32,896 and one of
        32,897). They share their links as motifs of one shape do; priced each
        alone, four such pairs crossing one NIC got the whole NIC each."""
        sending = [m for m in group if m.nbytes and len(m.ranks) > 1]
        for motif in group:
            self._check_ranks(motif)
        if not any(m.nbytes for m in group):
            return 0.0
        fixed = max(self.fixed_seconds(m) for m in group if m.nbytes)
        if not sending:
            return fixed
        payloads = [m.nbytes / len(m.ranks) if m.kind is Collective.ALL_GATHER else m.nbytes for m in sending]
        model = self.model(group[0].channel)
        return fixed + model.groups_seconds(group[0].kind, [m.ranks for m in sending], payloads)

    def _price(self, group: tuple[Motif, ...]) -> float:
        """One simulator step for motifs of one shape (kind, channel, group size,
        payload) over disjoint ranks; an all-to-all comes alone."""
        first = group[0]
        model = self.model(first.channel)
        for motif in group:
            self._check_ranks(motif)
        nbytes = first.nbytes
        if nbytes == 0:
            return 0.0
        fixed = max(self.fixed_seconds(m) for m in group)
        if len(first.ranks) < 2:
            return fixed
        ranks = np.asarray([m.ranks for m in group], dtype=np.int64)      # (groups, members)
        if first.kind is Collective.ALL_TO_ALL:
            members = ranks[0]
            n = len(members)
            offsets = np.arange(*first.window)
            src = np.repeat(members, len(offsets))
            dst = members[(np.repeat(np.arange(n), len(offsets)) + np.tile(offsets, n)) % n]
            return fixed + model.flows_seconds(src[None, :], dst[None, :], float(nbytes), 1)
        per_member = nbytes / ranks.shape[1] if first.kind is Collective.ALL_GATHER else nbytes
        return fixed + model.step_seconds(first.kind, ranks, per_member)


@dataclass(frozen=True)
class WorstOf:
    """Cost models of one topology's motifs; a motif (or a step of them) costs the
    most that any of them says. The options and the topology are the first
    model's. The live search prices the first plan so when its window cannot
    tell the readings apart (:func:`optimizer_service.syndicate.live_search.live_search`)."""

    models: tuple[MotifCostModel, ...]

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("WorstOf needs at least one cost model")

    @property
    def topology(self) -> Topology:
        return self.models[0].topology

    def seconds(self, motif: Motif) -> float:
        return self.step_seconds((motif,))

    def step_seconds(self, group: tuple[Motif, ...]) -> float:
        return max(model.step_seconds(group) for model in self.models)
