"""Topologies and (axes, reduce) configurations whose synthesized programs tests execute."""

from __future__ import annotations

from optimizer_service.hardware.topology import Topology

THREE_LEVELS = Topology.from_yaml("""
name: rack-server-gpu
levels: [{name: rack, cardinality: 2}, {name: server, cardinality: 2}, {name: gpu, cardinality: 4}]
links:
  - {name: nvlink, levels: [gpu], bandwidth: 100GB/s, latency: 2us}
  - {name: nic, levels: [server], bandwidth: 10GB/s, latency: 10us, shared_by: 4}
  - {name: spine, levels: [rack], bandwidth: 5GB/s, latency: 20us, shared_by: 8}
""")

CONFIGURATIONS = [
    # (topology, axes, reduce) — 1, 2 and 3 axes; 1 and 2 reduction axes; 1-, 2- and 3-level synthesis
    ("gcp-a100-2n", (32,), (0,)),
    ("gcp-v100-2n", (4, 4), (0,)),
    ("gcp-v100-2n", (2, 8), (1,)),
    ("gcp-a100-4n", (4, 16), (0,)),
    ("gcp-a100-4n", (8, 8), (1,)),
    ("gcp-a100-4n", (16, 2, 2), (0, 2)),
    ("gcp-a100-4n", (4, 2, 8), (0, 2)),
    ("gcp-v100-4n", (8, 2, 2), (0, 2)),
    ("dgx-h100", (2, 4, 4), (0, 1)),
    (THREE_LEVELS, (16,), (0,)),
    (THREE_LEVELS, (4, 4), (0,)),
    (THREE_LEVELS, (2, 2, 4), (0, 2)),
    (THREE_LEVELS, (2, 4, 2), (1,)),
]


# Small emulated clusters (loopback inside a node, a NIC between nodes) the executor runs programs on.
def emulated_cluster(nodes: int, per_node: int) -> Topology:
    return Topology.from_dict({
        "name": f"emulated-{nodes}x{per_node}",
        "levels": [{"name": "node", "cardinality": nodes}, {"name": "device", "cardinality": per_node}],
        "links": [{"name": "loopback", "level": "device", "bandwidth": "2GB/s", "latency": "20us"},
                  {"name": "nic", "level": "node", "bandwidth": "200Mbit/s", "latency": "100us",
                   "shared_by": per_node}]})

EMULATED_THREE_LEVELS = Topology.from_yaml("""
name: rack-node-device
levels: [{name: rack, cardinality: 2}, {name: node, cardinality: 2}, {name: device, cardinality: 2}]
links:
  - {name: loopback, level: device, bandwidth: 2GB/s, latency: 20us}
  - {name: nic, level: node, bandwidth: 1GB/s, latency: 50us, shared_by: 2}
  - {name: spine, level: rack, bandwidth: 200MB/s, latency: 100us, shared_by: 4}
""")

EMULATED_CONFIGURATIONS = [
    (emulated_cluster(2, 4), (8,), (0,)),
    (emulated_cluster(2, 4), (2, 4), (1,)),
    (emulated_cluster(2, 4), (2, 4), (0,)),
    (emulated_cluster(4, 2), (8,), (0,)),
    (emulated_cluster(4, 2), (4, 2), (0, 1)),
    (EMULATED_THREE_LEVELS, (8,), (0,)),
    (EMULATED_THREE_LEVELS, (2, 4), (1,)),
]
