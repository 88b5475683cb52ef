"""Unit tasks (§2.2, Appendix B): Figure 2's examples, hand-computed 3-D cases,
the uneven case 6, and a property over random meshes and specs."""

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from optimizer_service.errors import SearchBoundError
from optimizer_service.resharding.mesh import Mesh, place_meshes
from optimizer_service.resharding.spec import DimSharding, ShardingSpec
from optimizer_service.resharding.unit_tasks import UnitTask, decompose
from tests.optimizer_service.resharding.topologies import emulated

MESH_A = Mesh.parse("[[0,1],[2,3]]")
MESH_B = Mesh.parse("[[4,5],[6,7]]")
S = ShardingSpec.parse


def texts(tasks):
    return [str(task) for task in tasks]


def test_figure2_task1_has_four_unit_tasks():
    """Spec 1 (S^01R on Mesh_A) to spec 2 (S^0R on Mesh_B): the first unit task
    sends slice [0, 1, 2, 3] (row 0) to devices 4 and 5."""
    tasks = decompose((4, 4), S("S^01R"), MESH_A, S("S^0R"), MESH_B, devices_per_host=2)
    assert texts(tasks) == [
        "unit 0 [0:1,0:4] 16B from h0:0 to h2:4,5",
        "unit 1 [1:2,0:4] 16B from h0:1 to h2:4,5",
        "unit 2 [2:3,0:4] 16B from h1:2 to h3:6,7",
        "unit 3 [3:4,0:4] 16B from h1:3 to h3:6,7",
    ]


def test_figure2_task2_has_two_unit_tasks():
    """Spec 2 (S^0R on Mesh_B) to spec 3 (S^0R on Mesh_A): the first unit task
    sends the top 2x4 slice to devices 0 and 1."""
    tasks = decompose((4, 4), S("S^0R"), MESH_B, S("S^0R"), MESH_A, devices_per_host=2)
    assert texts(tasks) == [
        "unit 0 [0:2,0:4] 32B from h2:4,5 to h0:0,1",
        "unit 1 [2:4,0:4] 32B from h3:6,7 to h1:2,3",
    ]


def two_by_four(src, dst, shape, dst_shape=(2, 4)):
    src_mesh, dst_mesh = place_meshes((2, 4), dst_shape, emulated(2 + dst_shape[0], 4))
    return texts(decompose(shape, S(src), src_mesh, S(dst), dst_mesh, devices_per_host=4))


def test_case3_column_halves_to_row_halves():
    assert two_by_four("RS^0R", "S^0RR", (4, 4, 2)) == [
        "unit 0 [0:2,0:2,0:2] 32B from h0:0,1,2,3 to h2:8,9,10,11",
        "unit 1 [0:2,2:4,0:2] 32B from h1:4,5,6,7 to h2:8,9,10,11",
        "unit 2 [2:4,0:2,0:2] 32B from h0:0,1,2,3 to h3:12,13,14,15",
        "unit 3 [2:4,2:4,0:2] 32B from h1:4,5,6,7 to h3:12,13,14,15",
    ]


def test_case5_every_slice_has_two_candidate_hosts():
    assert two_by_four("S^1RR", "S^0RR", (8, 2, 2)) == [
        "unit 0 [0:2,0:2,0:2] 32B from h0:0 h1:4 to h2:8,9,10,11",
        "unit 1 [2:4,0:2,0:2] 32B from h0:1 h1:5 to h2:8,9,10,11",
        "unit 2 [4:6,0:2,0:2] 32B from h0:2 h1:6 to h3:12,13,14,15",
        "unit 3 [6:8,0:2,0:2] 32B from h0:3 h1:7 to h3:12,13,14,15",
    ]


def test_case9_last_dimension_sharded_on_the_receiver():
    assert two_by_four("RS^0R", "RRS^0", (2, 2, 4)) == [
        "unit 0 [0:2,0:1,0:2] 16B from h0:0,1,2,3 to h2:8,9,10,11",
        "unit 1 [0:2,0:1,2:4] 16B from h0:0,1,2,3 to h3:12,13,14,15",
        "unit 2 [0:2,1:2,0:2] 16B from h1:4,5,6,7 to h2:8,9,10,11",
        "unit 3 [0:2,1:2,2:4] 16B from h1:4,5,6,7 to h3:12,13,14,15",
    ]


def test_case4_makes_64_unit_tasks_one_device_each():
    tasks = decompose((16, 16, 2), S("RS^01R"), Mesh.parse("[[0,1,2,3],[4,5,6,7]]"), S("S^01RR"),
                      Mesh.parse("[[8,9,10,11],[12,13,14,15]]"), devices_per_host=4)
    assert len(tasks) == 64
    assert str(tasks[9]) == "unit 9 [2:4,2:4,0:2] 32B from h0:1 to h2:9"
    assert all(len(t.sources) == 1 and len(t.destinations) == 1 for t in tasks)


def test_case6_uneven_rows_are_cut_at_the_padded_shard_boundaries():
    """(2,4) -> (3,4), S^0RR both: 64 rows in shards of 32, then of ceil(64/3) = 22."""
    assert two_by_four("S^0RR", "S^0RR", (64, 1, 1), dst_shape=(3, 4)) == [
        "unit 0 [0:22,0:1,0:1] 88B from h0:0,1,2,3 to h2:8,9,10,11",
        "unit 1 [22:32,0:1,0:1] 40B from h0:0,1,2,3 to h3:12,13,14,15",
        "unit 2 [32:44,0:1,0:1] 48B from h1:4,5,6,7 to h3:12,13,14,15",
        "unit 3 [44:64,0:1,0:1] 80B from h1:4,5,6,7 to h4:16,17,18,19",
    ]


def test_unit_task_text_round_trips():
    tasks = decompose((8, 2, 2), S("S^1RR"), Mesh.parse("[[0,1,2,3],[4,5,6,7]]"), S("S^0RR"),
                      Mesh.parse("[[8,9,10,11],[12,13,14,15]]"), devices_per_host=4)
    for task in tasks:
        assert UnitTask.parse(str(task)) == task


def test_too_many_unit_tasks_are_refused():
    with pytest.raises(SearchBoundError, match="makes 16 unit tasks; at most 8"):
        decompose((16, 16, 2), S("RS^01R"), Mesh((1, 4), (0, 1, 2, 3)), S("S^01RR"), Mesh((1, 4), (4, 5, 6, 7)),
                  devices_per_host=4, max_unit_tasks=8)


@st.composite
def endpoint(draw, rank):
    shape = draw(st.sampled_from([(1,), (2,), (3,), (4,), (1, 2), (2, 2), (2, 3), (3, 2), (1, 4), (2, 4)]))
    options = [DimSharding.R, DimSharding.S0] + ([DimSharding.S1, DimSharding.S01] if len(shape) == 2 else [])
    dims = draw(st.lists(st.sampled_from(options), min_size=rank, max_size=rank))
    used = [d for dim in dims for d in dim.mesh_dims]
    assume(len(used) == len(set(used)))
    return ShardingSpec(tuple(dims)), shape


@st.composite
def resharding(draw):
    rank = draw(st.integers(1, 3))
    tensor = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    (src_spec, src_shape), (dst_spec, dst_shape) = draw(endpoint(rank)), draw(endpoint(rank))
    return tensor, src_spec, src_shape, dst_spec, dst_shape


@given(resharding())
@settings(max_examples=100, deadline=None)
def test_unit_tasks_partition_the_tensor_and_name_exactly_the_holders(case):
    tensor, src_spec, src_shape, dst_spec, dst_shape = case
    topology = emulated(8, 4)
    src_mesh, dst_mesh = place_meshes(src_shape, dst_shape, topology)
    tasks = decompose(tensor, src_spec, src_mesh, dst_spec, dst_mesh, devices_per_host=4, element_bytes=2)
    covered = np.zeros(tensor, dtype=int)
    for task in tasks:
        assert not task.box.empty and task.nbytes == 2 * task.box.elements
        covered[tuple(slice(a, b) for a, b in zip(task.box.starts, task.box.stops))] += 1
    assert (covered == 1).all()
    src_boxes, dst_boxes = src_spec.boxes(tensor, src_mesh), dst_spec.boxes(tensor, dst_mesh)
    for task in tasks:
        assert set(task.sources) == {r for r, box in src_boxes.items() if box.contains(task.box)}
        assert set(task.destinations) == {r for r, box in dst_boxes.items() if box.contains(task.box)}
        for rank, box in dst_boxes.items():
            assert rank in task.destinations or box.intersect(task.box).empty
        assert all(r // 4 == h for h, group in zip(task.source_hosts, task.source_groups) for r in group)
    for rank, box in dst_boxes.items():
        assert sum(t.box.elements for t in tasks if rank in t.destinations) == box.elements
