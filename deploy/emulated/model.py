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
alternative path for cross-node traffic (:meth:`Topology.links_at`).

Latencies are small constants of the right order for veths and loopback on
one host; ``p2 calibrate`` fits measured ones.
"""

from __future__ import annotations

from optimizer_service.topology import Level, Link, Topology
from optimizer_service.units import format_rate

LOOPBACK_LATENCY = 20e-6
NIC_LATENCY = 100e-6


def cluster_topology(name: str, nodes: int, per_node: int, nic_rate: float, nic2_rate: float | None,
                     loopback_rate: float, shaped: bool = True) -> Topology:
    links = [
        Link(name="loopback", levels=("device",), bandwidth=loopback_rate, latency=LOOPBACK_LATENCY,
             shared_by=nodes * per_node),
        Link(name="nic", levels=("node",), bandwidth=nic_rate, latency=NIC_LATENCY, shared_by=per_node),
    ]
    if nic2_rate is not None:
        links.append(Link(name="nic2", levels=("node",), bandwidth=nic2_rate, latency=NIC_LATENCY,
                          shared_by=per_node, channel=1))
    nics = format_rate(nic_rate) + ("" if nic2_rate is None else f" + {format_rate(nic2_rate)}")
    how = "tbf-shaped veths" if shaped else "unshaped: every rank on the host's loopback"
    description = (f"emulated cluster {name}: {nodes} node(s) x {per_node} rank(s), NIC {nics} ({how}), "
                   f"loopback {format_rate(loopback_rate)}")
    return Topology(name=name, levels=(Level("node", nodes), Level("device", per_node)), links=tuple(links),
                    description=description)
