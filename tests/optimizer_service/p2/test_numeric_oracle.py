"""Every synthesized program, lowered to the full system, computes exactly the
reduction on numbers (an oracle that does not use the state-matrix semantics)."""

import numpy as np
import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.p2.planner import synthesize_placements
from tests.support.numeric_oracle import OracleError, check_program, reduction_partners, run
from tests.support.programs import CONFIGURATIONS


@pytest.mark.parametrize("topology,axes,reduce", CONFIGURATIONS,
                         ids=[f"{t if isinstance(t, str) else t.name}-{a}-r{r}" for t, a, r in CONFIGURATIONS])
def test_every_synthesized_program_reduces_exactly(topology, axes, reduce):
    topo = load_topology(topology) if isinstance(topology, str) else topology
    report = synthesize_placements(topo, axes, reduce, nbytes=2**20)
    rng = np.random.default_rng(7)
    checked = 0
    for placement in report.placements:
        assert placement.programs, f"no program for {placement.matrix}"
        for ranked in placement.programs:
            steps = [(s.collective.value, s.groups) for s in ranked.lowered.steps]
            try:
                check_program(steps, placement.matrix.to_lists(), list(report.reduce), rng)
            except OracleError as exc:
                pytest.fail(f"{placement.matrix} '{ranked.program}': {exc}")
            checked += 1
    assert checked == sum(len(p.programs) for p in report.placements)


def test_oracle_rejects_figure_4_programs():
    # Figure 4a: ReduceScatter then AllReduce over the same pairs sums the two halves together.
    rows = [[1, 2], [1, 2]]  # 2 axes on [1 4]... reduce axis 1 over groups {0,1},{2,3}
    rng = np.random.default_rng(0)
    scatter_then_reduce = [("ReduceScatter", [[0, 1], [2, 3]]), ("AllReduce", [[0, 1], [2, 3]])]
    with pytest.raises(OracleError):
        check_program(scatter_then_reduce, rows, [1], rng)
    # Figure 4b: AllReduce twice over the same devices counts their data twice.
    twice = [("AllReduce", [[0, 1], [2, 3]]), ("AllReduce", [[0, 1], [2, 3]])]
    with pytest.raises(OracleError):
        check_program(twice, rows, [1], rng)
    # ... while the plain AllReduce passes.
    check_program([("AllReduce", [[0, 1], [2, 3]])], rows, [1], rng)


def test_oracle_partners_follow_the_device_numbering():
    # P² Figure 2b: [[1 2 2 1] [1 1 1 4]] on [1 2 2 4]: each CPU is one data replica,
    # its 4 GPUs the 4 parameter shards. Reducing over shards pairs the GPUs of a CPU.
    partners = reduction_partners([[1, 2, 2, 1], [1, 1, 1, 4]], [1])
    assert partners[0] == [0, 1, 2, 3]
    assert partners[5] == [4, 5, 6, 7]
    # Reducing over data parallelism pairs GPU i of every CPU.
    partners = reduction_partners([[1, 2, 2, 1], [1, 1, 1, 4]], [0])
    assert partners[1] == [1, 5, 9, 13]


def test_oracle_executes_collectives_like_a_library():
    initial = np.arange(8, dtype=np.int64).reshape(2, 4)  # device 0: 0..3, device 1: 4..7; 2 chunks of 2
    after = run([("ReduceScatter", [[0, 1]])], initial, chunks=2)
    assert (after[0].labels, after[0].data.tolist()) == ([0], [[4, 6]])
    assert (after[1].labels, after[1].data.tolist()) == ([1], [[8, 10]])
    after = run([("ReduceScatter", [[0, 1]]), ("AllGather", [[0, 1]])], initial, chunks=2)
    assert [b.data.reshape(-1).tolist() for b in after] == [[4, 6, 8, 10]] * 2
    after = run([("Reduce", [[0, 1]]), ("Broadcast", [[0, 1]])], initial, chunks=2)
    assert [b.data.reshape(-1).tolist() for b in after] == [[4, 6, 8, 10]] * 2


def test_oracle_orders_gathered_chunks_by_label():
    # Device 1 holds chunk 1, device 0 chunk 0: gathering in member order (1, 0)
    # delivers [c1, c0]; the executor lays them out as [c0, c1].
    initial = np.arange(8, dtype=np.int64).reshape(2, 4)
    after = run([("ReduceScatter", [[0, 1]]), ("AllGather", [[1, 0]])], initial, chunks=2)
    assert after[0].labels == [0, 1]
    assert after[0].data.reshape(-1).tolist() == [4, 6, 8, 10]
