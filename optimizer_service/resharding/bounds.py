"""The NIC lower bound of a cross-mesh resharding (Zhuang et al., MLSys 2023,
§3.1: "each receiver node has only one NIC, and needs at least one replica").

With ``W`` a host's bandwidth across the outermost level (the slowest link a
cross-host transfer crosses, times the instances of it one host has), no
schedule finishes before the largest of:

* **receiver hosts** — for every destination host ``h``: the bytes of the
  slices it needs and does not already hold, over ``W``;
* **all sender hosts together** — every slice no receiver host holds must
  leave some source host at least once: their bytes over the source hosts'
  combined ``W``;
* **single holders** — for every source host ``h``: the bytes of the slices
  only ``h`` holds (and no receiver host holds), over ``W``.

Every strategy of :mod:`optimizer_service.resharding.strategies` moves at
least a slice's bytes through each of those NICs while its task runs, and
tasks sharing a host never overlap (Eq. 3), so the bound is below every
schedule's makespan under the cost model (a property test checks it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from optimizer_service.hardware.topology import Topology
from optimizer_service.resharding.unit_tasks import UnitTask
from optimizer_service.units import human_bytes, human_rate, human_seconds


def host_bandwidth(topology: Topology) -> float:
    """Bytes/s one host moves across the outermost level (``inf`` with one host)."""
    per_host = topology.devices_per_instance(0)
    links = topology.links_at(0) if topology.hierarchy[0] > 1 else ()
    if not links:
        return math.inf
    return min(link.bandwidth * max(1, per_host // link.shared_by) for link in links)


@dataclass(frozen=True)
class LowerBound:
    """The bound's seconds and which term sets it (for the CLI's explanation)."""

    seconds: float
    side: str = "none"          # "receiver", "senders", "sender" or "none"
    host: int | None = None
    nbytes: int = 0
    bandwidth: float = math.inf

    def __str__(self) -> str:
        if self.side == "none":
            return "0 s (no slice crosses a host boundary)"
        who = {"receiver": f"receiver host h{self.host} must receive",
               "sender": f"sender host h{self.host} alone holds",
               "senders": "the sender hosts together must send"}[self.side]
        return f"{human_seconds(self.seconds)}: {who} {human_bytes(self.nbytes)} at {human_rate(self.bandwidth)}"


def lower_bound(unit_tasks: Sequence[UnitTask], topology: Topology) -> LowerBound:
    """The NIC lower bound (module docstring)."""
    bandwidth = host_bandwidth(topology)
    if not math.isfinite(bandwidth):
        return LowerBound(0.0)
    received: dict[int, int] = defaultdict(int)
    alone: dict[int, int] = defaultdict(int)
    leaving, source_hosts = 0, set()
    for task in unit_tasks:
        for host in task.destination_hosts:
            if host not in task.source_hosts:
                received[host] += task.nbytes
        if set(task.source_hosts) & set(task.destination_hosts):
            continue
        leaving += task.nbytes
        source_hosts.update(task.source_hosts)
        if len(task.source_hosts) == 1:
            alone[task.source_hosts[0]] += task.nbytes
    candidates = [LowerBound(0.0)]
    candidates += [LowerBound(b / bandwidth, "receiver", h, b, bandwidth) for h, b in sorted(received.items())]
    candidates += [LowerBound(b / bandwidth, "sender", h, b, bandwidth) for h, b in sorted(alone.items())]
    if source_hosts:
        combined = bandwidth * len(source_hosts)
        candidates.append(LowerBound(leaving / combined, "senders", None, leaving, combined))
    return max(candidates, key=lambda bound: bound.seconds)


def lower_bound_seconds(unit_tasks: Sequence[UnitTask], topology: Topology) -> float:
    return lower_bound(unit_tasks, topology).seconds
