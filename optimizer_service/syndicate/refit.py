"""Re-fit a topology's channels to the motif times a running plan measured (pure).

Issue 16's "costs re-fitted from measured motif times": the live loop plans
from the calibrated topology, but what a channel really delivers while the job
trains differs — compute of many ranks on few cores slows the gloo threads, a
NIC is throttled or shared with another job. The enforcer records every motif
it runs (channel, seconds; :class:`optimizer_service.plan.trace.MotifRecord`).

Our fit, per channel ``c`` and per rank: the motif seconds the rank measured on
``c`` in an iteration (the median over the window's iterations that ran the
plan) against what the cost model predicts for the plan's motifs on ``c`` that
the rank takes part in. The channel's ratio is the median over ranks. Only
motifs that cross the network count (their ranks span more than one instance
of the topology's top level, a node): a motif within one node runs on the
node's own links whichever channel it names, so it says nothing about the
channel's NIC — and on the 2-core emulated cluster those are the motifs the
model misses most (loopback reduce-scatters of a P² program measured 12–22×
the calibrated time, CPU-bound next to 8 ranks' compute, while the NIC-bound
ring motifs measured 0.9–1.0×): counted, they made channel 0 look 16× slow
and sent traffic to a channel that was not faster. A record is matched to its
motif by its plan order number and channel among the motifs of the rank.

What :func:`refit` changes is each channel's ratio *relative to channel 0's*:
the links of channel ``c > 0`` get their bandwidth divided (latency
multiplied) by ``ratio_c / ratio_0``; channel 0 keeps its calibrated links.
A motif's measured time on a rank includes waiting for its slowest peer and
the CPU contention of every rank on the host, which inflate every channel
alike (measured on the emulated 2 × 4 cluster on 2 cores: channel 0 ×2.9,
channel 1 ×4.4 against the calibrated model); scaling every channel by that
made the model predict a plan 38 % slower than it measured. The relative
ratio is what a throttled or congested NIC changes, and what decides how the
search splits traffic between channels. A channel with no measured motif
keeps its calibrated links. Ratios are clamped to
[:data:`MIN_RATIO`, :data:`MAX_RATIO`] so one odd window cannot move the model
by more than that, and ratios within :data:`TOLERANCE` of 1 leave the links
alone (calibration noise is not a change).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.motif_cost import MotifCostModel

MIN_RATIO, MAX_RATIO = 0.25, 16.0
TOLERANCE = 0.10


def channel_ratios(topology: Topology, plan: Plan, traces: Sequence[Mapping]) -> dict[int, float]:
    """Per channel: measured over predicted motif seconds of the running ``plan`` (see the module doc)."""
    cost = MotifCostModel(topology)
    node = topology.devices_per_instance(0)         # 1 on a one-level topology: every motif crosses its links
    predicted: dict[tuple[int, int], float] = {}        # (rank, channel) -> seconds per iteration
    crosses: dict[tuple[int, int, int], bool | None] = {}   # (rank, order, channel) -> over the network?
    for op in plan.ops:
        group = op.key.group
        for motif, order in zip(op.motifs, op.order):
            if motif.channel not in topology.channels:
                continue
            ranks = tuple(group[p] for p in motif.ranks)
            network = len({rank // node for rank in ranks}) > 1
            for rank in ranks:
                key = (rank, order, motif.channel)
                crosses[key] = network if crosses.get(key, network) == network else None   # None: ambiguous
            if not network:
                continue
            seconds = cost.seconds(replace(motif, ranks=ranks))
            for rank in ranks:
                predicted[rank, motif.channel] = predicted.get((rank, motif.channel), 0.0) + seconds
    ratios: dict[int, list[float]] = {}
    for trace in traces:
        rank = int(trace.get("rank", -1))
        per: dict[tuple[int, int], float] = {}              # (channel, iteration) -> seconds
        for record in trace.get("motifs", ()):
            channel = int(record["channel"])
            if not crosses.get((rank, int(record["order"]), channel)):
                continue
            key = (channel, int(record["iteration"]))
            per[key] = per.get(key, 0.0) + float(record["seconds"])
        for channel in {c for c, _ in per}:
            expected = predicted.get((rank, channel), 0.0)
            if expected <= 0:
                continue
            measured = statistics.median(s for (c, _), s in per.items() if c == channel)
            ratios.setdefault(channel, []).append(measured / expected)
    return {channel: min(MAX_RATIO, max(MIN_RATIO, statistics.median(values)))
            for channel, values in sorted(ratios.items())}


def refit(topology: Topology, ratios: Mapping[int, float]) -> Topology:
    """``topology`` with each channel ``c > 0``'s links slowed (or sped up) by
    its ratio relative to channel 0's (the module doc says why)."""
    base = ratios.get(0, 1.0)
    changed = {c: r / base for c, r in ratios.items() if c > 0 and abs(r / base - 1.0) > TOLERANCE}
    if not changed:
        return topology
    links = [replace(link, bandwidth=link.bandwidth / changed[link.channel],
                     latency=link.latency * changed[link.channel]) if link.channel in changed else link
             for link in topology.links]
    note = ", ".join(f"channel {c} x{r:.2f}" for c, r in sorted(changed.items()))
    return replace(topology, links=tuple(links), description=f"{topology.description} (re-fitted: {note})")
