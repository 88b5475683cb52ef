"""The installed plan (optimizer_service.plan.op_plan): JSON round trip, one-line rejections,
lookups, and validate() proving on a compressed buffer that the motifs compute
the op, for any size (Syndicate §4.2, §4.4, Pseudocode 2)."""

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif, Par, Seq, comm_op, even_split, on_channel, rewrite
from optimizer_service.plan.op_plan import KINDS, OpKey, OpPlan, whole_op
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)
from tests.support.plans import op_plans, pieces, sample_plan

RING = "(ReduceScatter(0,1,2,3)[0:2] [2:4] [4:6] [6:8] -> AllGather(0,1,2,3)[0:2] [2:4] [4:6] [6:8])"


def op_entry(**changes):
    entry = {"seq": 0, "kind": "all_reduce", "bytes": 32, "group": [4, 5, 6, 7], "plan": RING, "order": [0, 1]}
    entry.update(changes)
    return {k: v for k, v in entry.items() if v is not ...}


def document(*ops, **changes):
    doc = {"format": "p2enforcer-plan", "version": 3, "world_size": 8, "channels": {"0": None, "1": "nic1"},
           "topology": "emulated-2x4", "predicted_iteration_seconds": 0.12, "ops": list(ops) or [op_entry()]}
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not ...})


# ---------------------------------------------------------------- round trip
def test_the_documented_example_parses_to_the_expected_values():
    plan = Plan.parse(document())
    assert (plan.version, plan.world_size, plan.topology, plan.predicted_iteration_seconds) == \
        (3, 8, "emulated-2x4", 0.12)
    assert plan.channels == {0: None, 1: "nic1"} and plan.channel_ids() == (0, 1)
    (op,) = plan.ops
    assert op.key == OpKey(0, "all_reduce", 32, (4, 5, 6, 7))
    assert op.plan == spline_ring(comm_op(Collective.ALL_REDUCE, range(4), 8))
    assert op.order == (0, 1)
    assert [m.kind for m in op.motifs] == [Collective.REDUCE_SCATTER, Collective.ALL_GATHER]


def test_optional_fields_have_defaults():
    plan = Plan.parse(document(channels=..., topology=..., predicted_iteration_seconds=...))
    assert plan.channels == {0: None}
    assert plan.topology is None and plan.predicted_iteration_seconds is None


def test_json_round_trip():
    plan = sample_plan()
    assert Plan.parse(plan.to_json()) == plan
    assert Plan.parse(plan.to_json()).to_json() == plan.to_json()
    lines = plan.to_json().splitlines()
    assert sum('"seq"' in line for line in lines) == len(plan.ops)   # one line per op
    assert '"root": 1' in plan.to_json() and plan.to_json().count('"root"') == 1


def test_an_empty_plan_round_trips():
    plan = Plan(1, 1, {}, ())
    assert Plan.parse(plan.to_json()) == plan


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_plans_round_trip(data):
    ops = tuple(data.draw(op_plans(seq)) for seq in range(data.draw(st.integers(0, 4))))
    plan = Plan(1, 8, {0: None, 1: "nic1", 2: None}, ops)
    assert Plan.parse(plan.to_json()) == plan


# ---------------------------------------------------------------- rejections
REJECTED = [
    ("not json", "the plan is not JSON"),
    ("[1, 2]", "plan must be a JSON object"),
    (document(format="p2-plan"), "plan format is 'p2-plan', expected 'p2enforcer-plan'"),
    (document(format=...), "plan: missing field 'format'"),
    (document(version=...), "plan: missing field 'version'"),
    (document(world_size=...), "plan: missing field 'world_size'"),
    (document(ops=...), "plan: missing field 'ops'"),
    (document(colour="blue"), "plan: unknown field 'colour'"),
    (document(version="3"), "plan: 'version' must be an integer, got \"3\""),
    (document(version=True), "plan: 'version' must be an integer, got true"),
    (document(world_size=8.0), "plan: 'world_size' must be an integer, got 8.0"),
    (document(version=0), "plan version must be >= 1, got 0"),
    (document(world_size=0), "plan world_size must be >= 1, got 0"),
    (document(ops={"seq": 0}), "plan: 'ops' must be a list"),
    (document(channels=["nic1"]), "plan: 'channels' must be an object"),
    (document(channels={"one": "nic1"}), "channel id 'one' in 'channels' must be a non-negative integer"),
    (document(channels={"-1": None}), "channel id '-1' in 'channels' must be a non-negative integer"),
    (document(channels={"0": 5}), "channel 0 must name a network interface or be null, got 5"),
    (document(topology=7), "plan: 'topology' must be a string, got 7"),
    (document(predicted_iteration_seconds="fast"), "'predicted_iteration_seconds' must be a number"),
    (document(predicted_iteration_seconds=-1), "predicted_iteration_seconds must be a finite number >= 0"),
    (document("op"), "plan ops[0] must be a JSON object"),
    (document(op_entry(seq=...)), "plan ops[0]: missing field 'seq'"),
    (document(op_entry(plan=...)), "plan ops[0]: missing field 'plan'"),
    (document(op_entry(order=...)), "plan ops[0]: missing field 'order'"),
    (document(op_entry(orders=[0, 1])), "plan ops[0]: unknown field 'orders'"),
    (document(op_entry(seq="0")), "plan ops[0]: 'seq' must be an integer"),
    (document(op_entry(group="4,5,6,7")), "plan ops[0]: 'group' must be a list of integers"),
    (document(op_entry(group=[4, 5, 6, 7.0])), "plan ops[0]: 'group' must be a list of integers"),
    (document(op_entry(order=[0, "1"])), "plan ops[0]: 'order' must be a list of integers"),
    (document(op_entry(plan=5)), "plan ops[0]: 'plan' must be a string, got 5"),
    (document(op_entry(kind="allreduce")), "plan op 0 (allreduce on group [4,5,6,7]): unknown kind 'allreduce'"),
    (document(op_entry(seq=-1)), "seq -1 must be >= 0"),
    (document(op_entry(bytes=-4)), "plan op 0 (all_reduce on group [4,5,6,7]): bytes -4 must be >= 0"),
    (document(op_entry(group=[])), "the group is empty"),
    (document(op_entry(group=[4, 5, 5, 7])), "group ranks must be distinct"),
    (document(op_entry(group=[4, 5, 6, 8])), "group rank 8 is outside the world of 8 ranks"),
    (document(op_entry(group=[4, 5, 6, -1])), "group ranks must be distinct and >= 0"),
    (document(op_entry(root=1)), "root 1 is only meaningful for broadcast"),
    (document(op_entry(kind="broadcast", root=4, plan="Broadcast(0,1,2,3)[0:8]", order=[0])),
     "plan op 0 (broadcast from position 4 on group [4,5,6,7]): root position 4 is outside the group of 4"),
    (document(op_entry(plan="(ReduceScatter(0,1,2,3)[0:2] -> AllGather)")),
     "plan op 0 (all_reduce on group [4,5,6,7]): cannot parse plan at column 2"),
    (document(op_entry(plan="Foo(0,1)[0:8]", order=[0])), "unknown motif kind 'Foo'"),
    (document(op_entry(group=[0, 1], plan="(Reduce(0,1)[0:8] -> Reduce(0,1)[0:8] -> Reduce(0,5)[0:8])",
                       order=[0, 1, 2])),
     "plan op 0 (all_reduce on group [0,1]): motif 2 (Reduce(0,5)[0:8]) uses group position 5 but the group "
     "has 2 members"),
    (document(op_entry(plan="AllReduce(0,1,2,3)[0:8] ch2", order=[0])),
     "motif 0 (AllReduce(0,1,2,3)[0:8] ch2) uses channel 2, which 'channels' does not list (listed: 0, 1)"),
    (document(op_entry(plan="AllReduce(0,1,2,3)[0:8] ch1", order=[0]), channels=...),
     "uses channel 1, which 'channels' does not list (listed: 0)"),
    (document(op_entry(order=[0])), "'order' has 1 numbers but the plan has 2 motifs"),
    (document(op_entry(order=[0, 1, 2])), "'order' has 3 numbers but the plan has 2 motifs"),
    (document(op_entry(order=[-1, 1])), "motif 0 has a negative order number -1"),
    (document(op_entry(order=[3, 2])),
     "motif 1 (AllGather(0,1,2,3)[0:2] [2:4] [4:6] [6:8]) is dispatched at 2, before motif 0"),
    (document(op_entry(), op_entry(bytes=64, order=[5, 6])),
     "plan op 0 (all_reduce on group [4,5,6,7]): a second op with seq 0 on this group"),
    (document(op_entry(plan="AllToAll(0,1,2,3)[0:2] dst+[0:4]", order=[0])),
     "motif 0 (AllToAll(0,1,2,3)[0:2] dst+[0:4]): a AllToAll motif cannot be part of all_reduce"),
    (document(op_entry(kind="all_gather", plan="Reduce(0,1,2,3)[0:8]", order=[0])),
     "a Reduce motif cannot be part of all_gather (use AllGather, Broadcast)"),
    (document(op_entry(kind="all_to_all", plan="AllToAll(1,0,2,3)[0:2] dst+[0:4]", order=[0])),
     "AllToAll motifs span the whole group in group order (0,1,2,3)"),
]


@pytest.mark.parametrize("text, message", REJECTED)
def test_bad_plans_are_rejected_with_one_line_saying_what_and_where(text, message):
    with pytest.raises(PlanError) as error:
        Plan.parse(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_ops_on_different_groups_may_share_a_seq():
    plan = Plan.parse(document(op_entry(), op_entry(group=[0, 1, 2, 3])))
    assert len(plan.ops) == 2


def test_a_one_part_composition_has_no_text_form_and_is_rejected():
    with pytest.raises(PlanError, match="a composition needs at least two parts, got 1"):
        OpPlan.of(OpKey(0, "all_reduce", 8, (0, 1)), Seq((comm_op(Collective.ALL_REDUCE, (0, 1), 2),)))


def test_check_world():
    plan = Plan.parse(document())
    plan.check_world(8)
    with pytest.raises(PlanError, match="the plan is for a world of 8 ranks but this job has 4"):
        plan.check_world(4)


# ------------------------------------------------------------------- queries
def test_lookup_finds_an_op_by_group_and_seq_only_when_it_is_the_same_op():
    plan = sample_plan()
    assert plan.lookup((4, 5, 6, 7), 1, "all_reduce", 40) is plan.ops[1]
    assert plan.lookup([4, 5, 6, 7], 0, "all_reduce", 40) is plan.ops[0]
    assert plan.lookup((1, 3), 0, "broadcast", 28, root=1) is plan.ops[3]
    assert plan.lookup((4, 5, 6, 7), 2, "all_reduce", 40) is None        # not planned
    assert plan.lookup((4, 5, 7, 6), 0, "all_reduce", 40) is None        # other group order
    assert plan.lookup((4, 5, 6, 7), 0, "all_reduce", 44) is None        # other size
    assert plan.lookup((4, 5, 6, 7), 0, "reduce_scatter", 40) is None    # other kind
    assert plan.lookup((1, 3), 0, "broadcast", 28, root=0) is None       # other root


def test_member_sets_are_global_ranks_per_channel():
    plan = sample_plan()
    assert plan.member_sets() == {
        0: ((1, 3), (4, 5), (4, 5, 6, 7), (4, 6), (6,), (6, 7)),
        1: ((0, 1, 2),),
    }
    assert Plan(1, 2, {0: None, 3: "nic3"}, ()).member_sets() == {0: (), 3: ()}


def test_dependencies_of_a_ring_spline():
    op = OpPlan.of(OpKey(0, "all_reduce", 0, (0, 1, 2)), spline_ring(comm_op(Collective.ALL_REDUCE, range(3), 9)), base=7)
    assert op.dependencies() == ((), (0,))
    assert op.order == (7, 8)


def test_dependencies_of_a_tree_spline():
    # ((R01 || R23) -> (R02 -> B02) -> (B01 || B23))
    op = OpPlan.of(OpKey(0, "all_reduce", 0, (0, 1, 2, 3)), spline_tree(comm_op(Collective.ALL_REDUCE, range(4), 9), 2))
    assert [str(m).split("[")[0] for m in op.motifs] == \
        ["Reduce(0,1)", "Reduce(2,3)", "Reduce(0,2)", "Broadcast(0,2)", "Broadcast(0,1)", "Broadcast(2,3)"]
    assert op.dependencies() == ((), (), (0, 1), (2,), (3,), (3,))
    assert op.order == (0, 0, 1, 2, 3, 3)


def test_dependencies_of_segments_then_rings_are_per_segment():
    plan = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(2), 10), 5), spline_ring)
    op = OpPlan.of(OpKey(0, "all_reduce", 0, (0, 1)), plan)
    assert op.dependencies() == ((), (0,), (), (2,))
    assert op.order == (0, 1, 0, 1)


def test_an_order_may_number_dependent_motifs_alike_or_later():
    key = OpKey(0, "all_reduce", 0, (0, 1, 2))
    ring = spline_ring(comm_op(Collective.ALL_REDUCE, range(3), 9))
    assert OpPlan.of(key, ring, [4, 4]).order == (4, 4)
    assert OpPlan.of(key, ring, [4, 10]).order == (4, 10)


# ---------------------------------------------------------- validate: accepts
def all_reduce_plans(p, n):
    op = comm_op(Collective.ALL_REDUCE, range(p), n)
    third = -(-n // 3)
    return {"whole": op, "segment": segment(op, max(1, third)), "ring": spline_ring(op),
            "tree 2": spline_tree(op, 2), "tree 3": spline_tree(op, 3),
            "segment then ring": rewrite(segment(op, max(1, third)), spline_ring),
            "ring then segment": rewrite(spline_ring(op), pieces(n // (2 * p))),
            "tree then segment": rewrite(spline_tree(op, 2), pieces(third)),
            "segment then tree on two channels": Par(tuple(
                on_channel(spline_tree(part, 2), k % 2) for k, part in enumerate(segment(op, max(1, third)).parts)))
            if n > third else spline_tree(op, 2)}


def reduce_scatter_plans(p, n):
    op = comm_op(Collective.REDUCE_SCATTER, range(p), p * n)
    blocks = [(k * n, (k + 1) * n) for k in range(p)]
    to_owner = [Motif(Collective.REDUCE, (k, *(r for r in range(p) if r != k)), (blocks[k],)) for k in range(p)]
    return {"whole": op, "segment": segment(op, max(1, n // 3)),
            "reduce to each owner": Par(tuple(to_owner)) if p > 1 else to_owner[0],
            "all-reduce of everything": comm_op(Collective.ALL_REDUCE, range(p), p * n),
            "ring all-reduce of everything": spline_ring(comm_op(Collective.ALL_REDUCE, range(p), p * n))}


def all_gather_plans(p, n):
    op = comm_op(Collective.ALL_GATHER, range(p), p * n)
    blocks = [(k * n, (k + 1) * n) for k in range(p)]
    from_owner = [Motif(Collective.BROADCAST, (k, *(r for r in range(p) if r != k)), (blocks[k],)) for k in range(p)]
    broadcasts = Par(tuple(from_owner)) if p > 1 else from_owner[0]
    return {"whole": op, "segment": segment(op, max(1, n // 3)), "broadcast from each owner": broadcasts,
            "split broadcasts": rewrite(broadcasts, spline_broadcast),
            "segmented broadcasts": rewrite(broadcasts, pieces(n // 2))}


def broadcast_plans(p, n, root):
    others = tuple(r for r in range(p) if r != root)
    op = Motif(Collective.BROADCAST, (root, *others), ((0, n),))
    parts = even_split(0, n, p)
    scatter = [Motif(Collective.BROADCAST, (root, k), (parts[k],)) for k in others]
    allgather = Motif(Collective.ALL_GATHER, tuple(range(p)), parts)
    scatter_allgather = Seq((scatter[0] if len(scatter) == 1 else Par(tuple(scatter)), allgather)) if scatter else op
    return {"whole": op, "segment": segment(op, max(1, n // 3)), "split": spline_broadcast(op),
            "split then segment": rewrite(spline_broadcast(op), pieces(n // 2)),
            "scatter then all-gather": scatter_allgather}


def all_to_all_plans(p, d):
    op = comm_op(Collective.ALL_TO_ALL, range(p), d)
    return {"whole": op, "windows of 1": spline_all_to_all(op, 1), "windows of 2": spline_all_to_all(op, 2),
            "segment": segment(op, max(1, d // 3)),
            "segment then windows": rewrite(segment(op, max(1, d // 3)), lambda m: spline_all_to_all(m, 2))}


SIZES = [0, 1, 2, 7, 12, 10 ** 9]
GROUPS = [1, 2, 3, 4, 5]


def cases():
    for p in GROUPS:
        for n in SIZES:
            yield from ((f"all_reduce p={p} n={n} {name}", OpKey(0, "all_reduce", 0, tuple(range(p))), n, plan)
                        for name, plan in all_reduce_plans(p, n).items())
            yield from ((f"reduce_scatter p={p} n={n} {name}", OpKey(0, "reduce_scatter", 0, tuple(range(p))), n,
                         plan) for name, plan in reduce_scatter_plans(p, n).items())
            yield from ((f"all_gather p={p} n={n} {name}", OpKey(0, "all_gather", 0, tuple(range(p))), n, plan)
                        for name, plan in all_gather_plans(p, n).items())
            for root in {0, p - 1}:
                yield from ((f"broadcast p={p} n={n} root={root} {name}",
                             OpKey(0, "broadcast", 0, tuple(range(p)), root), n, plan)
                            for name, plan in broadcast_plans(p, n, root).items())
            yield from ((f"all_to_all p={p} d={n} {name}", OpKey(0, "all_to_all", 0, tuple(range(p))), p * n, plan)
                        for name, plan in all_to_all_plans(p, n).items())


CASES = list(cases())


@pytest.mark.parametrize("key, elements, plan", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate_accepts_decompositions_built_with_the_operators(key, elements, plan):
    op = OpPlan.of(key, plan)
    started = time.perf_counter()
    op.validate(elements)
    assert time.perf_counter() - started < 1.0       # compressed: independent of the element count


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("elements", [0, 1, 6, 10 ** 9])
def test_whole_op_is_one_motif_over_the_whole_buffer(kind, elements):
    key = OpKey(0, kind, 0, (3, 0, 2), root=2 if kind == "broadcast" else 0)
    elements = elements * 3 if kind == "all_to_all" else elements
    op = whole_op(key, elements, base=5)
    assert len(op.motifs) == 1 and op.order == (5,)
    op.validate(elements)


def test_whole_op_texts():
    def text(kind, root=0):
        return str(whole_op(OpKey(0, kind, 0, (7, 1, 4), root), 6).plan)
    assert text("all_reduce") == "AllReduce(0,1,2)[0:6]"
    assert text("broadcast", root=1) == "Broadcast(1,0,2)[0:6]"
    assert text("all_gather") == "AllGather(0,1,2)[0:6] [6:12] [12:18]"
    assert text("reduce_scatter") == "ReduceScatter(0,1,2)[0:6] [6:12] [12:18]"
    assert text("all_to_all") == "AllToAll(0,1,2)[0:2] dst+[0:3]"


def test_validate_works_through_json_on_a_billion_elements():
    text = document(op_entry(group=[0, 1, 2, 3, 4, 5, 6, 7],
                             plan=str(rewrite(segment(comm_op(Collective.ALL_REDUCE, range(8), 10 ** 9), 3 * 10 ** 8),
                                              spline_ring)),
                             order=[0, 1] * 4, bytes=4 * 10 ** 9))
    (op,) = Plan.parse(text).ops
    op.validate(10 ** 9)


# ---------------------------------------------------------- validate: rejects
def rejected(key, plan, elements):
    with pytest.raises(PlanError) as error:
        OpPlan.of(key, plan).validate(elements)
    assert "\n" not in str(error.value)
    return str(error.value)


AR4 = OpKey(0, "all_reduce", 0, (4, 5, 6, 7))


def test_validate_rejects_a_missing_segment():
    seg = segment(comm_op(Collective.ALL_REDUCE, range(4), 100), 30)
    plan = Par(seg.parts[:2] + seg.parts[3:])
    message = rejected(AR4, rewrite(plan, spline_ring), 100)
    assert message == ("plan op 0 (all_reduce on group [4,5,6,7]): the motifs do not compute all_reduce: "
                       "member 0 (rank 4) ends with a wrong value in elements [60:90)")


def test_validate_rejects_a_range_counted_twice():
    op = comm_op(Collective.ALL_REDUCE, range(4), 100)
    twice = Par((Motif(Collective.ALL_REDUCE, tuple(range(4)), ((0, 60),)), Motif(Collective.ALL_REDUCE, tuple(range(4)), ((40, 100),))))
    assert "ends with a wrong value in elements [40:60)" in rejected(AR4, twice, 100)
    assert "ends with a wrong value in elements [0:100)" in rejected(AR4, Seq((op, op)), 100)


def test_validate_rejects_a_range_past_the_end():
    plan = spline_ring(comm_op(Collective.ALL_REDUCE, range(4), 100))
    assert rejected(AR4, plan, 99) == ("plan op 0 (all_reduce on group [4,5,6,7]): motif 0 (ReduceScatter(0,1,2,3)"
                                       "[0:25] [25:50] [50:75] [75:100]) reaches 100 but the buffer has 99 elements")


def test_validate_rejects_a_plan_made_for_a_smaller_buffer():
    plan = spline_ring(comm_op(Collective.ALL_REDUCE, range(4), 100))
    assert "member 0 (rank 4) ends with a wrong value in elements [100:101)" in rejected(AR4, plan, 101)


def test_validate_rejects_parallel_parts_that_depend_on_each_other():
    plan = Par((Motif(Collective.REDUCE, (0, 1, 2, 3), ((0, 8),)), Motif(Collective.BROADCAST, (0, 1, 2, 3), ((0, 8),))))
    assert "parallel parts of the plan touch the same elements" in rejected(AR4, plan, 8)


def test_validate_rejects_an_all_gather_that_misses_a_block():
    key = OpKey(0, "all_gather", 0, (0, 1, 2))
    plan = Motif(Collective.ALL_GATHER, (0, 1, 2), ((0, 5), (5, 10), (10, 14)))
    assert "member 0 (rank 0) never receives elements [14:15)" in rejected(key, plan, 5)


def test_validate_rejects_a_reduce_scatter_to_the_wrong_owner():
    key = OpKey(0, "reduce_scatter", 0, (0, 1))
    plan = Motif(Collective.REDUCE_SCATTER, (1, 0), ((0, 4), (4, 8)))
    assert "member 0 (rank 0) ends with a wrong value in elements [0:4)" in rejected(key, plan, 4)


def test_validate_rejects_a_broadcast_from_the_wrong_root():
    key = OpKey(0, "broadcast", 0, (0, 1, 2), root=2)
    message = rejected(key, comm_op(Collective.BROADCAST, range(3), 9), 9)
    assert message.startswith("plan op 0 (broadcast from position 2 on group [0,1,2]): the motifs do not compute "
                              "broadcast: member 0 (rank 0) ends with a wrong value in elements [0:9)")


def test_validate_rejects_an_all_to_all_that_misses_a_window():
    key = OpKey(0, "all_to_all", 0, (0, 1, 2, 3))
    plan = spline_all_to_all(comm_op(Collective.ALL_TO_ALL, range(4), 5), 2).parts[0]
    assert "never receives columns [0:5) from member" in rejected(key, plan, 20)


def test_validate_rejects_an_all_to_all_that_does_not_split_evenly():
    key = OpKey(0, "all_to_all", 0, (0, 1, 2))
    assert "all_to_all of 10 elements does not split into 3 equal blocks" in \
        rejected(key, comm_op(Collective.ALL_TO_ALL, range(3), 3), 10)


def test_validate_rejects_a_negative_size():
    assert "-1 elements is not a size" in rejected(AR4, comm_op(Collective.ALL_REDUCE, range(4), 0), -1)


def test_reduce_scatter_does_not_care_about_other_blocks():
    key = OpKey(0, "reduce_scatter", 0, (0, 1, 2))
    OpPlan.of(key, Par(tuple(Motif(Collective.REDUCE, (k, *(r for r in range(3) if r != k)), ((4 * k, 4 * k + 4),))
                             for k in range(3)))).validate(4)
    missing_one = Par(tuple(Motif(Collective.REDUCE, (k, *(r for r in range(3) if r != k)), ((4 * k, 4 * k + 4),))
                            for k in range(2)))
    assert "member 2 (rank 2) ends with a wrong value in elements [8:12)" in rejected(key, missing_one, 4)


def test_channels_do_not_change_what_validate_accepts():
    plan = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(3), 10), 4), spline_ring)
    two_channels = Par(tuple(on_channel(part, k % 2) for k, part in enumerate(plan.parts)))
    OpPlan.of(OpKey(0, "all_reduce", 0, (0, 1, 2)), two_channels).validate(10)
    assert {m.channel for m in OpPlan.of(OpKey(0, "all_reduce", 0, (0, 1, 2)), two_channels).motifs} == {0, 1}


def test_validate_cuts_the_compressed_buffer_at_block_boundaries():
    # One motif range spanning two blocks: only the block cut shows that the
    # second block belongs to (reduce_scatter) or comes from (all_gather) member 1.
    scatter = OpKey(0, "reduce_scatter", 0, (0, 1, 2))
    assert "member 1 (rank 1) ends with a wrong value in elements [4:8)" in \
        rejected(scatter, Par((Motif(Collective.REDUCE, (0, 1, 2), ((0, 8),)), Motif(Collective.REDUCE, (2, 0, 1), ((8, 12),)))), 4)
    gather = OpKey(0, "all_gather", 0, (0, 1, 2))
    assert "never receives elements [4:8)" in \
        rejected(gather, Par((Motif(Collective.BROADCAST, (0, 1, 2), ((0, 8),)), Motif(Collective.BROADCAST, (2, 0, 1), ((8, 12),)))), 4)
