"""Syndicate's motif algebra: every decomposition computes what the comm-op
computes (executed on numbers, one vector per rank) and moves the same bytes."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Par, Seq, comm_op, motifs_of, on_channel, rewrite
from optimizer_service.plan.numeric import execute
from optimizer_service.syndicate.transforms import (
    moved_elements,
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)


def inputs(op, seed=0):
    rng = np.random.default_rng(seed)
    elements = op.ranges[0][1] if op.kind is not Collective.REDUCE_SCATTER and op.kind is not Collective.ALL_GATHER \
        else op.ranges[-1][1]
    shape = (len(op.ranks), elements) if op.kind is Collective.ALL_TO_ALL else (elements,)
    return {r: rng.integers(-50, 50, shape).astype(float) for r in op.ranks}


def outcome(op, buffers):
    """What the comm-op defines: the parts of the result it promises."""
    if op.kind is Collective.REDUCE_SCATTER:
        return [buffers[op.ranks[k]][a:b] for k, (a, b) in enumerate(op.ranges)]
    if op.kind is Collective.REDUCE:
        return [buffers[op.ranks[0]]]
    return [buffers[r] for r in op.ranks]


def same_result(op, plan, seed=0):
    start = inputs(op, seed)
    want, got = outcome(op, execute(op, start)), outcome(op, execute(plan, start))
    return all(np.array_equal(a, b) for a, b in zip(want, got))


def decompositions(op, d, n):
    """Every operator and a few compositions that apply to ``op``."""
    plans = {"segment": segment(op, d)}
    if op.kind is Collective.ALL_REDUCE:
        plans["ring"] = spline_ring(op)
        plans["tree"] = spline_tree(op, n)
        plans["segment then ring"] = rewrite(segment(op, d), spline_ring)
        plans["ring then segment"] = rewrite(spline_ring(op), lambda m: segment(m, d))
        plans["segment then tree"] = rewrite(segment(op, d), lambda m: spline_tree(m, n))
    if op.kind is Collective.ALL_TO_ALL:
        plans["spline"] = spline_all_to_all(op, n)
        plans["segment then spline"] = rewrite(segment(op, d), lambda m: spline_all_to_all(m, n))
        plans["spline then segment"] = rewrite(spline_all_to_all(op, n), lambda m: segment(m, d))
    if op.kind is Collective.BROADCAST:
        plans["halves"] = spline_broadcast(op)
        plans["segment then halves"] = rewrite(segment(op, d), spline_broadcast)
    return plans


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(list(Collective)), world=st.integers(1, 9), elements=st.integers(0, 40),
       d=st.integers(1, 17), n=st.integers(2, 5), seed=st.integers(0, 10))
def test_every_decomposition_computes_the_comm_op(kind, world, elements, d, n, seed):
    ranks = tuple(np.random.default_rng(seed).permutation(12)[:world].tolist())  # any ranks, any order
    op = comm_op(kind, ranks, elements)
    for name, plan in decompositions(op, d, n).items():
        assert same_result(op, plan, seed), f"{name}: {plan}"


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(list(Collective)), world=st.integers(1, 9), elements=st.integers(0, 40),
       d=st.integers(1, 17), n=st.integers(2, 5))
def test_segmenting_and_splining_move_exactly_the_bytes_of_the_op(kind, world, elements, d, n):
    op = comm_op(kind, tuple(range(world)), elements)
    for name, plan in decompositions(op, d, n).items():
        if "tree" in name:
            continue  # a different algorithm: tested below
        assert moved_elements(plan) == moved_elements(op), name


def test_tree_allreduce_trades_bytes_for_rounds():
    op = comm_op(Collective.ALL_REDUCE, tuple(range(8)), 1000)
    tree = spline_tree(op, 2)
    # reduce 8->4->2->1 (7 sends of the payload), broadcast back (7): 14 payloads, ring sends 2*7 = 14 too
    assert moved_elements(tree) == 14 * 1000 == moved_elements(spline_ring(op))
    kinds = [m.kind for m in motifs_of(tree)]
    assert kinds.count(Collective.REDUCE) == 7 and kinds.count(Collective.BROADCAST) == 7  # recursive
    assert str(tree).count("->") >= 4


def test_hand_written_example_from_the_appendix():
    op = comm_op(Collective.ALL_TO_ALL, (0, 1, 2, 3), 6)
    plan = spline_all_to_all(segment(op, 3).parts[0], 2)
    assert isinstance(plan, Par) and len(plan.parts) == 2
    assert [m.window for m in plan.parts] == [(0, 2), (2, 4)]
    assert all(m.ranges == ((0, 3),) for m in plan.parts)
    ring = spline_ring(comm_op(Collective.ALL_REDUCE, (0, 1, 2), 7))
    assert isinstance(ring, Seq) and [m.kind for m in ring.parts] == [Collective.REDUCE_SCATTER, Collective.ALL_GATHER]
    assert ring.parts[0].ranges == ((0, 2), (2, 4), (4, 7))


def test_physical_plan_puts_motifs_on_a_channel():
    plan = on_channel(spline_ring(comm_op(Collective.ALL_REDUCE, (0, 1), 4)), 1)
    assert {m.channel for m in motifs_of(plan)} == {1}
    assert "ch1" in str(plan)


def test_dependent_parallel_parts_are_caught():
    op = comm_op(Collective.ALL_REDUCE, (0, 1), 4)
    bad = Par((spline_ring(op), replace(op, kind=Collective.BROADCAST)))
    with pytest.raises(InvalidInputError, match="depend on each other"):
        execute(bad, inputs(op))


@pytest.mark.parametrize("call,message", [
    (lambda: segment(comm_op(Collective.ALL_REDUCE, (0, 1), 4), 0), "at least 1"),
    (lambda: spline_ring(comm_op(Collective.BROADCAST, (0, 1), 4)), "applies to AllReduce"),
    (lambda: spline_tree(comm_op(Collective.ALL_REDUCE, (0, 1), 4), 1), "at least 2"),
    (lambda: comm_op(Collective.ALL_REDUCE, (0, 0), 4), "distinct"),
])
def test_bad_operator_arguments_are_one_line_errors(call, message):
    with pytest.raises(InvalidInputError, match=message):
        call()
