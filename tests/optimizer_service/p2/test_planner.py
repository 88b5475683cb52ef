import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.hardware.cost_model import Algorithm
from optimizer_service.p2.planner import Limits, Planner, synthesize_placements

A100_4N = load_topology("gcp-a100-4n")


@pytest.fixture(scope="module")
def report():
    return synthesize_placements(A100_4N, (4, 16), (0,), nbytes=2**28)


def test_every_placement_is_reported(report):
    assert [str(p.matrix) for p in report.placements] == ["[[1 4] [4 4]]", "[[2 2] [2 8]]", "[[4 1] [1 16]]"]
    assert [len(p.programs) for p in report.placements] == [3, 47, 3]


def test_flat_allreduce_is_the_one_step_program(report):
    for placement in report.placements:
        flat = [r for r in placement.programs if str(r.program) == "root InsideGroup AllReduce"]
        assert flat and flat[0].predicted_seconds == pytest.approx(placement.allreduce_seconds)


def test_programs_are_ranked_and_best_is_the_minimum(report):
    for placement in report.placements:
        times = [r.predicted_seconds for r in placement.programs]
        assert times == sorted(times)
    placement, program = report.best
    assert program.predicted_seconds == min(p.best.predicted_seconds for p in report.placements)


def test_placement_dominates_and_synthesis_helps_across_nodes(report):
    # P² Result 1: placement changes AllReduce time by orders of magnitude;
    # Result 5: a hierarchical program beats AllReduce when the reduction crosses nodes.
    inside, across, spread = report.placements
    assert across.allreduce_seconds / inside.allreduce_seconds > 100
    assert across.speedup > 1.2
    assert str(across.best.program) == \
        "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather"
    assert inside.speedup == pytest.approx(1.0)


def test_tree_algorithm_is_used(report):
    tree = synthesize_placements(A100_4N, (4, 16), (0,), nbytes=2**28, algorithm=Algorithm.TREE)
    assert tree.algorithm is Algorithm.TREE
    assert tree.placements[1].allreduce_seconds != report.placements[1].allreduce_seconds


def test_planner_reuse_gives_identical_results():
    planner = Planner()
    first = planner.synthesize(A100_4N, (4, 2, 8), (0, 2))
    second = planner.synthesize(A100_4N, (4, 2, 8), (0, 2))
    assert [[str(r.program) for r in p.programs] for p in first.placements] == \
        [[str(r.program) for r in p.programs] for p in second.placements]


def test_nothing_to_reduce():
    report = synthesize_placements(A100_4N, (1, 64), (0,))
    assert all(not p.programs and p.allreduce_seconds == 0 for p in report.placements)
    assert report.best is None


@pytest.mark.parametrize("limits,message", [
    (Limits(max_placements=2), "3 parallelism matrices, more than the bound of 2"),
    (Limits(max_synthesis_devices=2), "reduction group has 4 devices"),
    (Limits(max_devices=10), "64 devices, more than the bound of 10"),
    (Limits(max_program_size=4), "exceeds the bound of 4"),
    (Limits(max_states=5), "exceeded 5 states"),
])
def test_bounds_fail_fast_with_one_line(limits, message):
    with pytest.raises(SearchBoundError, match=message) as info:
        Planner(limits).synthesize(A100_4N, (4, 16), (0,))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs,message", [({"nbytes": 0}, "bytes per device"), ({"max_size": 0}, "size limit")])
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidInputError, match=message):
        synthesize_placements(A100_4N, (4, 16), (0,), **kwargs)
