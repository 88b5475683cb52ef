"""Meshes, their text forms and automatic placement (§2.2, App. A.6)."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.resharding.mesh import Mesh, host_of, parse_mesh, parse_mesh_shape, place_meshes
from tests.optimizer_service.resharding.topologies import emulated


@pytest.mark.parametrize("text", ["[[0,1,2,3],[4,5,6,7]]", "[0,1,2,3]", "[[4,5],[6,7]]", "[[9]]"])
def test_explicit_mesh_text_round_trips(text):
    mesh = Mesh.parse(text)
    assert str(mesh) == text and Mesh.parse(str(mesh)) == mesh


def test_a_mesh_knows_its_rows_positions_and_hosts():
    mesh = Mesh.parse("[[0, 1], [2, 3]]")
    assert mesh.shape == (2, 2) and mesh.rows == ((0, 1), (2, 3))
    assert mesh.positions() == [(0, (0, 0)), (1, (0, 1)), (2, (1, 0)), (3, (1, 1))]
    assert mesh.hosts(2) == (0, 1) and mesh.hosts(4) == (0,)
    assert Mesh.parse("[5,6,7]").positions() == [(5, (0,)), (6, (1,)), (7, (2,))]


def test_shapes_parse():
    assert parse_mesh_shape("2x4") == (2, 4) and parse_mesh_shape(" 8 ") == (8,)
    assert parse_mesh("2x4") == (2, 4)
    assert parse_mesh("[[0,1],[2,3]]") == Mesh((2, 2), (0, 1, 2, 3))


@pytest.mark.parametrize("text, message", [
    ("2x4x2", "has 3 dimensions"),
    ("0x4", "every dimension >= 1"),
    ("two", "is not like 2x4"),
    ("[[0,1],[2]]", "different lengths"),
    ("[[0,1],[1,2]]", "lists rank 1 more than once"),
    ("[[0,1],[2,3]", "is not a shape like 2x4"),
])
def test_bad_meshes_are_one_line_errors(text, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        parse_mesh(text)
    assert "\n" not in str(error.value)


def test_shapes_are_placed_a_row_per_host_source_first():
    topology = emulated(5, 4)
    src, dst = place_meshes((2, 4), (3, 4), topology)
    assert str(src) == "[[0,1,2,3],[4,5,6,7]]"
    assert str(dst) == "[[8,9,10,11],[12,13,14,15],[16,17,18,19]]"
    src, dst = place_meshes((2, 3), (3, 2), topology)
    assert str(src) == "[[0,1,2],[4,5,6]]" and str(dst) == "[[8,9],[12,13],[16,17]]"
    assert [host_of(r, topology) for r in dst.ranks] == [2, 2, 3, 3, 4, 4]


def test_a_one_dimensional_shape_fills_whole_hosts():
    src, dst = place_meshes((6,), (2,), emulated(4, 4))
    assert src.ranks == (0, 1, 2, 3, 4, 5) and dst.ranks == (8, 9)


def test_shapes_go_around_an_explicit_mesh():
    src, dst = place_meshes(Mesh.parse("[[4,5],[6,7]]"), (1, 4), emulated(3, 4))
    assert str(src) == "[[4,5],[6,7]]" and str(dst) == "[[0,1,2,3]]"


@pytest.mark.parametrize("src, dst, message", [
    ((2, 8), (2, 4), "puts 8 devices on a host, but topology 'emu-4x4' has 4 per host"),
    ((2, 4), (3, 4), "need 5 free hosts"),
    (Mesh.parse("[[0,1],[2,3]]"), Mesh.parse("[[3,4]]"), r"ranks \[3\] are in both meshes"),
    (Mesh.parse("[[0,1],[2,16]]"), (1, 4), "names rank 16, outside topology"),
])
def test_meshes_that_do_not_fit_are_refused(src, dst, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        place_meshes(src, dst, emulated(4, 4))
    assert "\n" not in str(error.value)
