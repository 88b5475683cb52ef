from fractions import Fraction

import numpy as np
import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.lowering import PlacementMap, lower_program
from optimizer_service.p2.placement import ParallelismMatrix, enumerate_matrices
from optimizer_service.p2.program import Program
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.lowered import LoweredProgram, LoweredStep
from tests.support.numeric_oracle import reduction_partners

MATRIX = ParallelismMatrix(((2, 2), (2, 8)))  # [4 16] on 4 nodes x 16 GPUs, reduce axis 0
HIERARCHY = SynthesisHierarchy.for_reduction(MATRIX, ["node", "gpu"], [0])


def test_pattern_repeats_over_every_reduction_group():
    # Figure 6: the synthesized pattern is applied to every reduction group.
    placement = PlacementMap.build(MATRIX, [0])
    groups = placement.reduction_groups
    assert groups.shape == (16, 4)
    assert sorted(groups.reshape(-1).tolist()) == list(range(64))
    assert groups[0].tolist() == [0, 8, 32, 40]  # nodes 0 and 2, GPUs 0 and 8


@pytest.mark.parametrize("hierarchy,axes,reduce", [((4, 16), (4, 16), [0]), ((4, 16), (2, 2, 16), [0, 2]),
                                                   ((2, 2, 4), (2, 4, 2), [1])])
def test_reduction_groups_agree_with_the_oracles_numbering(hierarchy, axes, reduce):
    for matrix in enumerate_matrices(hierarchy, axes):
        placement = PlacementMap.build(matrix, reduce)
        partners = reduction_partners(matrix.to_lists(), reduce)
        for group in placement.reduction_groups.tolist():
            assert group == sorted(group), "synthesis order is ascending device order"
            assert all(partners[d] == group for d in group)


def test_reducescatter_allreduce_allgather_lowering():
    program = Program.parse("node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather")
    lowered = lower_program(program, HIERARCHY, MATRIX, [0])
    collectives = [s.collective for s in lowered.steps]
    assert collectives == [Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.ALL_GATHER]
    assert [s.input_fraction for s in lowered.steps] == [1, Fraction(1, 2), Fraction(1, 2)]
    assert lowered.steps[0].groups[0] == (0, 8)      # GPUs 0 and 8 of node 0
    assert lowered.steps[1].groups[0] == (0, 32)     # GPU 0 of nodes 0 and 2
    assert len(lowered.steps[1].groups) == 32


def test_groups_without_data_are_dropped():
    after_reduce = lower_program(Program.parse(
        "node InsideGroup Reduce; node Parallel(root) AllReduce; node InsideGroup Broadcast"), HIERARCHY, MATRIX, [0])
    with_master = lower_program(Program.parse(
        "node InsideGroup Reduce; node Master(root) AllReduce; node InsideGroup Broadcast"), HIERARCHY, MATRIX, [0])
    # After the Reduce only the roots hold data: the Parallel(root) AllReduce runs on the roots alone.
    assert after_reduce == with_master
    assert len(after_reduce.steps[1].groups) == 16


def test_invalid_program_cannot_be_lowered():
    with pytest.raises(InvalidInputError, match="step 2"):
        lower_program(Program.parse("node InsideGroup ReduceScatter; node InsideGroup AllReduce"),
                      HIERARCHY, MATRIX, [0])


def test_text_forms_round_trip():
    step = LoweredStep(Collective.ALL_GATHER, ((0, 8), (1, 9)), Fraction(1, 4))
    assert str(step) == "AllGather 1/4 {0,8} {1,9}"
    assert LoweredStep.parse(str(step)) == step
    program = lower_program(Program.parse("node InsideGroup ReduceScatter; node Parallel(root) AllReduce; "
                                          "node InsideGroup AllGather"), HIERARCHY, MATRIX, [0])
    assert LoweredProgram.parse(str(program)) == program


def test_place_sorts_groups_by_first_device():
    placement = PlacementMap.build(MATRIX, [0])
    placed = placement.place(((0, 1), (2, 3)))
    assert np.all(np.diff(placed[:, 0]) > 0)
