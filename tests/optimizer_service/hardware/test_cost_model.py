"""The simulator's formulas (module docstring of hardware/cost_model.py) on cases small enough to do by hand."""

import numpy as np
import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.hardware.cost_model import Algorithm, CostModel, tree_edges
from optimizer_service.hardware.topology import Topology
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.lowering import lower_program
from optimizer_service.p2.placement import ParallelismMatrix
from optimizer_service.p2.program import Program
from optimizer_service.plan.collective import Collective

A100 = load_topology("gcp-a100-2n")      # 2 nodes x 16, NVSwitch 270 GB/s 3 us, NIC 8 GB/s 30 us per node
V100 = load_topology("gcp-v100-2n")      # 2 nodes x 8, NVLink 135 GB/s, PCIe 32 GB/s per 4, NIC 8 GB/s per node
N = 2**28
AR, RS, AG, RD, BC = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                      Collective.REDUCE, Collective.BROADCAST)


def groups(*gs):
    return np.array(gs, dtype=np.int64)


def test_ring_allreduce_inside_a_node():
    seconds = CostModel(A100).step_seconds(AR, groups(list(range(16))), N)
    assert seconds == pytest.approx(2 * 15 * 3e-6 + 2 * 15 / 16 * N / 270e9)


@pytest.mark.parametrize("collective,volume,rounds", [
    (RS, 3 / 4, 3), (AG, 3.0, 3), (RD, 1.0, 3), (BC, 1.0, 3)])
def test_ring_formulas(collective, volume, rounds):
    seconds = CostModel(A100).step_seconds(collective, groups([0, 1, 2, 3]), N)
    assert seconds == pytest.approx(rounds * 3e-6 + volume * N / 270e9)


def test_groups_crossing_one_nic_share_it():
    model = CostModel(A100)
    one = model.step_seconds(AR, groups([0, 16]), N)
    sixteen = model.step_seconds(AR, groups(*[[g, 16 + g] for g in range(16)]), N)
    assert one == pytest.approx(2 * 30e-6 + N / 8e9)
    assert sixteen == pytest.approx(2 * 30e-6 + 16 * N / 8e9)


def test_incast_slows_ingress_beyond_one_flow_per_device():
    # 2 nodes x 4 GPUs, a NIC per node shared by 4; every extra incoming flow costs 10 %.
    topo = Topology.from_yaml("""
name: t
levels: [{name: node, cardinality: 2}, {name: gpu, cardinality: 4}]
links:
  - {name: nvlink, level: gpu, bandwidth: 100GB/s, latency: 0s}
  - {name: nic, levels: [node], bandwidth: 10GB/s, latency: 0s, shared_by: 4, incast: 0.1}
""")
    model = CostModel(topo)
    four = (np.array([[0, 1, 2, 3]]), np.array([[4, 5, 6, 7]]))            # one flow per GPU: no penalty
    assert model.flows_seconds(*four, 1e9, 1) == pytest.approx(4e9 / 10e9)
    eight = (np.array([[0, 1, 2, 3, 0, 1, 2, 3]]), np.array([[4, 5, 6, 7, 5, 6, 7, 4]]))
    assert model.flows_seconds(*eight, 1e9, 1) == pytest.approx(8e9 * (1 + 0.1 * 4) / 10e9)
    without = CostModel(Topology.from_yaml(topo.to_yaml().replace("incast: 0.1", "incast: 0.0")))
    assert without.flows_seconds(*eight, 1e9, 1) == pytest.approx(8e9 / 10e9)


REDUCING = """
name: t
levels: [{name: gpu, cardinality: 4}]
links:
  - {name: bus, level: gpu, bandwidth: 10GB/s, latency: 0s, reduction: 1GB/s}
"""


def test_reduction_rate_bounds_what_a_receiver_combines():
    # 4 ranks on one bus that reduces 1 GB/s per device (10x slower than it moves bytes).
    model = CostModel(Topology.from_yaml(REDUCING))
    everyone = groups([0, 1, 2, 3])
    # Ring AllReduce: each flow carries 2·3/4·N, its ReduceScatter half (3/4·N) is reduced.
    assert model.step_seconds(AR, everyone, N) == pytest.approx(0.75 * N / 1e9)
    assert model.step_seconds(RS, everyone, N) == pytest.approx(0.75 * N / 1e9)
    # Nothing to combine: the bus alone paces AllGather, Broadcast and plain flows.
    assert model.step_seconds(AG, everyone, N) == pytest.approx(3 * N / 10e9)
    assert model.step_seconds(BC, everyone, N) == pytest.approx(N / 10e9)
    assert model.flows_seconds(np.array([[0, 1]]), np.array([[1, 0]]), float(N), 1) == pytest.approx(N / 10e9)
    # Reduce chain 3 -> 2 -> 1 -> 0: every hop's receiver combines N.
    assert model.step_seconds(RD, everyone, N) == pytest.approx(N / 1e9)
    # Two-member double tree: each member is the other's parent once and combines N/2 on the way up.
    tree = CostModel(Topology.from_yaml(REDUCING), Algorithm.TREE)
    assert tree.step_seconds(AR, groups([0, 1]), N) == pytest.approx(0.5 * N / 1e9)
    # A device combines what all flows over the link bring it: two senders into rank 0.
    assert model.flows_seconds(np.array([[1, 2]]), np.array([[0, 0]]), float(N), 1, 1.0) == pytest.approx(
        2 * N / 1e9)
    fast = CostModel(Topology.from_yaml(REDUCING.replace("reduction: 1GB/s", "reduction: 1TB/s")))
    assert fast.step_seconds(AR, everyone, N) == pytest.approx(1.5 * N / 10e9)


def test_a_step_takes_as_long_as_its_slowest_group():
    model = CostModel(A100)
    cross = model.step_seconds(AR, groups([0, 16]), N)
    local = model.step_seconds(AR, groups([1, 2]), N)
    both = model.step_seconds(AR, groups([0, 16], [1, 2]), N)
    assert local < cross == pytest.approx(both)


def test_traffic_crosses_every_link_of_its_level():
    # V100: a cross-node flow crosses PCIe (32 GB/s per 4 GPUs) and the NIC (8 GB/s per node):
    # latencies add, the most loaded link paces it.
    seconds = CostModel(V100).step_seconds(AR, groups([0, 8]), N)
    assert seconds == pytest.approx(2 * (2e-6 + 30e-6) + N / 8e9)
    # Eight pairs share the NIC (8 x N) and each PCIe switch (4 x N at 4x the bandwidth): the NIC wins.
    seconds = CostModel(V100).step_seconds(AR, groups(*[[g, 8 + g] for g in range(8)]), N)
    assert seconds == pytest.approx(2 * (2e-6 + 30e-6) + 8 * N / 8e9)


def test_two_member_tree_equals_ring():
    ring = CostModel(A100, Algorithm.RING).step_seconds(AR, groups([0, 16]), N)
    tree = CostModel(A100, Algorithm.TREE).step_seconds(AR, groups([0, 16]), N)
    assert tree == pytest.approx(ring)


def test_tree_reduce_depth_and_fan_in():
    topo = load_topology("gcp-a100-4n")
    # One GPU on each of 4 nodes: binary heap 0 <- 1, 0 <- 2, 1 <- 3; depth 2; node 0 receives 2N.
    seconds = CostModel(topo, Algorithm.TREE).step_seconds(RD, groups([0, 16, 32, 48]), N)
    assert seconds == pytest.approx(2 * 30e-6 + 2 * N / 8e9)


def test_trees_are_hierarchy_aware():
    # 4 GPUs on each of 2 nodes: one edge crosses the nodes, the rest stay inside.
    members = [0, 1, 2, 3, 16, 17, 18, 19]
    edges, depth = tree_edges(members, (16, 1))
    crossing = [(c, p) for c, p in edges if (members[c] // 16) != (members[p] // 16)]
    assert len(edges) == 7 and crossing == [(4, 0)]
    assert depth == 3


def test_tree_allreduce_halves_nic_traffic_across_two_nodes():
    flat = groups(list(range(32)))
    ring = CostModel(A100, Algorithm.RING).step_seconds(AR, flat, N)
    tree = CostModel(A100, Algorithm.TREE).step_seconds(AR, flat, N)
    # Ring: two edges cross, each carrying 2(p-1)/p N; double tree: N/2 up + N/2 down per tree edge.
    assert ring == pytest.approx(2 * 31 * 30e-6 + 2 * 31 / 32 * N / 8e9)
    assert tree < ring


def test_program_is_the_sum_of_its_steps():
    matrix = ParallelismMatrix(((2, 16),))
    hierarchy = SynthesisHierarchy.for_reduction(matrix, ["node", "gpu"], [0])
    program = lower_program(Program.parse(
        "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather"),
        hierarchy, matrix, [0])
    model = CostModel(A100)
    steps = [model.lowered_step_seconds(s, N) for s in program.steps]
    assert model.program_seconds(program, N) == pytest.approx(sum(steps))
    # The cross-node AllReduce moves N/16 per device over 16 pairs sharing the NIC: N per direction,
    # half of what the flat ring puts on it (the paper's Figure 10ii).
    assert steps[1] == pytest.approx(2 * 30e-6 + N / 8e9)


def test_unknown_algorithm():
    from optimizer_service.errors import InvalidInputError
    with pytest.raises(InvalidInputError, match="ring or tree"):
        Algorithm.parse("butterfly")
