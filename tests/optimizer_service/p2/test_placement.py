import math

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.p2.placement import ParallelismMatrix, check_axes, count_matrices, enumerate_matrices


def test_table_3_matrices_for_4x16():
    # P² Table 3 rows B1-B3: [4 16] on 4 nodes x 16 GPUs.
    assert [str(m) for m in enumerate_matrices((4, 16), (4, 16))] == [
        "[[1 4] [4 4]]", "[[2 2] [2 8]]", "[[4 1] [1 16]]"]
    # Rows C1-C3: [8 8].
    assert [str(m) for m in enumerate_matrices((4, 16), (8, 8))] == [
        "[[1 8] [4 2]]", "[[2 4] [2 4]]", "[[4 2] [1 8]]"]


def test_appendix_a_placement_counts():
    assert count_matrices((2, 16), (2, 16)) == 2
    assert count_matrices((4, 16), (16, 2, 2)) == 4
    assert count_matrices((4, 16), (4, 2, 8)) == 5
    assert count_matrices((4, 8), (8, 2, 2)) == 4


def test_every_matrix_satisfies_equations_1_and_2():
    for matrix in enumerate_matrices((2, 2, 4), (4, 4)):
        assert matrix.hierarchy == (2, 2, 4)
        assert matrix.axes == (4, 4)


def test_text_form_round_trips():
    matrix = ParallelismMatrix(((1, 2, 2, 1), (1, 1, 1, 4)))
    assert str(matrix) == "[[1 2 2 1] [1 1 1 4]]"
    assert ParallelismMatrix.parse(str(matrix)) == matrix
    assert ParallelismMatrix.parse("[[1, 4], [4, 4]]") == ParallelismMatrix(((1, 4), (4, 4)))


@pytest.mark.parametrize("bad", ["[1 2]", "[[1 2] [3]]", "[[0 2]]", "matrix"])
def test_bad_matrix_text(bad):
    with pytest.raises(InvalidInputError):
        ParallelismMatrix.parse(bad)


def test_figure_2b_device_coordinates():
    # [[1 2 2 1] [1 1 1 4]] on [1 2 2 4]: each CPU one data replica, its GPUs the shards.
    matrix = ParallelismMatrix(((1, 2, 2, 1), (1, 1, 1, 4)))
    assert [matrix.axis_coordinates(d) for d in (0, 1, 3, 4, 15)] == [(0, 0), (0, 1), (0, 3), (1, 0), (3, 3)]
    # The global id is linear in the digits with the documented weights.
    weights = matrix.digit_weights()
    assert weights == ((16, 8, 4, 4), (16, 8, 4, 1))


def test_axis_coordinates_are_a_bijection():
    for matrix in enumerate_matrices((2, 4, 2), (4, 2, 2)):
        coordinates = {matrix.axis_coordinates(d) for d in range(16)}
        assert len(coordinates) == 16
        assert all(all(0 <= c < size for c, size in zip(coord, (4, 2, 2))) for coord in coordinates)


@pytest.mark.parametrize("axes,reduce,message", [
    ((4, 15), (0,), "multiply to 60"),
    ((4, 16), (2,), "out of range"),
    ((4, 16), (0, 0), "twice"),
    ((4, 16), (), "at least one reduction axis"),
    ((), (0,), "at least one parallelism axis"),
    ((0, 16), (0,), "whole number >= 1"),
])
def test_check_axes(axes, reduce, message):
    with pytest.raises(InvalidInputError, match=message):
        check_axes((4, 16), axes, reduce)


def test_counting_matches_enumeration_and_is_cheap_for_big_systems():
    assert count_matrices((4, 32, 8), (16, 8, 8)) == len(list(enumerate_matrices((4, 32, 8), (16, 8, 8))))
    assert count_matrices((2**10,), (2**5, 2**5)) == 1
    assert count_matrices((2, 2), (3,)) == 0
    assert math.prod((4, 32, 8)) == 1024
