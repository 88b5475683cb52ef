"""The lower bound on a job's iteration time on a cluster state (issue 32, item 6; pure).

No plan, schedule or motif decomposition runs one iteration of a training DAG
(:mod:`optimizer_service.syndicate.dag`, Syndicate §4.3) in less time than the
largest of four terms:

* **the critical path** (``compute_seconds``): the heaviest chain of data
  dependencies per iteration, with every compute node at its measured time and
  every comm-op at the least time it can take alone on the fabric
  (:func:`least_seconds`). A chain counts only the ``after`` and
  ``after_previous`` edges: program-order edges (``issued_after``) are what
  Syndicate's scheduler drops to move an op across the iteration boundary, so
  no plan is bound to them. Iterations may overlap (the next batch's
  all-to-all during this backward pass), so the per-iteration figure is the
  heaviest *cycle* through the iteration boundary per iteration it spans: the
  maximum cycle mean (Karp) of the graph whose vertices are the nodes the next
  iteration waits for (``after_previous`` targets) and whose edge weights are
  the heaviest chains from one such node's dependants to another within one
  iteration. A DAG read from traces begins every iteration after the previous
  ``step`` and ends it with ``step``
  (:mod:`optimizer_service.syndicate.trace_dag`), so there it is the critical
  path of the one traced iteration. A DAG whose iterations wait for nothing of
  the previous one has no such cycle (0 s).
* **the busiest compute stream** (``stream_seconds``): the compute of one
  iteration on one stream (a stream runs one task at a time).
* **the NICs** (``network_seconds``): per node (an instance of the topology's
  outermost level) and direction, every byte of the iteration that must leave
  / enter the node, over the node's summed NIC rates — the best split over its
  NICs, where every NIC finishes at once —, and the same for a set of nodes
  together (below).
* **the NICs after the ops' release** (``release_seconds``, where the
  iterations run one after another): an op's bytes cannot leave its node
  before the op is issued, so per node and direction the iteration lasts at
  least, for every op ``k``, its release (the heaviest chain of data
  dependencies from the iteration's start to it, every comm-op at its least
  time) plus the time the node's NICs need for the bytes of every op released
  no earlier than ``k`` (a single machine with release dates, preemptive: the
  latest of these is its least makespan). It counts where one node of the DAG
  (the boundary) is the only one the next iteration waits for and every
  comm-op lies between the iteration's start and that node — a DAG read from
  traces (``step``); otherwise iterations may overlap and the term is 0. On a
  recorded DDP window (2 × 4 ranks, two 25 MB/s NICs a node), whose three
  gradient buckets reach the backend 20, 33 and 39 ms into the iteration and
  need 42 ms of both NICs, the NICs' term says 42 ms and the critical path 53;
  the NICs cannot start before the first bucket, and this term says 63.
* **the hosts' cores** (``host_seconds``, where the job's traces record its
  CPU): per host, the CPU seconds its ranks' training loops (compute and the
  issuing of ops) take per iteration, over the host's cores
  (:class:`~optimizer_service.syndicate.host_load.HostLoad`). The cores are the
  one resource the topology does not name: 8 ranks on 2 cores cannot compute
  faster than 2 cores allow, however the compute is spread over the iteration.

**Bytes that must cross.** Treat the ranks of each node as one participant
(reducing or gathering inside the node first is free for this bound). For an
op of ``D`` bytes per rank (``elements × element_bytes`` of its motif) over
``k`` nodes, ``P_n`` the bytes node ``n``'s members own (ReduceScatter) or
contribute (AllGather), ``a_n`` its members and ``p`` the op's:

============== ========================= ========================= ===================
collective     out of node ``n``          into node ``n``           all nodes together
============== ========================= ========================= ===================
AllReduce      ``D``                      ``D``                     ``2(k-1)·D``
ReduceScatter  ``D - P_n``                ``P_n``                   ``(k-1)·D``
AllGather      ``P_n``                    ``D - P_n``               ``(k-1)·D``
AllToAll       ``a_n(p-a_n)·B``           ``a_n(p-a_n)·B``          the sum
Broadcast      ``D`` (root's node), 0     0 (root's), ``D``          ``(k-1)·D``
Reduce         0 (root's), ``D``          ``D`` (root's), 0          ``(k-1)·D``
============== ========================= ========================= ===================

(``B``: the bytes of one all-to-all block.) Justification, element by
element: a node's contribution to an element another node needs must leave it
at least once, and an element it needs from others must enter it at least once
(one element's width each time: data are incompressible and not coded across
elements). An all-reduce is gossip with one-way messages, which needs at least
``2(k-1)`` messages per element (the known minimum of one-way gossip among
``k`` participants); a reduction to one owner needs one message from each of
the ``k-1`` others; spreading one element to ``k-1`` nodes needs ``k-1``
receptions; an all-to-all's blocks are distinct data. A message out of one
node is a message into another, so the totals bound both directions. Our
reading of the figures usually quoted per node — ``2(k-1)/k·D`` of an
all-reduce (reducing inside the node first), ``(k-1)/k`` of the gathered
bytes of a gather or scatter — is that they hold per node only on average: a
node itself must move ``D`` of an all-reduce, and the rest of ``2(k-1)·D``
may fall to any of its nodes, so the totals enter as a bound on a set of
nodes together (equal to the per-node figure when the nodes' NICs are alike).

**Sets of nodes.** For a set ``U`` of nodes and a direction, the bytes its
NICs must carry are, per op: the op's total if all its nodes are in ``U``,
else the per-node bytes of its nodes in ``U``; over ``U``'s capacity. Every
set gives a true bound; we take every single node, the node set of every op
and all nodes together (this is the exact optimum of splitting each op's
bytes over its nodes when node capacities add up, as with one NIC per node;
otherwise a true but possibly looser bound).

**Capacities.** A node set's rate on channel ``c`` is, for the links a
transfer between nodes on ``c`` crosses (:meth:`Topology.links_at`), the
smallest of ``bandwidth × instances of the link the set's devices use``; its
rate is the sum over the topology's channels. A channel with no link of its
own at the level runs over channel 0's links; the search prices it as a path
of its own, and so does the bound (counted twice, it is looser, never wrong).
The rates are the topology's: the service hands the re-fitted one
(:mod:`optimizer_service.syndicate.refit`), the rates measured.

**An op alone** (:func:`least_seconds`) is bound the same way at the
outermost level its members differ at: across nodes, its bytes over the NICs
(bytes between ranks of one node may go through another node, so none of its
traffic inside a node is certain); inside one node, its bytes between the
node's devices (or sockets) over the intra-node links — the loopback, whose
one instance carries every rank's traffic on the emulated cluster.

**What it ignores**, so it may be loose: latencies and every per-motif or
per-message fixed cost, the host CPU time of moving and reducing bytes, incast,
compute slowed by communication, that rings and trees move more than the
minimum, and that a comm-op alone is slower once it shares links with others.
Under the project's cost model (:mod:`optimizer_service.hardware.cost_model`)
each of these only adds time, and the scheduler runs a channel's motifs one at
a time and a comm-op's motifs between its predecessors and successors, so the
model's iteration time of any plan (two iterations unrolled, over two) is at
least the bound. (Comm-ops on different lanes of one channel — a pipeline's
edges — run side by side in the model; for those the model may undercut the
NIC term, the bound still holds for the hardware.) The hosts' term is outside
the scheduler's model, which prices compute as the traces measured it: a
prediction under that term is optimistic by at least the difference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif
from optimizer_service.syndicate.dag import TrainingDAG
from optimizer_service.syndicate.host_load import HostLoad
from optimizer_service.units import human_bytes, human_rate, human_seconds

OUT, IN = "outbound", "inbound"


@dataclass(frozen=True)
class Crossing:
    """What one comm-op must move across the boundaries of the instances (parts)
    of one level: per part the bytes that must leave and enter it, and at least
    how many bytes leave (enter) its parts in all."""

    level: int
    out_bytes: tuple[tuple[int, float], ...]      # (part, bytes), parts ascending
    in_bytes: tuple[tuple[int, float], ...]
    total_out: float
    total_in: float
    parts: frozenset[int]                         # the parts its members are in

    def need(self, parts: frozenset[int], direction: str) -> float:
        """Bytes the NICs of ``parts`` must carry in ``direction`` for this op."""
        own = self.out_bytes if direction == OUT else self.in_bytes
        if self.parts <= parts:
            return self.total_out if direction == OUT else self.total_in
        return sum(nbytes for part, nbytes in own if part in parts)


def outermost_level(ranks: Sequence[int], topology: Topology) -> int | None:
    """The outermost level at which ``ranks`` lie in different instances (None: one device)."""
    for level in range(len(topology.levels)):
        span = topology.devices_per_instance(level)
        if len({rank // span for rank in ranks}) > 1:
            return level
    return None


def crossing(motif: Motif, topology: Topology, level: int) -> Crossing | None:
    """The bytes ``motif`` must move across ``level``'s instance boundaries (the
    module docstring's table; ``ranks[0]`` is a Broadcast's or Reduce's root),
    or None when its members lie in one instance."""
    span = topology.devices_per_instance(level)
    part_of = [rank // span for rank in motif.ranks]
    parts = sorted(set(part_of))
    k = len(parts)
    if k < 2:
        return None
    size = motif.element_bytes
    out = dict.fromkeys(parts, 0.0)
    into = dict.fromkeys(parts, 0.0)
    kind = motif.kind
    whole = float(sum(b - a for a, b in motif.ranges) * size)
    if kind is Collective.ALL_REDUCE:
        for part in parts:
            out[part] = into[part] = whole
        total = 2 * (k - 1) * whole
        return _crossing(level, out, into, total, total)
    if kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        own = dict.fromkeys(parts, 0.0)
        for part, (a, b) in zip(part_of, motif.ranges):
            own[part] += (b - a) * size
        for part in parts:
            kept, foreign = own[part], whole - own[part]
            out[part], into[part] = (foreign, kept) if kind is Collective.REDUCE_SCATTER else (kept, foreign)
        total = (k - 1) * whole
        return _crossing(level, out, into, total, total)
    if kind is Collective.ALL_TO_ALL:          # member i sends a block of ``whole`` bytes to i + offset
        sources = np.asarray(part_of)
        p = len(sources)
        targets = sources[(np.arange(p)[:, None] + np.arange(*motif.window)[None, :]) % p]
        away = targets != sources[:, None]
        sent = np.bincount(np.broadcast_to(sources[:, None], targets.shape)[away], minlength=parts[-1] + 1)
        received = np.bincount(targets[away], minlength=parts[-1] + 1)
        for part in parts:
            out[part], into[part] = float(sent[part]) * whole, float(received[part]) * whole
        total = sum(out.values())
        return _crossing(level, out, into, total, total)
    root = part_of[0]
    for part in parts:
        if kind is Collective.BROADCAST:
            out[part], into[part] = (whole, 0.0) if part == root else (0.0, whole)
        else:                                    # Reduce
            out[part], into[part] = (0.0, whole) if part == root else (whole, 0.0)
    total = (k - 1) * whole
    return _crossing(level, out, into, total, total)


def _crossing(level: int, out: dict[int, float], into: dict[int, float], total_out: float,
              total_in: float) -> Crossing:
    return Crossing(level, tuple(sorted(out.items())), tuple(sorted(into.items())), total_out, total_in,
                    frozenset(out))


@dataclass(frozen=True)
class Fabric:
    """The rates of one level's instances (nodes at level 0) on a topology, per channel."""

    topology: Topology
    level: int

    def channel_rate(self, parts: Iterable[int], channel: int) -> float:
        """Bytes/s per direction that ``parts`` together move across the level on ``channel``."""
        span = self.topology.devices_per_instance(self.level)
        parts = list(parts)
        rates = []
        for link in self.topology.links_at(self.level, channel):
            share = link.shared_by
            instances = {instance for part in parts
                         for instance in range(part * span // share, ((part + 1) * span - 1) // share + 1)}
            rates.append(link.bandwidth * len(instances))
        return min(rates, default=0.0)

    def rate(self, parts: Iterable[int]) -> float:
        parts = list(parts)
        return sum(self.channel_rate(parts, channel) for channel in self.topology.channels)

    def links(self, channel: int) -> str:
        return "+".join(link.name for link in self.topology.links_at(self.level, channel))


def _hardest(crossings: Sequence[Crossing], fabric: Fabric) -> tuple[float, frozenset[int], str]:
    """The largest ``need / rate`` over the candidate part sets and both directions (module docstring)."""
    singles = {frozenset((part,)) for c in crossings for part in c.parts}
    candidates = singles | {c.parts for c in crossings} | {frozenset().union(*(c.parts for c in crossings))}
    best = (0.0, frozenset(), OUT)
    for parts in sorted(candidates, key=lambda s: (len(s), sorted(s))):
        rate = fabric.rate(parts)
        for direction in (OUT, IN):
            need = sum(c.need(parts, direction) for c in crossings)
            if need <= 0:
                continue
            seconds = need / rate if rate > 0 else math.inf
            if seconds > best[0]:
                best = (seconds, parts, direction)
    return best


def least_seconds(motif: Motif, topology: Topology) -> float:
    """The least time ``motif`` (a whole comm-op on global ranks) can take alone on
    ``topology``: its bytes that must cross the instances of the outermost level
    its members differ at, over their links' rates (module docstring)."""
    level = outermost_level(motif.ranks, topology)
    if level is None:
        return 0.0
    found = crossing(motif, topology, level)
    return 0.0 if found is None else _hardest([found], Fabric(topology, level))[0]


@dataclass(frozen=True)
class NicShare:
    """One NIC path of a node (a channel's links across nodes) at the best split:
    the share of the node's bytes it carries, in proportion to its rate."""

    channel: int
    links: str
    rate: float
    out_bytes: float
    in_bytes: float

    def to_dict(self) -> dict:
        return {"channel": self.channel, "links": self.links, "rate": self.rate, "out_bytes": self.out_bytes,
                "in_bytes": self.in_bytes}


@dataclass(frozen=True)
class NodeLoad:
    """The bytes of one iteration that must leave and enter one node, its summed NIC rate, and its NICs' shares."""

    node: int
    out_bytes: float
    in_bytes: float
    rate: float
    nics: tuple[NicShare, ...]

    @property
    def seconds(self) -> float:
        busiest = max(self.out_bytes, self.in_bytes)
        return busiest / self.rate if self.rate > 0 else (math.inf if busiest else 0.0)

    def to_dict(self) -> dict:
        return {"node": self.node, "out_bytes": self.out_bytes, "in_bytes": self.in_bytes, "rate": self.rate,
                "seconds": self.seconds, "nics": [nic.to_dict() for nic in self.nics]}

    def __str__(self) -> str:
        shares = ", ".join(f"ch{n.channel} {n.links} {human_rate(n.rate)}" for n in self.nics)
        return (f"node {self.node}: out {human_bytes(round(self.out_bytes))}, in {human_bytes(round(self.in_bytes))} "
                f"at {human_rate(self.rate)} ({shares}): {human_seconds(self.seconds)}")


@dataclass(frozen=True)
class Bound:
    """The lower bound on one iteration (module docstring): ``seconds`` is the largest of
    its terms, ``binding`` says which one, ``nodes`` the per-node NIC loads, ``hosts``
    the hosts' CPU loads (none where the traces record no CPU)."""

    seconds: float
    compute_seconds: float
    stream_seconds: float
    network_seconds: float
    binding: str
    nodes: tuple[NodeLoad, ...] = ()
    host_seconds: float = 0.0
    hosts: tuple[HostLoad, ...] = ()
    release_seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "compute_seconds": self.compute_seconds,
                "stream_seconds": self.stream_seconds, "network_seconds": self.network_seconds,
                "release_seconds": self.release_seconds, "host_seconds": self.host_seconds, "binding": self.binding,
                "nodes": [node.to_dict() for node in self.nodes], "hosts": [host.to_dict() for host in self.hosts]}

    def __str__(self) -> str:
        cores = f", host cores {human_seconds(self.host_seconds)}" if self.hosts else ""
        released = (f", from the ops' release {human_seconds(self.release_seconds)}"
                    if self.release_seconds > self.network_seconds else "")
        return (f"{human_seconds(self.seconds)}, bound by {self.binding} (critical path "
                f"{human_seconds(self.compute_seconds)}, busiest compute stream {human_seconds(self.stream_seconds)}, "
                f"NICs {human_seconds(self.network_seconds)}{released}{cores})")


def iteration_bound(dag: TrainingDAG, topology: Topology, hosts: Sequence[HostLoad] = ()) -> Bound:
    """The lower bound on ``dag``'s iteration time on ``topology`` (module docstring);
    ``hosts``: the job's CPU per host (:func:`~optimizer_service.syndicate.host_load.host_loads`)."""
    weight = [least_seconds(node.comm, topology) if node.is_comm else node.seconds for node in dag.nodes]
    path = cycle_seconds(dag, weight)
    streams: dict[int, float] = {}
    for node in dag.nodes:
        if not node.is_comm:
            streams[node.stream] = streams.get(node.stream, 0.0) + node.seconds
    stream, busiest = max(streams.items(), key=lambda item: (item[1], -item[0]), default=(0, 0.0))
    crossed = {i: crossing(node.comm, topology, 0) for i, node in enumerate(dag.nodes) if node.is_comm}
    crossings = [c for c in crossed.values() if c is not None]
    fabric = Fabric(topology, 0)
    network, parts, direction = _hardest(crossings, fabric) if crossings else (0.0, frozenset(), OUT)
    crowded = max(hosts, key=lambda host: host.seconds, default=None)     # the host whose loops need longest
    released, node, released_direction = release_seconds(dag, weight, crossed, fabric)
    terms = [(path, "compute critical path"), (busiest, f"compute stream {stream}"),
             (network, _nics_text(parts, direction)),
             (released, f"node {node}'s NICs after the ops' release, {released_direction}")]
    if crowded is not None:
        terms.append((crowded.seconds,
                       f"host {crowded.host[:8]}'s {crowded.cores:g} cores (its ranks' training loops)"))
    seconds, binding = max(terms, key=lambda term: term[0])     # ties: the first named
    if seconds <= 0:
        binding = "nothing (no compute time and no bytes between nodes)"
    return Bound(seconds, path, busiest, network, binding, _node_loads(crossings, fabric),
                 crowded.seconds if crowded is not None else 0.0, tuple(hosts), released)


def release_seconds(dag: TrainingDAG, weight: Sequence[float], crossed: dict[int, Crossing | None],
                    fabric: Fabric) -> tuple[float, int, str]:
    """The NICs' term after the ops' release (module docstring), with node ``i`` taking ``weight[i]``
    and its op moving ``crossed[i]`` across the nodes of ``fabric``: its seconds, the node and the
    direction that give them ((0.0, 0, OUT) where iterations may overlap or no byte crosses a node)."""
    released = _releases(dag, weight)
    if released is None:
        return 0.0, 0, OUT
    per_node: dict[tuple[int, str], list[tuple[float, float]]] = {}     # (node, direction) -> (release, bytes)
    for i, found in crossed.items():
        if found is None:
            continue
        for direction, loads in ((OUT, found.out_bytes), (IN, found.in_bytes)):
            for part, nbytes in loads:
                if nbytes > 0:
                    per_node.setdefault((part, direction), []).append((released[i], nbytes))
    best = (0.0, 0, OUT)
    for (part, direction), ops in sorted(per_node.items(), key=lambda item: (item[0][0], item[0][1] != OUT)):
        rate = fabric.rate((part,))
        left = 0.0
        for start, nbytes in sorted(ops, reverse=True):       # latest release first: the bytes released from then on
            left += nbytes
            seconds = start + (left / rate if rate > 0 else math.inf)
            if seconds > best[0]:
                best = (seconds, part, direction)
    return best


def _releases(dag: TrainingDAG, weight: Sequence[float]) -> list[float] | None:
    """Every node's earliest start after its iteration's start (the heaviest chain of data dependencies
    before it), where the iterations run one after another: one node, the boundary, is the only one
    the next iteration waits for, and every comm-op lies on a chain from the iteration's start to it;
    None otherwise."""
    carriers = {b for node in dag.nodes for b in node.after_previous}
    if len(carriers) != 1:
        return None
    (boundary,) = carriers
    ends = _heaviest_ends(dag, weight, {i for i, node in enumerate(dag.nodes) if node.after_previous})
    reaches = {dag.index[boundary]}         # the boundary and every node it waits on, directly or not
    for i in reversed(dag.order):
        if i in reaches:
            reaches.update(dag.index[b] for b in dag.nodes[i].after)
    if any(node.is_comm and (ends[i] == -math.inf or i not in reaches) for i, node in enumerate(dag.nodes)):
        return None
    return [0.0 if end == -math.inf else end - weight[i] for i, end in enumerate(ends)]


def _heaviest_ends(dag: TrainingDAG, weight: Sequence[float], starts: set[int]) -> list[float]:
    """Per node, the heaviest chain of data dependencies (``after``) within one iteration from any of
    ``starts`` to its end, node ``i`` taking ``weight[i]`` (-inf where no chain from them reaches it)."""
    longest = [-math.inf] * len(dag.nodes)
    for i in dag.order:
        before = max((longest[dag.index[b]] for b in dag.nodes[i].after), default=-math.inf)
        if i in starts:
            before = max(before, 0.0)
        if before > -math.inf:
            longest[i] = before + weight[i]
    return longest


def _nics_text(parts: frozenset[int], direction: str) -> str:
    if len(parts) == 1:
        return f"node {next(iter(parts))}'s NICs, {direction}"
    return f"the NICs of nodes {', '.join(map(str, sorted(parts)))} together, {direction}"


def _node_loads(crossings: Sequence[Crossing], fabric: Fabric) -> tuple[NodeLoad, ...]:
    out: dict[int, float] = {}
    into: dict[int, float] = {}
    for c in crossings:
        for part, nbytes in c.out_bytes:
            out[part] = out.get(part, 0.0) + nbytes
        for part, nbytes in c.in_bytes:
            into[part] = into.get(part, 0.0) + nbytes
    loads = []
    for node in sorted(out):
        rate = fabric.rate((node,))
        nics = []
        for channel in fabric.topology.channels:
            share = fabric.channel_rate((node,), channel)
            fraction = share / rate if rate > 0 else 0.0
            nics.append(NicShare(channel, fabric.links(channel), share, out[node] * fraction, into[node] * fraction))
        loads.append(NodeLoad(node, out[node], into[node], rate, tuple(nics)))
    return tuple(loads)


def cycle_seconds(dag: TrainingDAG, weight: Sequence[float]) -> float:
    """The heaviest chain of data dependencies per iteration: the maximum mean, per
    iteration crossed, of a cycle through the iteration boundary (module docstring),
    with node ``i`` taking ``weight[i]``."""
    carriers = sorted({dag.index[b] for node in dag.nodes for b in node.after_previous})
    if not carriers:
        return 0.0
    heads: dict[int, list[int]] = {c: [] for c in carriers}
    for i, node in enumerate(dag.nodes):
        for b in set(node.after_previous):
            heads[dag.index[b]].append(i)
    position = {c: k for k, c in enumerate(carriers)}
    chain = [[-math.inf] * len(carriers) for _ in carriers]   # chain[s][t]: heaviest heads(s) ~> t in one iteration
    for s in carriers:
        longest = _heaviest_ends(dag, weight, set(heads[s]))
        for t in carriers:
            chain[position[s]][position[t]] = longest[t]
    return max(0.0, max_cycle_mean(chain))


def max_cycle_mean(weights: Sequence[Sequence[float]]) -> float:
    """Karp's maximum mean cycle of a complete digraph given by ``weights[u][v]``
    (``-inf``: no edge); ``-inf`` when there is no cycle."""
    n = len(weights)
    walks = [[0.0] * n]                  # walks[k][v]: heaviest walk of k edges ending at v, from anywhere
    for _ in range(n):
        previous = walks[-1]
        walks.append([max((previous[u] + weights[u][v] for u in range(n)), default=-math.inf) for v in range(n)])
    best = -math.inf
    for v in range(n):
        if walks[n][v] == -math.inf:
            continue
        best = max(best, min((walks[n][v] - walks[k][v]) / (n - k) for k in range(n) if walks[k][v] > -math.inf))
    return best
