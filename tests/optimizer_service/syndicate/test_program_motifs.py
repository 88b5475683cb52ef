"""P² programs as motif plans: every synthesized program of several placements is a valid all_reduce plan."""

import pytest

from optimizer_service.p2.lowering import PlacementMap
from optimizer_service.p2.planner import synthesize_placements
from optimizer_service.plan.lowered import LoweredProgram
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.syndicate.program_motifs import program_motifs
from tests.support.programs import EMULATED_CONFIGURATIONS as CONFIGURATIONS


@pytest.mark.parametrize("topology,axes,reduce", CONFIGURATIONS,
                         ids=[f"{t.name}-{a}-{r}" for t, a, r in CONFIGURATIONS])
def test_every_synthesized_program_computes_the_all_reduce(topology, axes, reduce):
    checked = 0
    devices = topology.device_count
    for placement in synthesize_placements(topology, axes, reduce, nbytes=2**20).placements:
        groups = PlacementMap.build(placement.matrix, reduce).reduction_groups.tolist()
        if len(groups) != 1:            # one reduction group: the plan's op group is the world
            continue
        for result in placement.programs:
            for elements in (4099, 3, 0, 10**9):
                plan = program_motifs(result.lowered, devices, elements, channel=0)
                op = OpPlan.of(OpKey(0, "all_reduce", elements * 4, tuple(range(devices))), plan)
                op.validate(elements)
                checked += 1
    assert checked > 0 or len(axes) > 1


def test_the_paper_hierarchical_program_becomes_three_stages():
    program = LoweredProgram.parse("ReduceScatter 1 {0,1,2,3} {4,5,6,7}; AllReduce 1/4 {0,4} {1,5} {2,6} {3,7}; "
                                   "AllGather 1/4 {0,1,2,3} {4,5,6,7}")
    plan = program_motifs(program, 8, 16)
    assert str(plan).count("->") == 2
    op = OpPlan.of(OpKey(0, "all_reduce", 64, tuple(range(8))), plan)
    op.validate(16)
    assert len(op.motifs) == 2 + 4 + 2
