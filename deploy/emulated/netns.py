"""Namespaces, veths, bridges and ``tbf`` shaping: the emulated cluster's wires.

One namespace per node, one bridge namespace holding one bridge per channel,
and per node and channel one veth whose node end (``nic<c>``) is the node's
NIC and whose bridge end (``n<i>c<c>``) is a bridge port. Both ends are
created directly in their namespaces (``ip link add nic0 netns NODE type veth
peer name n0c0 netns BRIDGE``), so no interface of a cluster ever exists in the
root namespace and two clusters cannot collide there.

Shaping (one ``tbf`` per veth end, P² models a NIC as one rate per direction):
the node end's egress is the node's upload, the bridge end's egress is the
node's download. Traffic between two nodes crosses the sender's upload and the
receiver's download; traffic between ranks of one node never touches a veth
(the kernel routes a namespace's own addresses through ``lo``).

Choosing ``burst`` and ``limit`` (measured on this kernel, 6.x, 2 cores, with
``tests/deploy/transfer_ranks.py``: one or three Python TCP streams between
node namespaces; numbers are goodput as a share of the configured rate):

* ``burst`` is the token bucket, the most bytes that may leave back to back
  at the veth's own speed, not the NIC's: after an idle spell a transfer's first
  ``burst`` bytes arrive as if free. A real NIC never sends faster than its line
  rate, so the bucket is kept as small as the rate allows. veths do GSO/TSO, so
  TCP hands the qdisc super-packets of up to ``gso_max_size``; ``tbf`` splits a
  GSO packet larger than its bucket into MTU-sized segments and releases them
  one by one. With a one-MTU bucket (1540 B) that costs a quarter of the rate
  (76 % at 200 Mbit/s); from 16 KiB up, 200 Mbit/s reaches 95.6 %. Faster NICs
  need a bucket worth about a millisecond of traffic, or timer granularity caps
  the rate: at 4 Gbit/s a 64 KiB bucket gave 70 %, 500 KB (1 ms) gave 95 %. So
  every NIC veth's ``gso_max_size`` is 16 KiB (:data:`GSO_PACKET`; the kernel's
  default is 64 KiB) and ``burst = max(20 KiB, rate x 1 ms)`` (20 KiB: one whole
  GSO packet plus the per-segment headers the kernel adds to its length, so GSO
  packets are never split). With 64 KiB GSO packets and an 80 KiB bucket, as
  until issue 32's seventeenth session, a 128 KiB message sent 50 ms after the
  last crossed a 200 Mbit/s NIC in 2.5 ms (2.1x its rate; back to back 5.4 ms),
  and one slowed to 50 Mbit/s in 9.1 ms (2.3x; back to back 21.8 ms): plans of
  many small motifs with gaps between them got line time a real NIC does not
  give. Now 4.7 and 18.8 ms (1.15x and 1.16x), and a 4 MiB transfer still gets
  93-95 % of the rate (a Python TCP stream between two one-rank nodes).
* ``limit`` is the queue behind the bucket. Too short and several senders
  into one node lose packets at its download side (forwarded traffic gets no
  backpressure from TCP small queues): three senders at 200 Mbit/s got 90 %
  with twice the 80 KiB bucket of 64 KiB GSO packets and 95.7 % with four times.
  Too long adds queueing delay under load. ``limit = max(320 KiB, rate x 5 ms)``
  (:data:`QUEUE_FLOOR`, four of those buckets, as before the smaller GSO packets):
  a full queue is 13 ms at 200 Mbit/s (65 ms at 40 Mbit/s) and 5 ms from 1 Gbit/s up.

With these, TCP reaches 95-97 % of the configured rate from 10 Mbit/s to
4 Gbit/s, one stream or several; the rest is Ethernet/IP/TCP headers, which
tbf counts (1448 payload bytes per 1514 on the wire is 95.6 %).

Fabrics (:mod:`deploy.emulated.fabric`). The limit above is the *lossy*
fabric: a switch-like queue that an incast overflows. The *lossless* fabric
(the default) makes ``limit`` at least what every TCP flow through the NIC
can have in flight, and bounds that per flow with the node namespaces'
``tcp_rmem``/``tcp_wmem`` maximum (256 KiB up to 210 Mbit/s, 10 ms of the
fastest NIC above). Measured with plain sockets (``tests/deploy/test_fabrics.py``
runs a smaller incast of this kind), 200 Mbit/s NICs, 3 s of traffic, host congestion
control ``bbr`` and ``cubic`` per socket, the loaded 2-core machine; the
round trip is of a 64-byte request/response on its own connection from the
(first) sender to node 0 while the bulk flows run (idle: 0.2 ms):

=====================================  ========  ================  ===================
traffic into node 0                    fabric    drops, bbr/cubic  round trip p50, ms
=====================================  ========  ================  ===================
1 node x 16 flows (upload queue)       lossy     667 / 214         12 / 13
1 node x 16 flows (upload queue)       lossless  0 / 0             53 / 90
4 nodes x 4 flows (download incast)    lossy     418 / 293         13 / 13
4 nodes x 4 flows (download incast)    lossless  0 / 0             73 / 137
same, NIC slowed 4x (50 Mbit/s)        lossless  0 / 0             137 / 457
=====================================  ========  ================  ===================

Goodput was 93-96 % of the rate on the lossless fabric in every row; on the
lossy one 70-95 %, each drop a retransmission. A gloo ``all_to_all_single``
of 4 MiB per rank on 2 x 4 ranks: lossy 1110 drops in 8 ops, 370-605 ms per
op; lossless 0 drops, 320-383 ms (8 MiB per node through a 25 MB/s NIC is
335 ms); every gloo socket's buffers stayed at the 256 KiB maximum (``ss
-tm``: gloo sets no ``SO_RCVBUF`` or ``SO_SNDBUF`` of its own, which would
bypass the bound).

What the lossless emulation gets right: no packet is lost, so no flow waits
out a retransmission timeout, and every NIC runs at its rate under any
incast, as on InfiniBand (credits) or RoCE with PFC. What it does not: a
paused sender keeps its backlog in its own memory and the switch arbitrates
between input ports, so a small message from another sender (or on another
queue pair) waits about one packet; here the backlog sits in the NIC's one
FIFO ``tbf`` queue and a small message waits behind all of it (the round trips
above: the upload queue holds about two 64 KiB GSO packets per busy socket,
TCP small queues' limit; an incast queue holds each flow's window). The
fair per-flow qdiscs that would model arbitration (``fq``, ``fq_codel``,
``sfq``, ``drr``) are not in every kernel (this machine's 6.18 has none of
them), so the queue stays FIFO: latency-bound traffic
that shares a busy NIC with bulk traffic is slower here than on a credit
fabric, by up to the queue's length (in time: longer on a slowed NIC).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from deploy.emulated import names
from deploy.emulated.qdisc_counts import QdiscReadError, qdisc_drops_in
from deploy.errors import DeployError

NETNS_DIR = Path("/run/netns")
GSO_PACKET = 16 * 1024          # every NIC veth's gso_max_size (the kernel's default is 64 KiB)
BURST_FLOOR = GSO_PACKET + 4 * 1024
BURST_TIME = 1e-3
QUEUE_TIME = 5e-3
QUEUE_FLOOR = 4 * (64 + 16) * 1024      # the shallow queue of 64 KiB GSO packets, kept as it was


class CommandError(DeployError):
    """An ``ip`` or ``tc`` command failed (one line: the command and its error)."""


@dataclass(frozen=True)
class TbfShape:
    """One ``tbf`` qdisc: ``rate`` in bytes/s, ``burst`` and ``limit`` in bytes."""

    rate: float
    burst: int
    limit: int

    def tc_args(self) -> list[str]:
        return ["tbf", "rate", f"{round(self.rate * 8)}bit", "burst", str(self.burst), "limit", str(self.limit)]

    def to_dict(self) -> dict[str, float | int]:
        return {"rate": self.rate, "burst": self.burst, "limit": self.limit}


def qdisc_line(device: str, shape: TbfShape) -> str:
    """The ``tc -batch`` line that (re)shapes ``device`` with ``shape``."""
    return f"qdisc replace dev {device} root {' '.join(shape.tc_args())}"


def tbf_shape(rate: float, min_limit: int = 0) -> TbfShape:
    """The ``tbf`` parameters for a NIC of ``rate`` bytes/s (module docstring):
    the shallow queue, or ``min_limit`` bytes where that is deeper (a lossless
    fabric's, :class:`deploy.emulated.fabric.Fabric`)."""
    burst = max(BURST_FLOOR, round(rate * BURST_TIME))
    limit = max(QUEUE_FLOOR, round(rate * QUEUE_TIME), min_limit)
    return TbfShape(rate=rate, burst=burst, limit=limit)


# ----------------------------------------------------------------- commands
def _run(argv: list[str], stdin: str | None = None) -> str:
    try:
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise CommandError(f"{argv[0]} is not installed (the emulated cluster needs iproute2)") from None
    if result.returncode != 0:
        detail = " ".join((result.stderr or result.stdout).split()) or f"exit code {result.returncode}"
        raise CommandError(f"'{' '.join(argv[:6])}' failed: {detail}")
    return result.stdout


def ip_batch(lines: list[str], namespace: str | None = None) -> None:
    """Run ``ip`` commands (without the leading ``ip``) in one process."""
    if lines:
        _run(["ip", *(["-n", namespace] if namespace else []), "-batch", "-"], "\n".join(lines) + "\n")


def tc_batch(lines: list[str], namespace: str) -> None:
    if lines:
        _run(["tc", "-n", namespace, "-batch", "-"], "\n".join(lines) + "\n")


def set_sysctls(namespace: str, settings: dict[str, str]) -> None:
    """Set ``net.*`` sysctls inside ``namespace`` (they are per network namespace)."""
    if settings:
        _run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
              *(f"{key}={value}" for key, value in settings.items())])


def qdisc_drops(namespace: str) -> dict[str, int]:
    """Packets each device's root qdisc in ``namespace`` dropped so far (what ``tc -s``
    shows): a ``tbf`` drops what overflows its queue, and each drop costs a TCP flow
    a retransmission (a timeout of at least 200 ms when it was the tail of a burst).
    Read over rtnetlink, no process spawned (:mod:`deploy.emulated.qdisc_counts`); with
    ``tc`` where that cannot be had."""
    try:
        return qdisc_drops_in(NETNS_DIR / namespace)
    except QdiscReadError:
        return qdisc_drops_by_tc(namespace)


def qdisc_drops_by_tc(namespace: str) -> dict[str, int]:
    """:func:`qdisc_drops` as ``tc -n NAMESPACE -j -s qdisc show`` has it (a process per reading)."""
    found = json.loads(_run(["tc", "-n", namespace, "-j", "-s", "qdisc", "show"]) or "[]")
    return {entry["dev"]: int(entry.get("drops", 0)) for entry in found if entry.get("root") and "dev" in entry}


# --------------------------------------------------------------- namespaces
def list_namespaces() -> list[str]:
    """Every named network namespace (what ``ip netns list`` shows)."""
    try:
        return sorted(entry.name for entry in NETNS_DIR.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def add_namespace(namespace: str) -> None:
    _run(["ip", "netns", "add", namespace])


def namespace_pids(namespace: str) -> list[int]:
    try:
        out = _run(["ip", "netns", "pids", namespace])
    except CommandError:
        return []
    return [int(word) for word in out.split() if word.isdigit()]


def kill_pids(pids: list[int], grace: float = 1.0) -> list[int]:
    """SIGTERM ``pids``, SIGKILL what is left after ``grace`` seconds; the pids
    that existed."""
    alive = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            alive.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    pending = list(alive)
    while pending and time.monotonic() < deadline:
        time.sleep(0.02)
        pending = [pid for pid in pending if _exists(pid)]
    for pid in pending:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return alive


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still "exists" but is dead; /proc tells them apart.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def delete_namespace(namespace: str) -> list[int]:
    """Kill the processes inside ``namespace`` and delete it (its veths and
    bridges go with it). Returns the pids killed. Missing namespaces are fine."""
    killed = kill_pids(namespace_pids(namespace))
    try:
        _run(["ip", "netns", "del", namespace])
    except CommandError:
        if namespace in list_namespaces():
            raise
    return killed


# ------------------------------------------------------------------ wiring
@dataclass(frozen=True)
class Wiring:
    """What :func:`build` creates: nodes, channels with their shapes
    (``None`` = unshaped), the address block, and the sysctls of every node
    namespace (a lossless fabric's TCP windows)."""

    cluster: str
    nodes: int
    slot: int
    shapes: tuple[TbfShape | None, ...]  # one per channel
    sysctls: tuple[tuple[str, str], ...] = ()

    @property
    def channels(self) -> int:
        return len(self.shapes)


def build(wiring: Wiring, created: list[str]) -> None:
    """Create the namespaces, bridges, veths, addresses and qdiscs of
    ``wiring``; every namespace made is appended to ``created`` as soon as it
    exists, so the caller can roll back a failure."""
    cluster, channels = wiring.cluster, range(wiring.channels)
    bridge_ns = names.bridge_namespace(cluster)
    node_ns = [names.node_namespace(cluster, node) for node in range(wiring.nodes)]
    for namespace in [bridge_ns, *node_ns]:
        add_namespace(namespace)
        created.append(namespace)

    bridge_lines = ["link set lo up"]
    for channel in channels:
        bridge = names.bridge_name(channel)
        bridge_lines += [f"link add {bridge} type bridge", f"link set {bridge} addrgenmode none",
                         f"link set {bridge} up"]
    ip_batch(bridge_lines, bridge_ns)

    ip_batch([f"link add {names.node_ifname(channel)} netns {node_ns[node]} type veth "
              f"peer name {names.bridge_ifname(node, channel)} netns {bridge_ns}"
              for node in range(wiring.nodes) for channel in channels])

    port_lines = []
    for node in range(wiring.nodes):
        lines = ["link set lo up"]
        for channel in channels:
            nic = names.node_ifname(channel)
            address = names.node_address(wiring.slot, channel, node)
            lines += [f"link set {nic} addrgenmode none", f"link set {nic} gso_max_size {GSO_PACKET}",
                      f"addr add {address}/{names.PREFIX_LENGTH} dev {nic}", f"link set {nic} up"]
            port = names.bridge_ifname(node, channel)
            port_lines += [f"link set {port} addrgenmode none", f"link set {port} gso_max_size {GSO_PACKET}",
                           f"link set {port} master {names.bridge_name(channel)}", f"link set {port} up"]
        ip_batch(lines, node_ns[node])
        set_sysctls(node_ns[node], dict(wiring.sysctls))
    ip_batch(port_lines, bridge_ns)

    bridge_qdiscs = []
    for node in range(wiring.nodes):
        node_qdiscs = []
        for channel, shape in enumerate(wiring.shapes):
            if shape is None:
                continue
            node_qdiscs.append(qdisc_line(names.node_ifname(channel), shape))
            bridge_qdiscs.append(qdisc_line(names.bridge_ifname(node, channel), shape))
        tc_batch(node_qdiscs, node_ns[node])
    tc_batch(bridge_qdiscs, bridge_ns)


def route_device(namespace: str, address: str) -> str:
    """The interface ``namespace`` sends traffic for ``address`` through
    (``lo`` for its own addresses)."""
    words = _run(["ip", "-n", namespace, "route", "get", address]).split()
    return words[words.index("dev") + 1] if "dev" in words else ""


def address_slot(namespace: str) -> int | None:
    """The ``slot`` of the ``10.<slot>.0.x`` address on ``nic0`` in ``namespace``."""
    try:
        words = _run(["ip", "-n", namespace, "-4", "-o", "addr", "show", "dev", names.node_ifname(0)]).split()
    except CommandError:
        return None
    for word, following in zip(words, words[1:], strict=False):
        if word == "inet" and following.startswith("10."):
            return int(following.split(".")[1])
    return None
