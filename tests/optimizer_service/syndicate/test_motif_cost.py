"""Motif costs on a topology: channels, dispatch overhead, and agreement with the P² simulator."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op, motifs_of, on_channel
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.transforms import segment, spline_all_to_all, spline_ring

TWO_NICS = Topology.from_yaml("""
name: two-nics
levels: [{name: node, cardinality: 2}, {name: device, cardinality: 4}]
links:
  - {name: loopback, level: device, bandwidth: 2GB/s, latency: 0s, shared_by: 8}
  - {name: nic, level: node, bandwidth: 25MB/s, latency: 0s, shared_by: 4}
  - {name: nic2, level: node, bandwidth: 12.5MB/s, latency: 0s, shared_by: 4, channel: 1}
""")
MiB = 2**20


def test_a_whole_allreduce_costs_what_the_simulator_says_plus_one_dispatch():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=1e-3)
    op = comm_op(Collective.ALL_REDUCE, tuple(range(8)), MiB)
    expected = CostModel(TWO_NICS).step_seconds(Collective.ALL_REDUCE, [list(range(8))], 4 * MiB)
    assert costs.seconds(op) == pytest.approx(expected + 1e-3)


def test_ring_splining_costs_the_same_bytes_plus_a_dispatch():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=1e-3)
    op = comm_op(Collective.ALL_REDUCE, tuple(range(8)), MiB)
    split = sum(costs.seconds(m) for m in motifs_of(spline_ring(op)))
    assert split == pytest.approx(costs.seconds(op) + 1e-3)


def test_over_fine_segmentation_pays_for_dispatch():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=1e-3)
    op = comm_op(Collective.ALL_REDUCE, tuple(range(8)), MiB)
    pieces = motifs_of(segment(op, MiB // 16))
    assert len(pieces) == 16
    assert sum(costs.seconds(m) for m in pieces) == pytest.approx(costs.seconds(op) + 15e-3)


def test_the_second_channel_uses_the_second_nic():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=0.0)
    across = comm_op(Collective.ALL_REDUCE, (0, 4), MiB)
    assert costs.seconds(on_channel(across, 1)) == pytest.approx(2 * costs.seconds(across))
    inside = comm_op(Collective.ALL_REDUCE, (0, 1), MiB)  # stays on loopback whatever the channel
    assert costs.seconds(on_channel(inside, 1)) == pytest.approx(costs.seconds(inside))


def test_all_to_all_shares_the_nic_and_splining_keeps_its_bytes():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=0.0)
    op = comm_op(Collective.ALL_TO_ALL, tuple(range(8)), MiB // 4)  # 1 MiB per destination block
    # every node sends 4 ranks x 4 remote destinations x 1 MiB = 16 MiB over its NIC
    assert costs.seconds(op) == pytest.approx(16 * MiB / 25e6)
    windows = motifs_of(spline_all_to_all(op, 2))
    assert len(windows) == 4
    assert sum(costs.seconds(m) for m in windows) == pytest.approx(costs.seconds(op))


def test_unknown_channels_and_ranks_are_one_line_errors():
    costs = MotifCostModel(TWO_NICS)
    with pytest.raises(InvalidInputError, match="no channel 2"):
        costs.seconds(on_channel(comm_op(Collective.ALL_REDUCE, (0, 4), 8), 2))
    with pytest.raises(InvalidInputError, match="ranks 0..7"):
        costs.seconds(comm_op(Collective.ALL_REDUCE, (0, 9), 8))


def test_fixed_costs_per_channel_across_nodes_and_for_the_host_inside_one():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=0.0, channel_dispatch={0: 3e-3, 1: 5e-3}, host_dispatch=1e-3)
    bare = MotifCostModel(TWO_NICS, dispatch_seconds=0.0)
    across = comm_op(Collective.ALL_REDUCE, (0, 4), MiB)
    inside = comm_op(Collective.ALL_REDUCE, (0, 1), MiB)
    assert costs.seconds(across) == pytest.approx(bare.seconds(across) + 3e-3)
    assert costs.seconds(on_channel(across, 1)) == pytest.approx(bare.seconds(on_channel(across, 1)) + 5e-3)
    assert costs.seconds(on_channel(inside, 1)) == pytest.approx(bare.seconds(inside) + 1e-3)   # the host's, any channel


def test_a_motif_of_no_bytes_costs_nothing():
    # both runtimes return from an empty motif at once: a P² program's empty slices are free
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=1e-3)
    assert costs.seconds(comm_op(Collective.ALL_REDUCE, (0, 4), 0)) == 0.0
