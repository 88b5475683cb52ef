"""Execution-plan options (Syndicate §4.2): every option computes its op, moves its bytes, and uses its channels."""

import numpy as np
import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op, motifs_of
from optimizer_service.plan.numeric import execute
from optimizer_service.syndicate.options import SEGMENTS, library_option, options_for, p2_programs
from optimizer_service.syndicate.transforms import moved_elements

TOPOLOGY = load_topology("hgx2-4n")     # 4 nodes x 8, two channels


def buffers(kind, ranks, elements, rng):
    shape = (len(ranks), elements) if kind is Collective.ALL_TO_ALL else (elements,)
    return {r: rng.integers(-50, 50, size=shape).astype(float) for r in ranks}


@pytest.mark.parametrize("kind", list(Collective))
def test_every_option_reaches_the_collectives_result(kind):
    rng = np.random.default_rng(1)
    ranks = tuple(range(16))
    op = comm_op(kind, ranks, 64)
    data = buffers(kind, ranks, 64, rng)
    expected = execute(op, data)
    options = options_for(op, TOPOLOGY)
    assert len({o.name for o in options}) == len(options)
    for option in options:
        got = execute(option.plan, data)
        for r in ranks:
            assert np.array_equal(got[r], expected[r]), (option.name, r)


@pytest.mark.parametrize("kind", list(Collective))
def test_the_library_option_is_every_ops_first(kind):
    op = comm_op(kind, tuple(range(16)), 64, 2)
    first = options_for(op, TOPOLOGY)[0]
    assert library_option(op, TOPOLOGY) == first and first.channel == "ch0" and first.segments == 1


def test_all_reduce_families_segments_and_channels():
    op = comm_op(Collective.ALL_REDUCE, range(32), 4096)
    names = {o.name for o in options_for(op, TOPOLOGY)}
    assert {"ring@ch0", "ring@ch1", "tree2@ch0", "tree8@ch1", "ring/seg4@split1", "tree2/seg8@split7"} <= names
    assert {o.split("/")[0].split("@")[0] for o in names} == {"ring", "tree2", "tree8"}
    segments = {int(n.split("/seg")[1].split("@")[0]) if "/seg" in n else 1 for n in names}
    assert segments == set(SEGMENTS)


def test_segmented_and_splined_options_move_exactly_the_ops_bytes():
    op = comm_op(Collective.ALL_TO_ALL, range(32), 1000)
    for option in options_for(op, TOPOLOGY):
        assert moved_elements(option.plan) == moved_elements(op), option.name
    ar = comm_op(Collective.ALL_REDUCE, range(32), 1000)
    ring = {o.name: o for o in options_for(ar, TOPOLOGY)}
    for name in ("ring@ch0", "ring/seg8@ch1", "ring/seg4@split3"):
        assert moved_elements(ring[name].plan) == moved_elements(ar)


def test_splits_put_that_many_segments_on_the_second_channel():
    op = comm_op(Collective.ALL_GATHER, range(8), 800)
    option = next(o for o in options_for(op, TOPOLOGY) if o.name == "whole/seg8@split3")
    assert [m.channel for m in motifs_of(option.plan)] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert option.segments == 8 and option.channel == "split3" and option.base == "whole"


def test_all_to_all_splines_halve_the_window():
    op = comm_op(Collective.ALL_TO_ALL, range(32), 100)
    bases = {o.base for o in options_for(op, TOPOLOGY)}
    assert bases == {"a2a", "spline16", "spline8", "spline4", "spline2", "spline1"}


def test_p2_programs_are_offered_for_all_reduces_over_every_device():
    op = comm_op(Collective.ALL_REDUCE, range(32), 1 << 16)
    programs = p2_programs(op, TOPOLOGY)
    assert len(programs) == 2
    rng = np.random.default_rng(2)
    data = buffers(Collective.ALL_REDUCE, range(32), 1 << 16, rng)
    for program in programs:
        got = execute(program, data)
        assert all(np.array_equal(got[r], sum(data.values())) for r in range(32))
    assert p2_programs(comm_op(Collective.ALL_REDUCE, range(8), 64), TOPOLOGY) == []
    assert p2_programs(comm_op(Collective.ALL_TO_ALL, range(32), 64), TOPOLOGY) == []
