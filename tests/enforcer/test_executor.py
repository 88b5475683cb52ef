"""Multiproc (gloo, loopback): the executor and its point-to-point collectives
give exactly the results of gloo's own collectives."""

import pytest

from optimizer_service.p2.lowering import PlacementMap
from optimizer_service.p2.planner import synthesize_placements
from tests.enforcer import ranks
from tests.support.multiproc import run_world
from tests.support.programs import EMULATED_CONFIGURATIONS as CONFIGURATIONS

# Uneven sizes on purpose: nothing divides by the chunk counts, and 3 < 8 leaves empty parts.
SIZES = [4099, 3, 0]


@pytest.mark.multiproc
@pytest.mark.parametrize("topology,axes,reduce", CONFIGURATIONS,
                         ids=[f"{t.name}-{a}-r{r}" for t, a, r in CONFIGURATIONS])
def test_every_program_equals_the_flat_allreduce(topology, axes, reduce):
    report = synthesize_placements(topology, axes, reduce, nbytes=2**20)
    cases = [([str(r.lowered) for r in placement.programs],
              PlacementMap.build(placement.matrix, reduce).reduction_groups.tolist())
             for placement in report.placements]
    programs = sum(len(texts) for texts, _ in cases)
    assert programs > 0
    counts = run_world(topology.device_count, ranks.check_placements, cases, SIZES)
    assert counts == [programs * len(SIZES)] * topology.device_count


@pytest.mark.multiproc
@pytest.mark.parametrize("world,members,sizes,dtype", [
    (4, [0, 1, 2, 3], [5, 5, 5, 5], "float32"),
    (4, [0, 1, 2, 3], [3, 0, 7, 1], "float64"),
    (5, [0, 1, 2, 3, 4], [2, 2, 2, 2, 2], "int64"),
    (5, [3, 0, 4], [1, 6, 0], "float32"),        # a subgroup in non-sorted ring order
    (6, [1, 5], [300_000, 299_999], "float32"),  # several chain segments, uneven
])
def test_point_to_point_collectives_equal_gloo(world, members, sizes, dtype):
    run_world(world, ranks.check_p2p, members, sizes, dtype)
