import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.errors import SearchBoundError
from optimizer_service.hardware.topology import Level
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.planner import synthesize_placements
from optimizer_service.p2.synthesis import candidate_instructions, synthesize


def hierarchy(*cards, names=("root", "node", "gpu", "lane")):
    return SynthesisHierarchy(tuple(Level(n, c) for n, c in zip(names, (1, *cards))))


def texts(result):
    return [str(p) for p in result.programs()]


@pytest.mark.parametrize("size", [2, 4, 16, 64])
def test_one_level_has_exactly_the_three_programs(size):
    assert texts(synthesize(hierarchy(size))) == [
        "root InsideGroup AllReduce",
        "root InsideGroup ReduceScatter; root InsideGroup AllGather",
        "root InsideGroup Reduce; root InsideGroup Broadcast",
    ]


@pytest.mark.parametrize("cards", [(2, 2), (2, 8), (4, 4), (2, 16), (4, 8)])
def test_two_levels_have_the_papers_47_programs(cards):
    result = synthesize(hierarchy(*cards))
    assert len(result) == 47
    programs = texts(result)
    # Figure 10's common optimal programs are among them.
    assert "node InsideGroup Reduce; node Master(root) AllReduce; node InsideGroup Broadcast" in programs
    assert "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather" in programs
    # Figure 3b.
    assert "node InsideGroup AllReduce; node Parallel(root) AllReduce" in programs


@pytest.mark.parametrize("topology,axes,reduce,total", [
    # Appendix A "total programs" column (2 and 4 nodes of A100, 4 nodes of V100).
    ("gcp-a100-2n", (32,), (0,), 47),
    ("gcp-a100-2n", (2, 16), (0,), 6),
    ("gcp-a100-2n", (2, 16), (1,), 50),
    ("gcp-a100-2n", (8, 4), (0,), 50),
    ("gcp-a100-2n", (16, 2), (1,), 6),
    ("gcp-a100-4n", (64,), (0,), 47),
    ("gcp-a100-4n", (2, 32), (1,), 94),
    ("gcp-a100-4n", (4, 16), (0,), 53),
    ("gcp-a100-4n", (4, 16), (1,), 97),
    ("gcp-a100-4n", (8, 8), (0,), 97),
    ("gcp-a100-4n", (16, 2, 2), (0, 2), 188),
    ("gcp-a100-4n", (8, 2, 4), (0, 2), 235),
    ("gcp-a100-4n", (4, 2, 8), (0, 2), 235),
    ("gcp-v100-4n", (8, 2, 2), (0, 2), 188),
    ("gcp-v100-4n", (32,), (0,), 47),
])
def test_program_totals_match_appendix_a(topology, axes, reduce, total):
    report = synthesize_placements(load_topology(topology), axes, reduce)
    assert sum(len(p.programs) for p in report.placements) == total


def test_three_levels():
    result = synthesize(hierarchy(2, 2, 2))
    assert len(result) == 107
    programs = texts(result)
    # Hierarchical AllReduce level by level (innermost first), and the two-level
    # ReduceScatter-AllReduce-AllGather applied at the node level.
    assert "gpu InsideGroup AllReduce; gpu Parallel(node) AllReduce; node Parallel(root) AllReduce" in programs
    assert "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather" in programs


def test_enumeration_is_deterministic_and_in_increasing_size():
    first = synthesize(hierarchy(2, 4))
    second = synthesize(hierarchy(2, 4))
    assert first.sequences == second.sequences
    sizes = [p.size for p in first.programs()]
    assert sizes == sorted(sizes)
    assert all(p.size <= 5 for p in first.programs())


def test_larger_size_limit_finds_more():
    assert len(synthesize(hierarchy(2, 2), max_size=6)) > 47
    assert len(synthesize(hierarchy(2, 2), max_size=1)) == 1


def test_instructions_are_distinct_group_patterns_in_smallest_form():
    instructions = candidate_instructions(hierarchy(2, 8))
    assert [(i.slice, i.kind.value, i.level) for i in instructions] == [
        (0, "InsideGroup", None), (1, "InsideGroup", None), (1, "Parallel", 0), (1, "Master", 0)]
    assert len({i.groups for i in instructions}) == len(instructions)


def test_state_bound_stops_the_search():
    with pytest.raises(SearchBoundError, match="exceeded 10 states"):
        synthesize(hierarchy(2, 2, 2), max_states=10)


def test_a_single_device_has_nothing_to_reduce():
    assert len(synthesize(SynthesisHierarchy((Level("root", 1),)))) == 0
