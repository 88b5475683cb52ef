"""Topologies the resharding tests plan on: the emulated cluster's model."""

from __future__ import annotations

from deploy.emulated.model import cluster_topology
from optimizer_service.hardware.topology import Topology

NIC = 200e6 / 8
LOOPBACK = 1e9


def emulated(nodes: int, per_node: int, nic: float = NIC, loopback: float = LOOPBACK) -> Topology:
    """``nodes`` hosts of ``per_node`` ranks, a shaped NIC per host and one shared loopback."""
    return Topology.from_yaml(cluster_topology(f"emu-{nodes}x{per_node}", nodes, per_node, nic, None, loopback))


def two_level(nodes: int, per_node: int, *, nic: float = 1e6, nic_latency: float = 0.0, loopback: float = 1e12,
              loopback_latency: float = 0.0) -> Topology:
    """Hosts whose NIC is the only thing that costs time (by default): the
    setting of the paper's §3.1 formulas."""
    return Topology.from_dict({
        "name": f"hosts-{nodes}x{per_node}",
        "levels": [{"name": "node", "cardinality": nodes}, {"name": "device", "cardinality": per_node}],
        "links": [{"name": "loopback", "level": "device", "bandwidth": loopback, "latency": loopback_latency,
                   "shared_by": 1},
                  {"name": "nic", "level": "node", "bandwidth": nic, "latency": nic_latency,
                   "shared_by": per_node}]})
