"""Pipeline schedules (§4): the orders each generator makes, eager-1F1B's
warm-up counts, and the validation that explains a bad schedule."""

import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.resharding.pipeline_costs import gpt_like
from optimizer_service.resharding.pipeline_schedules import (
    SCHEDULE_NAMES,
    build_schedule,
    choose_weight_delays,
    delay_weights,
    eager_1f1b,
    eager_1f1b_wd,
    gpipe,
    one_f_one_b,
    warmup_1f1b,
    warmup_eager,
)
from optimizer_service.plan.pipeline_validate import ScheduleError, check_schedule, render_grid

F = ActionKind.FORWARD


def rows(schedule: PipelineSchedule) -> list[list[str]]:
    return [[str(a) for a in actions] for actions in schedule.stages]


def schedule_of(*lines: str, microbatches: int = 2, name: str = "bad") -> PipelineSchedule:
    return PipelineSchedule(name, microbatches, tuple(tuple(Action.parse(w) for w in line.split()) for line in lines))


def test_gpipe_runs_every_forward_then_every_backward():
    assert rows(gpipe(2, 3)) == [["0F0", "0F1", "0F2", "0B0", "0B1", "0B2"],
                                 ["1F0", "1F1", "1F2", "1B0", "1B1", "1B2"]]


def test_1f1b_warms_up_with_stages_minus_i_forwards():
    assert rows(one_f_one_b(3, 4)) == [
        ["0F0", "0F1", "0F2", "0B0", "0F3", "0B1", "0B2", "0B3"],
        ["1F0", "1F1", "1B0", "1F2", "1B1", "1F3", "1B2", "1B3"],
        ["2F0", "2B0", "2F1", "2B1", "2F2", "2B2", "2F3", "2B3"],
    ]


def test_eager_1f1b_warms_up_with_twice_as_many_forwards_less_one():
    assert rows(eager_1f1b(3, 6)) == [
        ["0F0", "0F1", "0F2", "0F3", "0F4", "0B0", "0F5", "0B1", "0B2", "0B3", "0B4", "0B5"],
        ["1F0", "1F1", "1F2", "1B0", "1F3", "1B1", "1F4", "1B2", "1F5", "1B3", "1B4", "1B5"],
        ["2F0", "2B0", "2F1", "2B1", "2F2", "2B2", "2F3", "2B3", "2F4", "2B4", "2F5", "2B5"],
    ]


def test_eager_1f1b_is_the_contracts_docstring_example():
    assert str(eager_1f1b(2, 3)) == ("eager-1f1b stages=2 microbatches=3\n"
                                     "0: 0F0 0F1 0F2 0B0 0B1 0B2\n"
                                     "1: 1F0 1B0 1F1 1B1 1F2 1B2")


def forwards_before_first_backward(actions) -> int:
    return next(k for k, a in enumerate(actions) if a.kind is not F)


@pytest.mark.parametrize("stages", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("microbatches", [1, 3, 8, 32])
def test_warm_up_counts_in_the_papers_one_based_numbering(stages, microbatches):
    """§4: stage i (1-based) runs #stages - i + 1 forwards in 1F1B and
    2 x (#stages - i) + 1 in eager-1F1B before its first backward."""
    for s in range(stages):
        i = s + 1
        assert forwards_before_first_backward(one_f_one_b(stages, microbatches).stages[s]) == \
            warmup_1f1b(s, stages, microbatches) == min(stages - i + 1, microbatches)
        assert forwards_before_first_backward(eager_1f1b(stages, microbatches).stages[s]) == \
            warmup_eager(s, stages, microbatches) == min(2 * (stages - i) + 1, microbatches)
        assert forwards_before_first_backward(eager_1f1b_wd(stages, microbatches).stages[s]) == \
            warmup_eager(s, stages, microbatches)
    # the last stage never warms up more than 1F1B does; the extra forwards are at most S - 1
    assert warmup_eager(stages - 1, stages, microbatches) == warmup_1f1b(stages - 1, stages, microbatches)
    assert max(warmup_eager(s, stages, microbatches) - warmup_1f1b(s, stages, microbatches)
               for s in range(stages)) <= stages - 1


def test_weight_delay_moves_w_past_the_next_actions():
    assert rows(eager_1f1b_wd(2, 3, [0, 1])) == [
        ["0F0", "0F1", "0F2", "0I0", "0W0", "0I1", "0W1", "0I2", "0W2"],
        ["1F0", "1I0", "1F1", "1W0", "1I1", "1F2", "1W1", "1I2", "1W2"],
    ]
    # delayed past the end: at the end, in micro-batch order
    assert [str(a) for a in eager_1f1b_wd(2, 3, 9).stages[1]] == \
        ["1F0", "1I0", "1F1", "1I1", "1F2", "1I2", "1W0", "1W1", "1W2"]
    with pytest.raises(InvalidInputError, match="delay of -1"):
        delay_weights(eager_1f1b_wd(2, 2).stages[0], -1)
    with pytest.raises(InvalidInputError, match="3 weight delays given for 2 stages"):
        eager_1f1b_wd(2, 2, [0, 0, 0])


def test_weight_delays_are_chosen_by_the_cost_model():
    costs = gpt_like(4, comm_seconds=0.004)
    assert choose_weight_delays(4, 8, costs) == (0, 0, 0, 2)
    # without communication nothing is worth an activation held longer, but the last stage's I still goes first
    assert build_schedule("eager-1f1b-wd", 4, 8) == eager_1f1b_wd(4, 8, 0)


def test_build_schedule_knows_every_name():
    for name in SCHEDULE_NAMES:
        schedule = build_schedule(name, 3, 5)
        assert schedule.name == name and schedule.microbatches == 5 and schedule.stage_count == 3
    with pytest.raises(InvalidInputError, match="unknown pipeline schedule 'zb-h1'; known: gpipe, 1f1b"):
        build_schedule("zb-h1", 2, 2)
    with pytest.raises(InvalidInputError, match="at least one micro-batch"):
        build_schedule("eager-1f1b-wd", 2, 0)
    with pytest.raises(InvalidInputError, match="at least one stage"):
        build_schedule("1f1b", 0, 2)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(SCHEDULE_NAMES), st.integers(1, 8), st.integers(1, 24), st.integers(0, 4))
def test_every_generated_schedule_validates_and_round_trips(name, stages, microbatches, delay):
    schedule = build_schedule(name, stages, microbatches, delays=delay if name == "eager-1f1b-wd" else None)
    facts = check_schedule(schedule)
    assert facts.split_backward == (name == "eager-1f1b-wd")
    assert PipelineSchedule.parse(str(schedule)) == schedule
    if not facts.split_backward:
        # unit-time dry run: every micro-batch through every stage and back, (M + S - 1) double steps
        assert facts.steps == 2 * (microbatches + stages - 1)


def test_the_dry_run_counts_the_bubble_in_steps():
    facts = check_schedule(one_f_one_b(4, 8))
    assert facts.steps == 22
    assert facts.idle_steps == (6, 6, 6, 6)        # 2 (S - 1) per stage
    assert check_schedule(eager_1f1b(4, 8)).idle_steps == (6, 6, 6, 6)
    assert check_schedule(gpipe(4, 8)).idle_steps == (6, 6, 6, 6)


@pytest.mark.parametrize("lines, message, marked", [
    (("0F0 0F1 0B0", "1F0 1B0 1F1 1B1"), "stage 0 never runs the backward of micro-batch 1", "backward of 1 missing"),
    (("0B0 0F0 0F1 0B1", "1F0 1B0 1F1 1B1"), "stage 0 runs 0B0 before 0F0", "0F0 has not run"),
    (("0F0 0F1 0B0 0B1", "1F0 1B0 1F0 1B1"), r"stage 1 runs 1F0 twice \(positions 0 and 2\)", "1F0 again"),
    (("0F0 0F1 0B0 0B1", "1F0 1F1 1I0 1W1 1I1 1W0"), "stage 1 runs 1W1 before 1I1", "1I1 has not run"),
    (("0F0 0F1 0B0 0B1", "1F0 1I0 1B0 1F1 1B1"), "mixes a whole backward B with I/W for micro-batch 0",
     "B or I\\+W"),
    (("0F0 0F1 0B0 0B1", "1F0 1I0 1F1 1B1"), "stage 1 never runs 1W0", "1W0 missing"),
])
def test_a_bad_structure_is_named_and_marked_on_the_grid(lines, message, marked):
    with pytest.raises(ScheduleError, match=message) as error:
        check_schedule(schedule_of(*lines))
    assert isinstance(error.value, InvalidInputError) and "\n" not in str(error.value)
    marked_line, = [line for line in error.value.grid.splitlines() if "<-- ERROR HERE" in line]
    assert re.search(marked, marked_line)


def test_a_deadlock_is_found_by_the_dry_run_and_drawn():
    # stage 0 wants 0B0 before it sends 0F1; stage 1 wants 1F1 before it sends 1B0
    bad = schedule_of("0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1")
    with pytest.raises(ScheduleError) as error:
        check_schedule(bad)
    assert str(error.value) == ("schedule bad deadlocks at step 2: 0B0 waits for the backward of micro-batch 0 on "
                                "stage 1, 1F1 waits for 0F1; reorder the stages' actions so each one's input is "
                                "produced first")
    assert error.value.grid.splitlines() == [
        "step    0    1    2",
        "stage 0 0F0  .    0B0  <-- ERROR HERE (0B0 waits for 1B0)",
        "stage 1 .    1F0",
    ]
    assert error.value.explain().splitlines()[0] == str(error.value)
    copy = pickle.loads(pickle.dumps(error.value))      # crosses a process boundary with its grid
    assert type(copy) is ScheduleError and (str(copy), copy.grid) == (str(error.value), error.value.grid)


def test_the_dry_run_order_is_step_by_step_then_stage_by_stage():
    facts = check_schedule(one_f_one_b(2, 2))
    # steps: 0F0 | 0F1 1F0 | 1B0 | 0B0 1F1 | 1B1 | 0B1
    assert [str(a) for a in facts.order] == ["0F0", "0F1", "1F0", "1B0", "0B0", "1F1", "1B1", "0B1"]
    assert facts.steps == 6


def test_render_grid_marks_one_past_the_end():
    grid = render_grid([["0F0"], ["1F0", "1B0"]], (0, 1, "missing"), header="position")
    assert grid.splitlines()[1] == "stage 0 0F0  <-- ERROR HERE (missing)"
