"""The text form of motif plans: ``parse_composition(str(p)) == p`` for every plan the
operators build, and malformed text is rejected with one line naming the part."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif, Par, Seq, check_motif, comm_op, motifs_of, on_channel, rewrite
from optimizer_service.plan.motif_text import parse_composition, parse_motif
from optimizer_service.syndicate.transforms import (
    segment,
    spline_all_to_all,
    spline_broadcast,
    spline_ring,
    spline_tree,
)

# ---------------------------------------------------------------- examples
PRINTED = [
    "AllReduce(0,1)[0:6]",
    "(ReduceScatter(0,1)[0:2] [2:4] ch1 -> AllGather(0,1)[0:2] [2:4] ch1)",
    "AllToAll(0,1,2,3)[0:5] dst+[0:2]",
    "(AllReduce(0,1)[0:3] || AllReduce(0,1)[3:6])",
    "((Reduce(0,1)[0:8] || Reduce(2,3)[0:8]) -> (Reduce(0,2)[0:8] -> Broadcast(0,2)[0:8]) "
    "-> (Broadcast(0,1)[0:8] || Broadcast(2,3)[0:8]))",
    "(Broadcast(3,1,2)[0:7] ch2 || Broadcast(3,0)[0:7] ch2)",
]


@pytest.mark.parametrize("text", PRINTED)
def test_printed_examples_parse_back_to_the_same_text(text):
    assert str(parse_composition(text)) == text


def test_the_printed_form_of_the_motif_docstring_parses_to_the_expected_values():
    ring = parse_composition("(ReduceScatter(0,1)[0:2][2:4] ch1 -> AllGather(0,1)[0:2][2:4] ch1)")
    rs = Motif(Collective.REDUCE_SCATTER, (0, 1), ((0, 2), (2, 4)), channel=1)
    assert ring == Seq((rs, replace(rs, kind=Collective.ALL_GATHER)))
    assert parse_composition("AllToAll(0,1,2,3)[0:5] dst+[0:2]") == Motif(Collective.ALL_TO_ALL, (0, 1, 2, 3), ((0, 5),), (0, 2))
    assert parse_composition("(AllReduce(0,1)[0:3] || AllReduce(0,1)[3:6])") == Par(
        (Motif(Collective.ALL_REDUCE, (0, 1), ((0, 3),)), Motif(Collective.ALL_REDUCE, (0, 1), ((3, 6),))))


def test_whitespace_ch0_and_grouping_parentheses_are_accepted():
    assert parse_composition("  AllReduce( 0 , 1 ) [0:4]  ch0 ") == Motif(Collective.ALL_REDUCE, (0, 1), ((0, 4),))
    assert parse_composition("((AllReduce(0,1)[0:4]))") == Motif(Collective.ALL_REDUCE, (0, 1), ((0, 4),))
    assert parse_motif("Reduce(2,0)[1:3] ch4") == Motif(Collective.REDUCE, (2, 0), ((1, 3),), channel=4)


def test_nested_compositions_keep_their_structure():
    a, b, c = (Motif(Collective.ALL_REDUCE, (0, 1), ((k, k + 1),)) for k in range(3))
    for plan in (Seq((Seq((a, b)), c)), Seq((a, Seq((b, c)))), Par((Seq((a, b)), c)), Seq((Par((a, b)), c))):
        assert parse_composition(str(plan)) == plan


# -------------------------------------------------------------- round trips
KINDS = list(Collective)


@st.composite
def comm_ops(draw):
    kind = draw(st.sampled_from(KINDS))
    ranks = draw(st.permutations(range(draw(st.integers(1, 9)))))
    return comm_op(kind, ranks, draw(st.integers(0, 10 ** 9)), draw(st.sampled_from([1, 2, 4, 8])))


def transform(draw, plan):
    """One operator, applied (through :func:`rewrite`) to the motifs it fits."""
    pieces, n, channel = draw(st.integers(1, 4)), draw(st.integers(2, 5)), draw(st.integers(0, 3))
    step = draw(st.sampled_from(["segment", "ring", "tree", "all_to_all", "broadcast", "channel"]))
    if step == "segment":  # at most ``pieces`` segments per motif, whatever its size
        return rewrite(plan, lambda m: segment(m, max(1, -(-max(b - a for a, b in m.ranges) // pieces))))
    if step == "channel":
        return on_channel(plan, channel)
    operator, kind = {"ring": (spline_ring, Collective.ALL_REDUCE),
                      "tree": (lambda m: spline_tree(m, n), Collective.ALL_REDUCE),
                      "all_to_all": (lambda m: spline_all_to_all(m, n - 1), Collective.ALL_TO_ALL),
                      "broadcast": (spline_broadcast, Collective.BROADCAST)}[step]
    return rewrite(plan, operator, lambda m: m.kind is kind)


@st.composite
def operator_plans(draw):
    """A comm-op and a random chain of operators applied to it."""
    plan = draw(comm_ops())
    for _ in range(draw(st.integers(0, 4))):
        plan = transform(draw, plan)
    return plan


compositions = st.recursive(
    operator_plans(),
    lambda inner: st.builds(Seq, st.lists(inner, min_size=2, max_size=3).map(tuple))
    | st.builds(Par, st.lists(inner, min_size=2, max_size=3).map(tuple)),
    max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(compositions)
def test_every_composed_plan_round_trips_through_its_text(plan):
    text = str(plan)
    assert parse_composition(text) == plan
    for motif in motifs_of(plan):
        check_motif(motif)
        assert parse_motif(str(motif)) == motif


@settings(max_examples=100, deadline=None)
@given(operator_plans())
def test_parsing_ignores_extra_whitespace(plan):
    spaced = str(plan).replace("(", " ( ").replace("[", " [ ").replace(":", " : ").replace(",", " , ")
    assert parse_composition(spaced) == plan


# ----------------------------------------------------------------- malformed
MALFORMED = [
    ("", "empty plan text"),
    ("   ", "empty plan text"),
    ("AllReduce(0,1", "ends early"),
    ("AllReduce(0,1)[0:4", "ends early: expected ']'"),
    ("AllReduce(0,1)", "ends early: expected '['"),
    ("AllReduce(0,1)[0:4] ch", "ends early: expected a number"),
    ("Foo(0,1)[0:4]", "unknown motif kind 'Foo'"),
    ("allreduce(0,1)[0:4]", "unknown motif kind 'allreduce'"),
    ("AllReduce()[0:4]", "column 11 near ')[0:4]': expected a number"),
    ("AllReduce(0,-1)[0:4]", "unexpected character '-'"),
    ("AllReduce(0;1)[0:4]", "unexpected character ';'"),
    ("AllReduce(0,1)[4:2]", "range [4:2] of AllReduce is not a range"),
    ("AllReduce(0,1)[0-4]", "unexpected character '-'"),
    ("AllReduce(0,1)[0:2][2:4]", "AllReduce over 2 ranks needs 1 range(s), got 2"),
    ("ReduceScatter(0,1,2)[0:2][2:4]", "ReduceScatter over 3 ranks needs 3 range(s), got 2"),
    ("AllGather(1,1)[0:2][2:4]", "needs distinct ranks"),
    ("AllToAll(0,1)[0:4]", "AllToAll needs a destination window"),
    ("AllToAll(0,1)[0:4] dst+[1:3]", "destination window [1:3] of AllToAll over 2 ranks must lie in [0:2]"),
    ("AllToAll(0,1)[0:4] dst[0:1]", "expected '+'"),
    ("Broadcast(0,1)[0:4] dst+[0:1]", "only AllToAll has a destination window, not Broadcast"),
    ("AllReduce(0,1)[0:4] ch1 ch2", "column 25 near 'ch2': unexpected text after the end of the plan"),
    ("AllReduce(0,1)[0:4] AllReduce(0,1)[4:8]", "unexpected text after the end of the plan"),
    ("(AllReduce(0,1)[0:4] -> AllReduce(0,1)[0:4] || AllReduce(0,1)[0:4])", "'->' and '||' mixed"),
    ("(AllReduce(0,1)[0:4] -> )", "column 25 near ')': expected a motif kind"),
    ("(AllReduce(0,1)[0:4] AllReduce(0,1)[0:4])", "expected '->', '||' or ')'"),
    ("()", "expected a motif kind"),
    ("(AllReduce(0,1)[0:4]", "ends early: expected '->', '||' or ')'"),
    ("AllReduce(0,1)[0:4])", "unexpected text after the end of the plan"),
    ("AllReduce(0,1)[0:4] -> AllReduce(0,1)[0:4]", "unexpected text after the end of the plan"),
    ("(AllReduce(0,1)[0:4] => AllReduce(0,1)[0:4])", "unexpected character '='"),
]


@pytest.mark.parametrize("text, message", MALFORMED)
def test_malformed_text_is_rejected_with_one_line_naming_the_part(text, message):
    with pytest.raises(InvalidInputError) as error:
        parse_composition(text)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_the_error_names_the_motif_deep_inside_a_long_plan():
    plan = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(4), 100), 10), spline_ring)
    text = str(plan).replace("AllGather(0,1,2,3)[40:42]", "AllGather(0,1,2,3)[42:40]")
    with pytest.raises(InvalidInputError, match=r"near 'AllGather\(0,1,2,3\)\[42:40\].*range \[42:40\]"):
        parse_composition(text)


def test_motif_parse_wants_exactly_one_motif():
    with pytest.raises(InvalidInputError, match="expected one motif, got a composition"):
        parse_motif("(AllReduce(0,1)[0:2] || AllReduce(0,1)[2:4])")


@pytest.mark.parametrize("motif, message", [
    (Motif(Collective.ALL_REDUCE, (), ((0, 1),)), "needs distinct ranks"),
    (Motif(Collective.ALL_REDUCE, (0, 1), ((0, 1),), window=(0, 1)), "only AllToAll"),
    (Motif(Collective.ALL_REDUCE, (0, 1), ((0, 1),), channel=-1), "channel -1"),
])
def test_check_motif_rejects_what_has_no_text_form(motif, message):
    with pytest.raises(InvalidInputError, match=message):
        check_motif(motif)
