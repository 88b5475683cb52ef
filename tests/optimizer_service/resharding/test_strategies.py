"""One unit task's strategies priced with the cost model (§3.1, Figure 3):
the paper's formulas where only the NIC costs time."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.plan.resharding import Strategy
from optimizer_service.resharding.strategies import UnitTaskPricer
from tests.optimizer_service.resharding.topologies import emulated, two_level

SENDER = 0
TWO_HOSTS = [(4, 5, 6, 7), (8, 9, 10, 11)]          # A = 2 receiver hosts of B = 4 devices
NBYTES = 1_000_000                                   # t = 1 s over a 1 MB/s NIC


def price(strategy, groups=TWO_HOSTS, nbytes=NBYTES, topology=None, **options):
    pricer = UnitTaskPricer(CostModel(topology or two_level(3, 4)), strategy, **options)
    return pricer.price(SENDER, groups, nbytes)


def test_send_recv_sends_the_slice_to_every_device():
    """T^st(A, B) = A·B·t."""
    assert price(Strategy.SEND_RECV).seconds == pytest.approx(8.0, rel=1e-6)


def test_local_allgather_sends_one_copy_per_host():
    """T^srla(A, B) = A·t (the intra-host all-gather is on the fast loopback)."""
    assert price(Strategy.LOCAL_ALLGATHER).seconds == pytest.approx(2.0, rel=1e-3)


def test_global_allgather_sends_one_copy_then_gathers_across_hosts():
    """T^srga ≈ 2t: one copy out of the sender, then a ring all-gather whose
    cross-host edges carry (n−1)/n of the slice."""
    assert price(Strategy.GLOBAL_ALLGATHER).seconds == pytest.approx(1.0 + 7 / 8, rel=1e-3)


def test_broadcast_pipelines_partitions_along_the_chain():
    """Without latency every extra partition helps: T = t + (A−1)·t/K with the
    largest K allowed (the first partition crosses A NIC hops)."""
    priced = price(Strategy.BROADCAST, max_partitions=100, min_partition_bytes=1)
    assert priced.partitions == 100
    assert priced.seconds == pytest.approx(1.0 + 1.0 / 100, rel=1e-6)


def test_broadcast_chooses_k_against_message_latency():
    """With a 1 ms NIC latency T(K) = (K+1)·α + t + t/K, smallest at K = 32."""
    topology = two_level(3, 4, nic_latency=1e-3)
    priced = price(Strategy.BROADCAST, topology=topology, min_partition_bytes=1)
    assert priced.partitions == 32
    assert priced.seconds == pytest.approx(33e-3 + 1.0 + 1.0 / 32, rel=1e-6)


def test_broadcast_partitions_are_not_smaller_than_the_minimum():
    assert price(Strategy.BROADCAST, nbytes=64 * 1024, min_partition_bytes=16 * 1024).partitions == 4
    assert price(Strategy.BROADCAST, nbytes=1000, min_partition_bytes=16 * 1024).partitions == 1


def test_one_receiver_is_not_split():
    topology = two_level(3, 4, nic_latency=1e-3)
    priced = price(Strategy.BROADCAST, groups=[(4,)], topology=topology, min_partition_bytes=1)
    assert priced.partitions == 1 and priced.seconds == pytest.approx(1.001, rel=1e-9)


@pytest.mark.parametrize("groups", [TWO_HOSTS, [(4, 5)], [(4,), (8,)], [(4, 5, 6, 7), (8, 9)]])
def test_broadcast_is_never_slower_on_the_emulated_cluster(groups):
    """§3.1: broadcast is the best of the four for a unit task on hosts with one NIC."""
    topology = emulated(3, 4)
    prices = {s: price(s, groups=groups, topology=topology).seconds for s in Strategy}
    assert prices[Strategy.BROADCAST] <= min(prices.values()) * (1 + 1e-9)
    assert prices[Strategy.SEND_RECV] >= prices[Strategy.LOCAL_ALLGATHER] * (1 - 1e-9)


def test_every_strategy_takes_at_least_a_copy_through_a_receiving_nic():
    topology = emulated(3, 4)
    t = NBYTES / (200e6 / 8)
    for strategy in Strategy:
        assert price(strategy, topology=topology).seconds >= t


def test_bad_tasks_are_refused():
    with pytest.raises(InvalidInputError, match="both send and receive"):
        price(Strategy.BROADCAST, groups=[(0, 5)])
    with pytest.raises(InvalidInputError, match="at least one receiver"):
        price(Strategy.BROADCAST, groups=[])
    assert price(Strategy.SEND_RECV, nbytes=0).seconds == 0.0
