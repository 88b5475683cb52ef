"""The P² model of an emulated cluster (P² §2: a hierarchy plus links).

Two levels, ``[node: N, device: K]``, one device per rank. Ranks of one node
talk through the namespace's loopback (link ``loopback`` at level ``device``).
Its one instance is shared by *every* rank of the cluster: TCP over ``lo`` is
bound by the host's CPUs, which copy every byte of every node's loopback
traffic, so two nodes reducing internally at once take about twice as long as
one (measured on the 2-core development machine: a 64 MiB ReduceScatter →
AllGather in one node 148 ms, in both at once 265 ms; with one instance per
device the calibrated model was off by 24 % on average, with one per cluster
by 14 %). Ranks of different nodes talk through
the node's shaped veth (link ``nic`` at level ``node``, shared by the node's
``K`` ranks). A second NIC is a second channel (``nic2``, channel 1), an
alternative path for cross-node traffic (the optimizer's ``Topology.links_at``).
The model is written as a YAML document, the format ``p2 topology`` reads
(``deploy/`` imports nothing of the optimizer); its description names the
fabric (:mod:`deploy.emulated.fabric`), which the links' rates do not show.

Latencies are small constants of the right order for veths and loopback on
one host; ``p2 calibrate`` fits measured ones.
"""

from __future__ import annotations

import yaml

from deploy.emulated.fabric import DEFAULT_FABRIC

LOOPBACK_LATENCY = 20e-6
NIC_LATENCY = 100e-6


def _rate_text(bytes_per_second: float) -> str:
    """A rate as people read it in the description (the links carry exact bytes/s)."""
    bits = bytes_per_second * 8
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("Kbit/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.4g}{unit}"
    return f"{bits:.4g}bit/s"


def cluster_topology(name: str, nodes: int, per_node: int, nic_rate: float, nic2_rate: float | None,
                     loopback_rate: float, shaped: bool = True, fabric: str = DEFAULT_FABRIC) -> str:
    """The cluster's topology as a YAML document (the format of
    ``p2 topology show --yaml``; bandwidths in bytes/s, latencies in seconds)."""
    links = [
        {"name": "loopback", "levels": ["device"], "bandwidth": float(loopback_rate), "latency": LOOPBACK_LATENCY,
         "shared_by": nodes * per_node},
        {"name": "nic", "levels": ["node"], "bandwidth": float(nic_rate), "latency": NIC_LATENCY,
         "shared_by": per_node},
    ]
    if nic2_rate is not None:
        links.append({"name": "nic2", "levels": ["node"], "bandwidth": float(nic2_rate), "latency": NIC_LATENCY,
                      "shared_by": per_node, "channel": 1})
    nics = _rate_text(nic_rate) + ("" if nic2_rate is None else f" + {_rate_text(nic2_rate)}")
    how = f"tbf-shaped veths, {fabric} fabric" if shaped else "unshaped: every rank on the host's loopback"
    description = (f"emulated cluster {name}: {nodes} node(s) x {per_node} rank(s), NIC {nics} ({how}), "
                   f"loopback {_rate_text(loopback_rate)}")
    document = {"name": name, "description": description,
                "levels": [{"name": "node", "cardinality": nodes}, {"name": "device", "cardinality": per_node}],
                "links": links}
    return yaml.safe_dump(document, sort_keys=False)
