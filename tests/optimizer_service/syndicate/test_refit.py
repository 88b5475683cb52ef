"""Re-fitting a topology's channels to measured motif times (pure)."""

from __future__ import annotations

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Par, Seq, comm_op, on_channel
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.refit import MAX_RATIO, channel_ratios, refit
from optimizer_service.syndicate.transforms import segment

TOPOLOGY = Topology.from_yaml(cluster_topology("t", 2, 2, 25e6, 25e6, 1e9))


def two_channel_plan() -> Plan:
    """An all-reduce over all 4 ranks: two segments on channel 0, two on channel 1."""
    ops = (OpPlan.of(OpKey(0, "all_reduce", 4 * 40_000, (0, 1, 2, 3)),
                     segment(comm_op(Collective.ALL_REDUCE, range(4), 40_000), 10_000)),)
    split = ops[0].plan
    parts = split.parts if hasattr(split, "parts") else (split,)
    moved = type(split)((*parts[:2], *(on_channel(p, 1) for p in parts[2:])))
    return Plan(1, 4, {0: None, 1: None}, (OpPlan.of(ops[0].key, moved),))


def traces_for(plan: Plan, slowdown: dict[int, float], iterations: int = 3) -> list[dict]:
    cost = MotifCostModel(TOPOLOGY)
    traces = []
    for rank in range(4):
        motifs = []
        for iteration in range(iterations):
            for order, motif in zip(plan.ops[0].order, plan.ops[0].motifs):
                seconds = cost.seconds(motif) * slowdown.get(motif.channel, 1.0)
                motifs.append({"iteration": iteration, "op_seq": 0, "order": order, "channel": motif.channel,
                               "waited": 0.0, "start": 0.0, "seconds": seconds})
        traces.append({"rank": rank, "motifs": motifs})
    return traces


def test_a_throttled_channel_is_measured_slower_and_only_its_links_change():
    plan = two_channel_plan()
    assert {m.channel for m in plan.ops[0].motifs} == {0, 1}
    ratios = channel_ratios(TOPOLOGY, plan, traces_for(plan, {1: 4.0}))
    assert ratios == pytest.approx({0: 1.0, 1: 4.0})
    fitted = refit(TOPOLOGY, ratios)
    by_name = {link.name: link for link in fitted.links}
    original = {link.name: link for link in TOPOLOGY.links}
    assert by_name["nic2"].bandwidth == pytest.approx(original["nic2"].bandwidth / 4)
    assert by_name["nic"] == original["nic"] and by_name["loopback"] == original["loopback"]
    assert "re-fitted: channel 1 x4.00" in fitted.description
    assert Topology.from_yaml(fitted.to_yaml()) == fitted          # still a valid, round-tripping topology


def test_what_slows_every_channel_alike_is_not_a_channel_change():
    plan = two_channel_plan()
    ratios = channel_ratios(TOPOLOGY, plan, traces_for(plan, {0: 3.0, 1: 3.0}))
    assert ratios == pytest.approx({0: 3.0, 1: 3.0}) and refit(TOPOLOGY, ratios) is TOPOLOGY
    fitted = refit(TOPOLOGY, channel_ratios(TOPOLOGY, plan, traces_for(plan, {0: 2.0, 1: 8.0})))
    assert {link.name: link.bandwidth for link in fitted.links}["nic2"] == pytest.approx(25e6 / 4)


def test_noise_leaves_the_topology_alone_and_odd_windows_are_clamped():
    plan = two_channel_plan()
    assert refit(TOPOLOGY, channel_ratios(TOPOLOGY, plan, traces_for(plan, {0: 1.05, 1: 0.95}))) is TOPOLOGY
    assert channel_ratios(TOPOLOGY, plan, traces_for(plan, {1: 1000.0}))[1] == MAX_RATIO
    assert channel_ratios(TOPOLOGY, plan, [{"rank": 0, "motifs": []}]) == {}    # passthrough: nothing to fit


def test_motifs_within_a_node_say_nothing_about_a_channel():
    # Reduce-scatter inside each node (loopback), the all-reduce across nodes on channel 1, the
    # all-gather inside each node: only the middle one uses a NIC. Inside-node motifs measured 20x
    # slow (CPU-bound on a loaded host) must not make channel 0 look slow.
    rs = Par((comm_op(Collective.REDUCE_SCATTER, (0, 1), 1000), comm_op(Collective.REDUCE_SCATTER, (2, 3), 1000)))
    across = Par((comm_op(Collective.ALL_REDUCE, (0, 2), 1000), comm_op(Collective.ALL_REDUCE, (1, 3), 1000)))
    ar = on_channel(across, 1)
    ag = Par((comm_op(Collective.ALL_GATHER, (0, 1), 1000), comm_op(Collective.ALL_GATHER, (2, 3), 1000)))
    op = OpPlan.of(OpKey(0, "all_reduce", 4 * 1000, (0, 1, 2, 3)), Seq((rs, ar, ag)))
    plan = Plan(1, 4, {0: None, 1: None}, (op,))
    cost = MotifCostModel(TOPOLOGY)
    traces = []
    for rank in range(4):
        motifs = [{"iteration": i, "op_seq": 0, "order": order, "channel": motif.channel, "waited": 0.0,
                   "start": 0.0, "seconds": cost.seconds(motif) * (2.0 if motif.channel == 1 else 20.0)}
                  for i in range(3) for order, motif in zip(op.order, op.motifs) if rank in motif.ranks]
        traces.append({"rank": rank, "motifs": motifs})
    assert channel_ratios(TOPOLOGY, plan, traces) == pytest.approx({1: 2.0})


def test_on_a_one_level_topology_every_motif_counts():
    # No nodes to stay inside: every motif of two or more ranks crosses the one level's links.
    flat = Topology.from_yaml("""
name: flat
levels:
- {name: device, cardinality: 4}
links:
- {name: wire, levels: [device], bandwidth: 25000000.0, latency: 0.0001}
- {name: wire2, levels: [device], bandwidth: 25000000.0, latency: 0.0001, channel: 1}
""")
    plan = two_channel_plan()
    cost = MotifCostModel(flat)
    traces = [{"rank": rank, "motifs": [
        {"iteration": i, "op_seq": 0, "order": order, "channel": motif.channel, "waited": 0.0, "start": 0.0,
         "seconds": cost.seconds(motif) * (4.0 if motif.channel == 1 else 1.0)}
        for i in range(3) for order, motif in zip(plan.ops[0].order, plan.ops[0].motifs)]} for rank in range(4)]
    assert channel_ratios(flat, plan, traces) == pytest.approx({0: 1.0, 1: 4.0})
