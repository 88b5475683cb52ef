"""Motifs in the elements of every dtype (issue 32): the element size in the text form and the
proto, kept by every operator, and checked against an op key's dtype."""

from __future__ import annotations

import pytest

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES
from optimizer_service.plan.motif import Motif, comm_op, motifs_of, on_channel, rewrite
from optimizer_service.plan.motif_text import parse_composition, parse_motif
from optimizer_service.plan.op_plan import OpKey, OpPlan, whole_op
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.proto_codec import plan_from_proto, plan_to_proto
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)
from p2.v1 import plan_pb2

SIZES = (1, 2, 4, 8)


def test_only_other_than_4_byte_motifs_print_their_element_size():
    assert str(comm_op(Collective.ALL_REDUCE, (0, 1), 6)) == "AllReduce(0,1)[0:6]"
    assert str(comm_op(Collective.ALL_REDUCE, (0, 1), 6, 2)) == "AllReduce(0,1)[0:6] 2B"
    gather = on_channel(comm_op(Collective.ALL_GATHER, (0, 1), 4, 8), 1)
    assert str(gather) == "AllGather(0,1)[0:2] [2:4] ch1 8B"
    assert str(comm_op(Collective.ALL_TO_ALL, (0, 1, 2), 5, 1)) == "AllToAll(0,1,2)[0:5] dst+[0:3] 1B"


@pytest.mark.parametrize("text, motif", [
    ("AllReduce(0,1)[0:6] 2B", Motif(Collective.ALL_REDUCE, (0, 1), ((0, 6),), element_bytes=2)),
    ("AllReduce(0,1)[0:6] 4B", Motif(Collective.ALL_REDUCE, (0, 1), ((0, 6),))),
    ("Broadcast(1,0)[0:3] ch2 1B", Motif(Collective.BROADCAST, (1, 0), ((0, 3),), channel=2, element_bytes=1)),
    ("AllToAll(0,1)[0:4] dst+[0:1] ch1 8 B", Motif(Collective.ALL_TO_ALL, (0, 1), ((0, 4),), (0, 1), 1, 8)),
])
def test_the_element_size_parses(text, motif):
    assert parse_motif(text) == motif


@pytest.mark.parametrize("size", SIZES)
def test_every_operator_keeps_the_element_size_and_the_text_round_trips(size):
    ring = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(4), 1000, size), 300), spline_ring)
    tree = spline_tree(comm_op(Collective.ALL_REDUCE, range(8), 64, size), 2)
    a2a = on_channel(spline_all_to_all(comm_op(Collective.ALL_TO_ALL, range(4), 9, size), 2), 1)
    halves = spline_broadcast(comm_op(Collective.BROADCAST, (2, 0, 1, 3), 7, size))
    scatter = segment(comm_op(Collective.REDUCE_SCATTER, range(3), 30, size), 4)
    for plan in (ring, tree, a2a, halves, scatter):
        assert {m.element_bytes for m in motifs_of(plan)} == {size}
        assert parse_composition(str(plan)) == plan
        assert (f" {size}B" in str(plan)) == (size != 4)


@pytest.mark.parametrize("text, message", [
    ("AllReduce(0,1)[0:4] 3B", "element size 3 B is not one a dtype has (expected one of 1B, 2B, 4B, 8B)"),
    ("AllReduce(0,1)[0:4] 16B", "element size 16 B"),
    ("AllReduce(0,1)[0:4] 2", "ends early: expected 'B' after the element size (e.g. '2B')"),
    ("AllReduce(0,1)[0:4] 2 bytes", "expected 'B' after the element size"),
    ("AllReduce(0,1)[0:4] 2B ch1", "unexpected text after the end of the plan"),
])
def test_a_bad_element_size_is_one_line(text, message):
    with pytest.raises(InvalidInputError) as error:
        parse_composition(text)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_comm_op_refuses_a_size_no_dtype_has():
    with pytest.raises(InvalidInputError, match="element size 3 B is not one a dtype has"):
        comm_op(Collective.ALL_REDUCE, (0, 1), 4, 3)


def test_a_motif_counts_bytes_in_its_own_element_size():
    assert comm_op(Collective.ALL_GATHER, range(4), 100, 2).nbytes == 200
    assert comm_op(Collective.ALL_TO_ALL, range(4), 25, 8).nbytes == 200      # one block
    assert comm_op(Collective.ALL_REDUCE, range(4), 100).nbytes == 400


# ------------------------------------------------------------------- op keys
def bf16_gather() -> OpPlan:
    """An all_gather of 2 x 6 bfloat16 elements (24 bytes), in two segments."""
    plan = segment(comm_op(Collective.ALL_GATHER, (0, 1), 12, 2), 3)
    return OpPlan.of(OpKey(0, "all_gather", 24, (4, 5), dtype="bfloat16"), plan)


def test_a_keyed_dtype_needs_motifs_in_its_element_size():
    op = bf16_gather()
    op.validate(6)                          # the runtime's input numel: 6 bfloat16 elements per member
    with pytest.raises(PlanError) as error:
        OpPlan.of(OpKey(0, "all_gather", 24, (4, 5), dtype="bfloat16"),
                  segment(comm_op(Collective.ALL_GATHER, (0, 1), 12), 3))
    assert str(error.value) == (
        "plan op 0 (all_gather of bfloat16 on group [4,5]): motif 0 (AllGather(0,1)[0:3] [6:9]) counts 4-byte "
        "elements but bfloat16 has 2-byte ones; plan the op in its own elements")


def test_a_key_without_dtype_takes_motifs_of_any_size():
    OpPlan.of(OpKey(0, "all_reduce", 8, (0, 1)), comm_op(Collective.ALL_REDUCE, (0, 1), 8, 1)).validate(8)


@pytest.mark.parametrize("dtype", sorted(DTYPE_BYTES))
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"])
def test_the_whole_op_counts_the_dtype_elements(kind, dtype):
    size, p, n = DTYPE_BYTES[dtype], 3, 6
    buffer = p * n if kind in ("all_gather", "reduce_scatter") else n
    op = whole_op(OpKey(0, kind, buffer * size, (0, 1, 2), dtype=dtype), n)
    assert {m.element_bytes for m in op.motifs} == {size}
    op.validate(n)


# ---------------------------------------------------------- codecs, proto too
def mixed_plan() -> Plan:
    """Ops of 1-, 2-, 4- and 8-byte elements, keyed with and without a dtype."""
    int8 = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(4), 1001, 1), 500), spline_ring)
    int64 = spline_all_to_all(comm_op(Collective.ALL_TO_ALL, range(4), 100, 8), 2)
    ops = (OpPlan.of(OpKey(0, "all_reduce", 1001, (0, 1, 2, 3), dtype="int8"), int8),
           OpPlan.of(OpKey(1, "all_to_all", 3200, (0, 1, 2, 3), dtype="int64"), on_channel(int64, 1), base=4),
           bf16_gather(),
           OpPlan.of(OpKey(2, "all_reduce", 40, (0, 1, 2, 3)), comm_op(Collective.ALL_REDUCE, range(4), 10), base=9))
    return Plan(3, 8, {0: None, 1: "nic1"}, ops)


def test_plans_of_every_element_size_round_trip_through_json_and_proto():
    plan = mixed_plan()
    assert Plan.parse(plan.to_json()) == plan
    wired = plan_from_proto(plan_pb2.Plan.FromString(plan_to_proto(plan).SerializeToString()))
    assert wired == plan and wired.to_json() == plan.to_json()
    assert '"dtype": "int64"' in plan.to_json() and "dst+[0:2] ch1 8B" in plan.to_json()


def test_the_proto_leaves_4_byte_motifs_at_zero():
    message = plan_to_proto(mixed_plan())

    def first_motif(op: plan_pb2.OpPlan) -> plan_pb2.Motif:
        node = op.composition
        while node.WhichOneof("node") != "motif":
            node = getattr(node, node.WhichOneof("node")).parts[0]
        return node.motif

    assert [first_motif(op).element_bytes for op in message.ops] == [1, 8, 2, 0]


def test_a_proto_motif_of_a_size_no_dtype_has_is_refused():
    message = plan_to_proto(mixed_plan())
    message.ops[3].composition.motif.element_bytes = 3
    with pytest.raises(PlanError, match=r"plan op 2 \(all_reduce on group \[0,1,2,3\]\): motif 0 .* element size 3 B"):
        plan_from_proto(message)

