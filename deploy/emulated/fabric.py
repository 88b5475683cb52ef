"""The fabric an emulated cluster models: how its NICs queue, and whether they drop.

* ``lossless`` (the default): the model of InfiniBand's credit-based flow
  control and of RoCE with PFC, where a switch never drops a packet. Each
  ``tbf`` queue is deep enough to hold every byte the TCP flows through that
  NIC can have in flight, and the node namespaces bound that (``tcp_wmem`` and
  ``tcp_rmem``), so the queue cannot overflow and its worst case stays finite.
* ``lossy``: today's shallow, switch-like queue (``QUEUE_TIME`` of traffic,
  :func:`deploy.emulated.netns.tbf_shape`); an incast overflows it, and each
  drop can cost a TCP flow a 200 ms retransmission timeout.

The lossless rule, from first principles (measurements in
:mod:`deploy.emulated.netns`'s docstring, section *Fabrics*):

* One TCP flow never has more payload in flight than its receiver's window,
  and the window never exceeds the receiver's ``SO_RCVBUF``, which autotuning
  grows up to ``tcp_rmem``'s maximum; the sender's ``SO_SNDBUF`` (unsent and
  unacknowledged bytes, up to ``tcp_wmem``'s maximum) bounds it from the other
  side. Both are per network namespace, so every node gets ``tcp_window`` =
  ``max(TCP_WINDOW_FLOOR, fastest NIC rate x TCP_WINDOW_TIME)`` as both maxima
  instead of the host's 4 to 32 MiB. That is enough for one flow to fill its
  NIC (plain sockets, one flow: at 200 Mbit/s 93 % of the rate from 64 KiB,
  95 % at 256 KiB; at 1 Gbit/s 81 % at 256 KiB, 92 % at 1 MiB; at 4 Gbit/s
  91 % at 1 MiB). Loopback traffic inside a node lives with the same maxima
  and is no slower (one stream, alternating runs: 2.7-3.4 GB/s at 256 KiB,
  1.6-2.4 GB/s at 4 MiB); ``up`` measures it after setting them.
* Flows through one NIC direction: gloo opens one connection per rank pair and
  process group (per device, so per NIC with ``GLOO_SOCKET_IFNAME=nic0,nic1``).
  A node's ``K`` ranks talk to the other ``(N - 1) x K`` ranks across its NIC,
  ``K x (N - 1) x K`` pairs, and each pair may have ``CONNECTIONS_PER_PAIR``
  connections busy on one NIC at once (the enforcer's world group, one
  communicator per plan channel and member set, subgroups, a benchmark's
  timing group; with margin: a bound of 4 per pair let 16 connections between
  two single-rank nodes overflow the queue).
* A queued byte costs ``WIRE_OVERHEAD`` in the queue (``tbf`` counts the
  Ethernet, IP and TCP headers of every segment: 1514 bytes per 1448 of payload).

So ``queue_bytes = flows x tcp_window x WIRE_OVERHEAD`` (70 MB for 2 x 4 ranks
and 256 KiB windows), and the ``tbf`` limit is the larger of it and the lossy
limit. A deep limit costs nothing by itself: the queue holds only what TCP
has in flight, which congestion control keeps far below the bound (the
latencies in netns.py). The bound is in bytes and does not depend on the
rate, so it still holds after :func:`set_channel_rate
<deploy.emulated.lifecycle.set_channel_rate>` slows a NIC: the queue is the
same number of bytes, i.e. longer in time (as a paused sender's backlog is).
Reading of "the queue must hold what every flow can have in flight": the
flows counted are ``CONNECTIONS_PER_PAIR`` per rank pair; a job with more
connections busy across one NIC at the same instant relies on congestion
control, not on the bound, to stay drop-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deploy.emulated.netns import TbfShape, tbf_shape
from deploy.errors import DeployError

LOSSLESS = "lossless"
LOSSY = "lossy"
FABRICS = (LOSSLESS, LOSSY)
DEFAULT_FABRIC = LOSSLESS
#: A state folder written before fabrics existed had the shallow queue.
LEGACY_FABRIC = LOSSY

TCP_WINDOW_FLOOR = 256 * 1024
TCP_WINDOW_TIME = 10e-3
CONNECTIONS_PER_PAIR = 16
WIRE_OVERHEAD = 1514 / 1448
#: ``tbf``'s limit is a 32-bit byte count.
MAX_QUEUE_BYTES = 2**32 - 1
#: The defaults (first two values) of the node namespaces' ``tcp_wmem`` / ``tcp_rmem``: the kernel's.
TCP_WMEM_START = (4096, 16384)
TCP_RMEM_START = (4096, 131072)


def check_fabric(fabric: object) -> str:
    """``fabric`` if it names a fabric, else a one-line error."""
    if fabric not in FABRICS:
        raise DeployError(f"fabric {fabric!r} must be one of {', '.join(FABRICS)} "
                          f"(lossless: deep queues, no drops, like PFC/InfiniBand; lossy: shallow switch-like queues)")
    return str(fabric)


@dataclass(frozen=True)
class Fabric:
    """A cluster's fabric and the numbers its queue rule uses (module docstring).

    ``tcp_window``: the node namespaces' ``tcp_wmem``/``tcp_rmem`` maximum
    (``None``: the host's, lossy); ``flows``: TCP flows one NIC direction
    may carry at once (0 for lossy, and for one node: nothing crosses a NIC)."""

    kind: str
    tcp_window: int | None = None
    flows: int = 0

    @classmethod
    def for_cluster(cls, kind: str, nodes: int, per_node: int, rates: tuple[float, ...]) -> Fabric:
        """The fabric ``kind`` for ``nodes`` x ``per_node`` ranks with NICs of ``rates`` bytes/s."""
        check_fabric(kind)
        if kind == LOSSY:
            return cls(kind)
        window = max(TCP_WINDOW_FLOOR, round(max(rates, default=0.0) * TCP_WINDOW_TIME))
        return cls(kind, tcp_window=window, flows=per_node * (nodes - 1) * per_node * CONNECTIONS_PER_PAIR)

    @property
    def queue_bytes(self) -> int:
        """What every flow through one NIC direction can have in flight, as ``tbf`` counts it."""
        if self.tcp_window is None:
            return 0
        return min(MAX_QUEUE_BYTES, round(self.flows * self.tcp_window * WIRE_OVERHEAD))

    def shape(self, rate: float) -> TbfShape:
        """The ``tbf`` of a NIC of ``rate`` bytes/s on this fabric (also after a rate change)."""
        return tbf_shape(rate, min_limit=self.queue_bytes)

    def sysctls(self) -> dict[str, str]:
        """The settings every node namespace gets (none for lossy: the host's)."""
        if self.tcp_window is None:
            return {}
        return {"net.ipv4.tcp_wmem": " ".join(map(str, (*TCP_WMEM_START, self.tcp_window))),
                "net.ipv4.tcp_rmem": " ".join(map(str, (*TCP_RMEM_START, self.tcp_window)))}

    def describe(self) -> str:
        """One phrase for people: ``lossless (TCP window 256 KiB, queue 70.0 MB)``."""
        if self.tcp_window is None:
            return f"{self.kind} (shallow queues)"
        return f"{self.kind} (TCP window {self.tcp_window // 1024} KiB, queues up to {self.queue_bytes / 1e6:.1f} MB)"

    def to_dict(self) -> dict[str, Any]:
        return {"fabric": self.kind, "tcp_window": self.tcp_window, "queue_flows": self.flows}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fabric:
        """The fabric recorded in a ``cluster.json`` (:data:`LEGACY_FABRIC` when it names none)."""
        kind = check_fabric(data.get("fabric", LEGACY_FABRIC))
        window = data.get("tcp_window")
        return cls(kind, tcp_window=None if window is None else int(window), flows=int(data.get("queue_flows") or 0))
