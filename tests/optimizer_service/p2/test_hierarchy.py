import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Level
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.placement import ParallelismMatrix
from optimizer_service.p2.program import Form

# P² Figure 2a / Table 2: [(rack,1), (server,2), (CPU,2), (GPU,4)]; CPUs A, B in server 0, C, D in server 1.
FIGURE_2A = SynthesisHierarchy((Level("rack", 1), Level("server", 2), Level("CPU", 2), Level("GPU", 4)))
NAMES = [f"{cpu}{gpu}" for cpu in "ABCD" for gpu in range(4)]


def named(groups):
    return [{NAMES[d] for d in g} for g in groups]


def sets(text):
    return [set(group.split()) for group in text.split("|")]


@pytest.mark.parametrize("slice_name,form,expected", [
    ("CPU", "InsideGroup", "A0 A1 A2 A3|B0 B1 B2 B3|C0 C1 C2 C3|D0 D1 D2 D3"),
    ("CPU", "Parallel(server)", "A0 B0|A1 B1|A2 B2|A3 B3|C0 D0|C1 D1|C2 D2|C3 D3"),
    ("CPU", "Parallel(rack)", "A0 B0 C0 D0|A1 B1 C1 D1|A2 B2 C2 D2|A3 B3 C3 D3"),
    ("CPU", "Master(rack)", "A0 B0 C0 D0"),
    ("server", "InsideGroup", "A0 A1 A2 A3 B0 B1 B2 B3|C0 C1 C2 C3 D0 D1 D2 D3"),
    ("server", "Parallel(rack)", "A0 C0|A1 C1|A2 C2|A3 C3|B0 D0|B1 D1|B2 D2|B3 D3"),
    ("rack", "InsideGroup", " ".join(NAMES)),
])
def test_table_2_groups(slice_name, form, expected):
    groups = FIGURE_2A.groups(slice_name, Form.parse(form))
    assert sorted(map(sorted, named(groups))) == sorted(map(sorted, sets(expected)))
    for group in groups:
        assert list(group) == sorted(group), "members ascend, so the root is the first device"


def test_master_keeps_the_first_group_per_instance():
    # Our reading of Master(e): first Parallel(e) group under each instance of e.
    assert named(FIGURE_2A.groups("CPU", Form.parse("Master(server)"))) == [{"A0", "B0"}, {"C0", "D0"}]


def test_form_level_must_be_an_ancestor():
    with pytest.raises(InvalidInputError, match="ancestor"):
        FIGURE_2A.groups("server", Form.parse("Parallel(CPU)"))
    with pytest.raises(InvalidInputError, match="not in the synthesis hierarchy"):
        FIGURE_2A.groups("switch", Form.parse("InsideGroup"))


def test_table_1_collapses_factors_of_the_same_level():
    # Table 1, second example: reduction axes 0 and 2 of [[1 2 3] [4 5 6] [7 8 9]] → [7 16 27].
    matrix = ParallelismMatrix(((1, 2, 3), (4, 5, 6), (7, 8, 9)))
    hierarchy = SynthesisHierarchy.for_reduction(matrix, ["a", "b", "c"], [0, 2])
    assert hierarchy.cardinalities == (1, 7, 16, 27)
    # First example: reduction axis [1 2 1 2] of [[1 1 2 2] [1 2 1 2]] keeps the non-trivial factors.
    matrix = ParallelismMatrix(((1, 1, 2, 2), (1, 2, 1, 2)))
    hierarchy = SynthesisHierarchy.for_reduction(matrix, ["rack", "server", "CPU", "GPU"], [1])
    assert str(hierarchy) == "[(root, 1), (server, 2), (GPU, 2)]"


def test_text_form_round_trips():
    assert SynthesisHierarchy.parse(str(FIGURE_2A)) == FIGURE_2A
