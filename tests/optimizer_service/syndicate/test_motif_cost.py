"""Motif costs on a topology: channels, dispatch overhead, and agreement with the P² simulator."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif, comm_op, motifs_of, on_channel
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


def _pairs(parts: list[int], channel: int = 1) -> tuple[Motif, ...]:
    """Rank i's part of an op reduced with rank i + 4 across the two nodes, all at once
    (a P² step after a reduce-scatter inside each node)."""
    starts = [sum(parts[:i]) for i in range(len(parts))]
    return tuple(Motif(Collective.ALL_REDUCE, (i, i + 4), ((start, start + size),), channel=channel)
                 for i, (start, size) in enumerate(zip(starts, parts)))


def test_motifs_of_one_step_share_a_nic_when_their_parts_differ_by_an_element():
    # 131,585 elements over four ranks: three parts of 32,896 and one of 32,897. Priced each
    # alone (as before), the four pairs got the whole NIC each: a DDP replan was priced 35 % under
    # what it measured
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=1e-3)
    even, uneven = _pairs([32896] * 4), _pairs([32896] * 3 + [32897])
    one = costs.step_seconds(even[:1]) - 1e-3
    assert costs.step_seconds(even) - 1e-3 == pytest.approx(4 * one)        # node 0's NIC carries all four
    assert costs.step_seconds(uneven) == pytest.approx(costs.step_seconds(even), rel=1e-4)
    assert costs.step_seconds(uneven) - 1e-3 > 3.9 * (costs.step_seconds(uneven[-1:]) - 1e-3)


def test_a_step_of_groups_of_different_sizes_shares_its_links():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=0.0)
    pair = Motif(Collective.ALL_REDUCE, (0, 4), ((0, MiB // 4),))
    triple = Motif(Collective.ALL_REDUCE, (1, 5, 6), ((0, MiB // 4),))
    together = costs.step_seconds((pair, triple))
    assert together > max(costs.seconds(pair), costs.seconds(triple)) * 1.5
    # the simulator's general step: every flow of both groups at once, as its own step would
    model = CostModel(TWO_NICS, channel=0)
    assert together == pytest.approx(model.groups_seconds(Collective.ALL_REDUCE, [(0, 4), (1, 5, 6)], [MiB, MiB]))
    assert model.groups_seconds(Collective.ALL_REDUCE, [(0, 4), (1, 5)], [MiB, MiB]) == pytest.approx(
        model.step_seconds(Collective.ALL_REDUCE, [[0, 4], [1, 5]], MiB))


def test_a_step_of_parts_where_one_is_empty_costs_the_others():
    costs = MotifCostModel(TWO_NICS, dispatch_seconds=1e-3)
    empty = Motif(Collective.ALL_REDUCE, (3, 7), ((100, 100),), channel=1)
    full = _pairs([1000] * 3)
    assert costs.step_seconds((empty,) + full) == pytest.approx(costs.step_seconds(full))
    assert costs.step_seconds((empty, empty)) == 0.0
