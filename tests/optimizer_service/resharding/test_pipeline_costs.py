"""Pipeline cost profiles: the GPT-like and U-Transformer-like stage profiles,
their text form, and what they refuse."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action
from optimizer_service.resharding.pipeline_costs import (
    TABLE1_ACTIVATION_BYTES,
    CommEdge,
    PipelineCosts,
    StageCost,
    gpt_like,
    u_transformer_like,
)


def pairs(costs: PipelineCosts) -> dict[tuple[int, int], tuple[float, float]]:
    return {(e.from_stage, e.to_stage): (e.forward_seconds, e.backward_seconds) for e in costs.all_edges()}


def test_gpt_like_connects_adjacent_stages_only():
    costs = gpt_like(4, forward_seconds=1.0, backward_seconds=3.0, comm_seconds=[0.1, 0.2, 0.3],
                     weight_share=1 / 3)
    assert pairs(costs) == {(0, 1): (0.1, 0.1), (1, 2): (0.2, 0.2), (2, 3): (0.3, 0.3)}
    assert costs.stages[2].forward == 1.0 and costs.stages[2].backward == pytest.approx(3.0)
    assert costs.stages[2].backward_weight == pytest.approx(1.0) and costs.stages[2].backward_input == pytest.approx(2)
    assert costs.seconds(Action.parse("1B0")) == pytest.approx(3.0)
    assert costs.seconds(Action.parse("1I0")) == pytest.approx(2.0)
    assert costs.seconds(Action.parse("1W0")) == pytest.approx(1.0)
    assert costs.downstream(1) == (2,) and costs.upstream(1) == (0,) and costs.downstream(3) == ()
    assert costs.stages[0].activation_bytes == TABLE1_ACTIVATION_BYTES == 48 * 2**20


def test_u_transformer_like_adds_mirrored_skip_edges():
    costs = u_transformer_like(5, comm_seconds=1.0, skip_seconds=[5.0, 3.0], backward_comm_seconds=2.0)
    assert pairs(costs) == {(0, 1): (1.0, 2.0), (1, 2): (1.0, 2.0), (2, 3): (1.0, 2.0), (3, 4): (1.0, 2.0),
                            (0, 4): (5.0, 5.0), (1, 3): (3.0, 3.0)}
    assert costs.downstream(0) == (1, 4) and costs.upstream(4) == (0, 3) and costs.upstream(3) == (1, 2)


def test_a_skip_edge_between_adjacent_stages_shares_their_link():
    costs = u_transformer_like(4, comm_seconds=1.0, skip_seconds=4.0)
    assert pairs(costs) == {(0, 1): (1.0, 1.0), (1, 2): (5.0, 5.0), (2, 3): (1.0, 1.0), (0, 3): (4.0, 4.0)}
    two = u_transformer_like(2, comm_seconds=1.0)       # the paper's two-stage U-Transformer: all on one boundary
    assert pairs(two) == {(0, 1): (2.0, 2.0)}


def test_missing_adjacent_edges_cost_nothing():
    costs = PipelineCosts("plain", (StageCost(1, 1, 1),) * 3)
    assert pairs(costs) == {(0, 1): (0.0, 0.0), (1, 2): (0.0, 0.0)}
    with pytest.raises(InvalidInputError, match="stages 0 and 2 are not connected"):
        costs.edge(0, 2)


def test_scaling_communication():
    costs = u_transformer_like(3, comm_seconds=1.0)
    assert set(pairs(costs.with_comm_scaled(0)).values()) == {(0.0, 0.0)}
    assert pairs(costs.with_comm_scaled(2))[(0, 2)] == (2.0, 2.0)


def test_the_text_form_round_trips():
    costs = u_transformer_like(3, forward_seconds=[0.01, 0.02, 0.03], comm_seconds=0.004, activation_bytes=1000)
    text = str(costs)
    assert text.splitlines()[0] == "pipeline-costs u-transformer stages=3"
    assert "stage 1: F=0.02 I=0.01 W=0.01 activation=1000" in text
    assert "edge 0>2: F=0.004 B=0.004" in text
    assert PipelineCosts.parse(text) == costs


seconds = st.floats(0, 10, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.lists(seconds, min_size=6, max_size=6), st.sampled_from([gpt_like, u_transformer_like]),
       st.floats(0, 1), st.integers(0, 2**40))
def test_any_profile_round_trips(stages, values, profile, share, activation):
    f, b, c, cb, *_ = values
    costs = profile(stages, f, b, c, backward_comm_seconds=cb, weight_share=share, activation_bytes=activation)
    assert PipelineCosts.parse(str(costs)) == costs


@pytest.mark.parametrize("make, message", [
    (lambda: gpt_like(0), "at least one stage"),
    (lambda: gpt_like(3, forward_seconds=-1.0), "forward time is -1.0"),
    (lambda: gpt_like(3, comm_seconds=[1.0]), "communication seconds per boundary: 1 values given for 2"),
    (lambda: gpt_like(3, weight_share=1.5), "weight-gradient share 1.5"),
    (lambda: gpt_like(2, backward_seconds=float("nan")), "input-gradient time is nan"),
    (lambda: u_transformer_like(4, skip_seconds=[1.0, 2.0, 3.0]), "3 values given for 2"),
    (lambda: CommEdge(2, 1, 0, 0), "from < to"),
    (lambda: PipelineCosts("x", (StageCost(1, 1, 1),) * 2, (CommEdge(0, 2, 0, 0),)), "names stage 2"),
    (lambda: PipelineCosts("x", (StageCost(1, 1, 1),) * 2, (CommEdge(0, 1, 0, 0),) * 2), "listed twice"),
    (lambda: PipelineCosts("x", ()), "at least one stage"),
    (lambda: StageCost(1, 1, 1, -5), "activation size -5"),
    (lambda: PipelineCosts.parse("pipeline-costs x stages=1\nstage 0: F=1 I=1 W=1"), "is not 'stage 0"),
    (lambda: PipelineCosts.parse("pipeline-costs x stages=2\nstage 0: F=1 I=1 W=1 activation=0"), "list 1"),
    (lambda: PipelineCosts.parse("costs x"), "start with 'pipeline-costs NAME stages=S'"),
    (lambda: PipelineCosts.parse("pipeline-costs x stages=1\nstage 0: F=1..0 I=1 W=1 activation=0"),
     "a number that is not one"),
])
def test_bad_costs_are_one_line(make, message):
    with pytest.raises(InvalidInputError, match=message) as error:
        make()
    assert "\n" not in str(error.value)
