"""Pricing one unit task under each strategy (Zhuang et al., MLSys 2023, §3.1,
Figure 3 a–d) with the project's topology cost model.

A unit task sends ``b`` bytes from one sender device ``s`` to receivers
``r_1 … r_n`` grouped by host (``B_h`` receivers on host ``h``; hosts and ranks
ascending). ``f(flows, V, R)`` is :meth:`CostModel.flows_seconds` of the flows
run at once, each carrying ``V`` bytes, as ``R`` sequential rounds (its
latency term is ``R`` times the largest path latency); it is exactly affine in
``V``, which the pricer uses to cache per-pair coefficients.

* **send/recv** (Fig. 3a, ``T = A·B·t``): the sender sends the whole slice to
  each receiver in turn: ``T = Σ_j f({s → r_j}, b, 1)``.
* **send/recv + local all-gather** (Fig. 3b, ``T = A·t``): one part of
  ``b / B_h`` to every receiver of host ``h`` (all flows from ``s`` at once,
  ``n`` rounds of latency), then a ring all-gather inside every host (all
  hosts' rings at once, ``max_h(B_h) − 1`` rounds, each flow ``(B_h−1)·b/B_h``):
  ``T = f({s → r_j}, b/B_h, n) + f(rings, (B_h−1)·b/B_h, max B_h − 1)``.
* **send/recv + global all-gather** (Fig. 3c, ``T = 2t``): one part of ``b/n``
  to every receiver, then one ring all-gather over all receivers in host order:
  ``T = f({s → r_j}, b/n, n) + AllGather(r_1 … r_n, b/n)``.
* **broadcast** (Fig. 3d, ``T = t + A·t/K``): a chain ``s → r_1 → … → r_n``
  moving ``K`` partitions of ``p = b/K`` bytes, pipelined: the first partition
  crosses every hop alone, the other ``K − 1`` follow at the pace of the chain
  with all hops busy at once (which shares a host's loopback, and a NIC that
  both receives and forwards is full duplex):
  ``T(K) = Σ_hops f({hop}, p, 1) + (K − 1)·f(all hops, p, 1)``. With NIC hops
  dominating this is the paper's ``t + A·t/K`` plus ``(K + A − 1)`` message
  latencies; ``K`` minimises ``T(K)`` over ``1 … max_partitions`` with parts
  of at least ``min_partition_bytes`` (tiny slices are not split into tiny
  messages).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.resharding import Strategy

#: The paper picks K ≈ 100 (§3.1); the search stops at this many partitions.
MAX_PARTITIONS = 128
#: Broadcast partitions are at least this large (smaller slices are sent in fewer parts).
MIN_PARTITION_BYTES = 16 * 1024


@dataclass(frozen=True)
class TaskPrice:
    """A unit task's predicted duration and, for a broadcast, its partitions ``K``."""

    seconds: float
    partitions: int = 1


@dataclass(frozen=True)
class _Affine:
    latency: float
    per_byte: float

    def at(self, volume: float) -> float:
        return self.latency + self.per_byte * volume


class UnitTaskPricer:
    """Prices unit tasks under one strategy on one cost model (module docstring)."""

    def __init__(self, cost: CostModel, strategy: Strategy, *, max_partitions: int = MAX_PARTITIONS,
                 min_partition_bytes: int = MIN_PARTITION_BYTES) -> None:
        if max_partitions < 1 or min_partition_bytes < 1:
            raise InvalidInputError(f"max_partitions ({max_partitions}) and min_partition_bytes "
                                    f"({min_partition_bytes}) must be >= 1")
        self.cost = cost
        self.strategy = Strategy(strategy)
        self.max_partitions = max_partitions
        self.min_partition_bytes = min_partition_bytes
        self._hops: dict[tuple[int, int], _Affine] = {}

    def _affine(self, src: Sequence[int], dst: Sequence[int], rounds: int,
                weights: Sequence[float] | None = None) -> _Affine:
        """``f(flows, V, rounds)`` as latency + per-byte slope (flow ``k`` carries ``weights[k]·V``)."""
        src_a = np.asarray([src], dtype=np.int64)
        dst_a = np.asarray([dst], dtype=np.int64)
        w = np.ones(src_a.shape) if weights is None else np.asarray([weights], dtype=float)
        latency = self.cost.flows_seconds(src_a, dst_a, np.zeros_like(w), rounds)
        scale = 1e6
        slope = (self.cost.flows_seconds(src_a, dst_a, scale * w, rounds) - latency) / scale
        return _Affine(latency, max(slope, 0.0))

    def _hop(self, u: int, v: int) -> _Affine:
        if (u, v) not in self._hops:
            self._hops[(u, v)] = self._affine([u], [v], 1)
        return self._hops[(u, v)]

    def price(self, sender: int, receiver_groups: Sequence[Sequence[int]], nbytes: float) -> TaskPrice:
        groups = [tuple(g) for g in receiver_groups if len(g)]
        receivers = [r for g in groups for r in g]
        if not receivers:
            raise InvalidInputError("a unit task needs at least one receiver")
        if sender in receivers:
            raise InvalidInputError(f"rank {sender} cannot both send and receive one unit task")
        if nbytes <= 0:
            return TaskPrice(0.0, 1)
        if self.strategy is Strategy.SEND_RECV:
            return TaskPrice(sum(self._hop(sender, r).at(nbytes) for r in receivers))
        if self.strategy is Strategy.LOCAL_ALLGATHER:
            return TaskPrice(self._local_allgather(sender, groups, nbytes))
        if self.strategy is Strategy.GLOBAL_ALLGATHER:
            return TaskPrice(self._global_allgather(sender, receivers, nbytes))
        return self._broadcast([sender, *receivers], nbytes)

    def _local_allgather(self, sender: int, groups: list[tuple[int, ...]], nbytes: float) -> float:
        scatter_weights = [1.0 / len(g) for g in groups for _ in g]
        receivers = [r for g in groups for r in g]
        scatter = self._affine([sender] * len(receivers), receivers, len(receivers), scatter_weights).at(nbytes)
        ring_src, ring_dst, ring_weights = [], [], []
        for group in groups:
            if len(group) < 2:
                continue
            for k, rank in enumerate(group):
                ring_src.append(rank)
                ring_dst.append(group[(k + 1) % len(group)])
                ring_weights.append((len(group) - 1) / len(group))
        if not ring_src:
            return scatter
        rounds = max(len(g) for g in groups) - 1
        return scatter + self._affine(ring_src, ring_dst, rounds, ring_weights).at(nbytes)

    def _global_allgather(self, sender: int, receivers: list[int], nbytes: float) -> float:
        n = len(receivers)
        scatter = self._affine([sender] * n, receivers, n).at(nbytes / n)
        gather = self.cost.step_seconds(Collective.ALL_GATHER, np.asarray([receivers], dtype=np.int64), nbytes / n)
        return scatter + gather

    def _broadcast(self, chain: list[int], nbytes: float) -> TaskPrice:
        hops = list(zip(chain[:-1], chain[1:]))
        fill = _Affine(sum(self._hop(u, v).latency for u, v in hops), sum(self._hop(u, v).per_byte for u, v in hops))
        steady = self._affine([u for u, _ in hops], [v for _, v in hops], 1)
        most = max(1, min(self.max_partitions, int(nbytes // self.min_partition_bytes)))
        best = None
        for k in range(1, most + 1):
            part = nbytes / k
            seconds = fill.at(part) + (k - 1) * steady.at(part)
            if best is None or seconds < best.seconds:
                best = TaskPrice(seconds, k)
        return best
