"""The executor's data layout: which element ranges every member moves (pure)."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optimizer_service.catalog import load_topology
from optimizer_service.errors import LayoutError
from optimizer_service.p2.planner import synthesize_placements
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.layout import WHOLE, cut, element_ranges, merge, plan_layout
from optimizer_service.plan.lowered import LoweredProgram
from tests.support.programs import CONFIGURATIONS


def F(text):
    return Fraction(text)


@given(numel=st.integers(0, 10_000), parts=st.integers(1, 16), splits=st.integers(1, 3))
def test_cut_parts_partition_the_elements_exactly(numel, parts, splits):
    pieces = WHOLE
    for _ in range(splits - 1):  # a non-contiguous live set: every other part of a cut
        pieces = merge(cut(pieces, 3)[0] + cut(pieces, 3)[2])
    covered = [r for part in cut(pieces, parts) for r in element_ranges(part, numel)]
    expected = element_ranges(pieces, numel)
    flat = sorted(i for a, b in covered for i in range(a, b))
    assert flat == sorted(i for a, b in expected for i in range(a, b))
    sizes = [sum(b - a for a, b in element_ranges(part, numel)) for part in cut(pieces, parts)]
    assert max(sizes) - min(sizes) <= len(pieces)  # near-equal: one element per interval at most


def test_non_contiguous_chunks_stay_in_place():
    # root InsideGroup ReduceScatter; node Parallel(root) AllGather on 2 nodes x 2 devices
    program = LoweredProgram.parse(
        "ReduceScatter 1 {0,1,2,3}; AllGather 1/4 {0,2} {1,3}; AllGather 1/2 {0,1} {2,3}")
    steps = plan_layout(program, 4)
    gather = steps[1].move_of(0)
    assert gather.parts == (((F(0), F("1/4")),), ((F("1/2"), F("3/4")),))
    assert element_ranges(merge(gather.parts[0] + gather.parts[1]), 8) == ((0, 2), (4, 6))
    assert steps[2].move_of(3).parts[1] == ((F("1/4"), F("1/2")), (F("3/4"), F(1)))


@pytest.mark.parametrize("text,message", [
    ("ReduceScatter 1 {0,1}; AllReduce 1/2 {0,1}", "different data"),
    ("AllReduce 1 {0,1}; AllGather 1 {0,1}", "overlapping"),
    ("ReduceScatter 1 {0,1}", "leaves device 0"),
    ("AllReduce 1 {0,1} {1,2}", "two groups"),
    ("AllReduce 1 {0,9}", "outside"),
])
def test_programs_that_cannot_run_are_rejected_with_the_step(text, message):
    with pytest.raises(LayoutError, match=message):
        plan_layout(LoweredProgram.parse(text), 4)


@pytest.mark.parametrize("topology,axes,reduce", CONFIGURATIONS[:9])
def test_every_synthesized_program_has_a_layout(topology, axes, reduce):
    report = synthesize_placements(load_topology(topology) if isinstance(topology, str) else topology,
                                   axes, reduce, nbytes=2**20)
    for placement in report.placements:
        for ranked in placement.programs:
            steps = plan_layout(ranked.lowered, report.topology.device_count)
            for step, lowered in zip(steps, ranked.lowered.steps):
                for move in step.moves:
                    assert list(move.members) == sorted(move.members), "ring order is ascending"
                    if move.collective is Collective.REDUCE_SCATTER:
                        sizes = {sum(b - a for a, b in part) for part in move.parts}
                        assert sizes == {lowered.input_fraction / len(move.members)}
