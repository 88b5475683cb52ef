"""Sharding specs: text forms, validation and the slice each device holds (§2.2)."""

import pytest
from hypothesis import given, settings, strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.resharding import Box
from optimizer_service.resharding.mesh import Mesh
from optimizer_service.resharding.spec import DimSharding, ShardingSpec, parse_endpoint, shard_range


@pytest.mark.parametrize("text, canonical", [
    ("S^0RR", "S^0RR"), ("S0RR", "S^0RR"), ("S_0RR", "S^0RR"), ("RS^01R", "RS^01R"), ("RS01R", "RS^01R"),
    ("R S^{01} R", "RS^01R"), ("S^1S^0", "S^1S^0"), ("s_1rr", "S^1RR"), ("RRR", "RRR"), ("RRS^0", "RRS^0"),
])
def test_specs_parse_and_round_trip(text, canonical):
    spec = ShardingSpec.parse(text)
    assert str(spec) == canonical and ShardingSpec.parse(str(spec)) == spec


@given(st.lists(st.sampled_from(list(DimSharding)), min_size=1, max_size=6))
@settings(max_examples=80, deadline=None)
def test_every_valid_spec_round_trips(dims):
    used = [d for dim in dims for d in dim.mesh_dims]
    if len(used) != len(set(used)):
        with pytest.raises(InvalidInputError, match="twice"):
            ShardingSpec(tuple(dims))
        return
    spec = ShardingSpec(tuple(dims))
    assert ShardingSpec.parse(str(spec)) == spec


@pytest.mark.parametrize("text, message", [
    ("S^0S^0R", "shards over mesh dimension 0 twice"),
    ("S^01S^1", "shards over mesh dimension 1 twice"),
    ("SRR", "'S' needs the mesh dimensions"),
    ("S^2RR", "needs the mesh dimensions it shards over"),
    ("XRR", "cannot read 'XRR'"),
    ("", "one letter per tensor dimension"),
])
def test_bad_specs_are_one_line_errors(text, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        ShardingSpec.parse(text)
    assert "\n" not in str(error.value)


def test_specs_are_checked_against_tensor_and_mesh():
    with pytest.raises(InvalidInputError, match="has 3 dimensions but the tensor 4x4 has 2"):
        ShardingSpec.parse("S^0RR").check((4, 4), (2, 2))
    with pytest.raises(InvalidInputError, match="uses S\\^1, which needs a 2-D mesh"):
        ShardingSpec.parse("S^1R").check((4, 4), (4,))
    with pytest.raises(InvalidInputError, match="uses S\\^01, which needs a 2-D mesh"):
        ShardingSpec.parse("S^01R").check((4, 4), (4,))
    ShardingSpec.parse("S^0R").check((4, 4), (4,))


def test_figure2_layouts():
    """Figure 2: S^01R on [[0,1],[2,3]] gives device i row i; S^0R on [[4,5],[6,7]]
    gives devices 4 and 5 the top 2x4 slice."""
    boxes = ShardingSpec.parse("S^01R").boxes((4, 4), Mesh.parse("[[0,1],[2,3]]"))
    assert {rank: str(box) for rank, box in boxes.items()} == {0: "0:1,0:4", 1: "1:2,0:4", 2: "2:3,0:4", 3: "3:4,0:4"}
    boxes = ShardingSpec.parse("S^0R").boxes((4, 4), Mesh.parse("[[4,5],[6,7]]"))
    assert {rank: str(box) for rank, box in boxes.items()} == {4: "0:2,0:4", 5: "0:2,0:4", 6: "2:4,0:4", 7: "2:4,0:4"}


def test_two_dimensional_sharding_on_a_2x4_mesh():
    mesh = Mesh.parse("[[0,1,2,3],[4,5,6,7]]")
    boxes = ShardingSpec.parse("S^1S^0R").boxes((8, 4, 2), mesh)
    assert str(boxes[0]) == "0:2,0:2,0:2" and str(boxes[6]) == "4:6,2:4,0:2"
    boxes = ShardingSpec.parse("RS^01R").boxes((2, 16, 2), mesh)
    assert [str(boxes[r]).split(",")[1] for r in mesh.ranks] == [f"{2 * i}:{2 * i + 2}" for i in range(8)]


def test_uneven_shards_are_padded_and_the_pad_is_not_held():
    """Case 6: 1024 rows over 3 mesh rows: shards of ceil(1024/3) = 342, the last clipped to 340."""
    assert [shard_range(1024, 3, s) for s in range(3)] == [(0, 342), (342, 684), (684, 1024)]
    assert [shard_range(3, 4, s) for s in range(4)] == [(0, 1), (1, 2), (2, 3), (3, 3)]
    assert [shard_range(5, 4, s) for s in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    boxes = ShardingSpec.parse("S^0R").boxes((5, 2), Mesh.parse("[0,1,2,3]"))
    assert boxes[3] == Box((5, 0), (5, 2)) and boxes[3].empty


def test_cut_points():
    spec = ShardingSpec.parse("S^0S^1R")
    assert spec.cut_points((1024, 8, 3), (3, 4)) == ((0, 342, 684, 1024), (0, 2, 4, 6, 8), (0, 3))


def test_endpoints_parse():
    spec, mesh = parse_endpoint("S^0RR@2x4")
    assert str(spec) == "S^0RR" and mesh == (2, 4)
    spec, mesh = parse_endpoint("S^0R@[[0,1],[2,3]]")
    assert str(spec) == "S^0R" and mesh == Mesh((2, 2), (0, 1, 2, 3))
    for bad in ("S^0RR", "@2x4", "S^0RR@"):
        with pytest.raises(InvalidInputError, match="is not SPEC@MESH"):
            parse_endpoint(bad)
