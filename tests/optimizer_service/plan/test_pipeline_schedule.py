"""The pipeline schedule contract (optimizer_service/plan/pipeline.py): actions
and schedules as text, both ways, and the checks the value makes itself."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule

DOCSTRING_EXAMPLE = """eager-1f1b stages=2 microbatches=3
0: 0F0 0F1 0F2 0B0 0B1 0B2
1: 1F0 1B0 1F1 1B1 1F2 1B2"""


def test_an_action_reads_and_prints_like_pytorch_schedules():
    action = Action.parse("2F0")
    assert action == Action(2, ActionKind.FORWARD, 0)
    assert str(action) == repr(action) == "2F0"
    assert [str(Action.parse(t)) for t in ["0B12", " 3I4 ", "10W0"]] == ["0B12", "3I4", "10W0"]


@pytest.mark.parametrize("text", ["", "F0", "2X0", "2F", "-1F0", "2 F 0", "2f0"])
def test_a_bad_action_is_one_line_naming_it(text):
    with pytest.raises(InvalidInputError, match="is not STAGE KIND MICROBATCH") as error:
        Action.parse(text)
    assert "\n" not in str(error.value)


def test_the_docstring_example_round_trips():
    schedule = PipelineSchedule.parse(DOCSTRING_EXAMPLE)
    assert schedule.name == "eager-1f1b" and schedule.stage_count == 2 and schedule.microbatches == 3
    assert [str(a) for a in schedule.stages[1]] == ["1F0", "1B0", "1F1", "1B1", "1F2", "1B2"]
    assert str(schedule) == DOCSTRING_EXAMPLE
    assert PipelineSchedule.parse(str(schedule)) == schedule


actions = st.builds(Action, st.integers(0, 3), st.sampled_from(list(ActionKind)), st.integers(0, 5))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(actions, max_size=8), min_size=1, max_size=4),
       st.sampled_from(["gpipe", "1f1b", "eager-1f1b-wd", "mine_2.0"]))
def test_any_valid_value_round_trips(rows, name):
    stages = tuple(tuple(Action(s, a.kind, a.microbatch) for a in row) for s, row in enumerate(rows))
    schedule = PipelineSchedule(name, 6, stages)
    assert PipelineSchedule.parse(str(schedule)) == schedule


@pytest.mark.parametrize("make, message", [
    (lambda: PipelineSchedule("x", 2, ()), "at least one stage"),
    (lambda: PipelineSchedule("x", 0, ((),)), "at least one micro-batch"),
    (lambda: PipelineSchedule("two words", 1, ((),)), "must be one word"),
    (lambda: PipelineSchedule("x", 2, ((Action.parse("1F0"),),)), "action 1F0 is listed under stage 0"),
    (lambda: PipelineSchedule("x", 2, ((Action.parse("0F2"),),)), "micro-batch 2 is outside 0..1"),
])
def test_the_value_checks_itself(make, message):
    with pytest.raises(InvalidInputError, match=message):
        make()


@pytest.mark.parametrize("text, message", [
    ("", "starts with 'NAME stages=S microbatches=M'"),
    ("x stages=2\n0: 0F0", "starts with 'NAME stages=S microbatches=M'"),
    ("x stages=2 microbatches=1\n0: 0F0 0B0", "says stages=2 but lists 1"),
    ("x stages=1 microbatches=1\n1: 0F0 0B0", "should start with '0:'"),
    ("x stages=1 microbatches=1\n0: 0F0 0Q0", "'0Q0' is not STAGE KIND MICROBATCH"),
])
def test_bad_text_says_what_is_wrong(text, message):
    with pytest.raises(InvalidInputError, match=message):
        PipelineSchedule.parse(text)
