"""The plan as a protocol buffer: values ⇄ proto ⇄ JSON round trips, and bad
messages are one-line PlanErrors."""

import pytest
from hypothesis import given, settings

from optimizer_service.errors import PlanError
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.proto_codec import MAX_DEPTH, plan_from_proto, plan_to_proto
from p2.v1 import plan_pb2
from tests.support.plans import plans, sample_plan


def wire(plan: Plan) -> Plan:
    """Through the proto's bytes, as the service and the enforcer exchange it."""
    return plan_from_proto(plan_pb2.Plan.FromString(plan_to_proto(plan).SerializeToString()))


def test_the_sample_plan_round_trips_through_bytes():
    plan = sample_plan()
    assert wire(plan) == plan
    assert wire(plan).to_json() == plan.to_json()


def test_unset_optional_fields_stay_unset():
    plan = Plan(1, 2, {0: None}, ())
    message = plan_to_proto(plan)
    assert not message.HasField("topology") and not message.HasField("predicted_iteration_seconds")
    assert not message.channels[0].HasField("interface")
    assert wire(plan) == plan


@settings(max_examples=80, deadline=None)
@given(plans())
def test_random_plans_round_trip_values_proto_json(plan):
    through_proto = wire(plan)
    assert through_proto == plan
    assert Plan.parse(through_proto.to_json()) == plan
    assert wire(Plan.parse(plan.to_json())) == plan


def test_no_channels_means_channel_zero_like_the_json_default():
    assert plan_from_proto(plan_pb2.Plan(version=1, world_size=1)).channels == {0: None}


def _message(**changes) -> plan_pb2.Plan:
    message = plan_to_proto(sample_plan())
    for path, value in changes.items():
        target = message
        *parents, name = path.split("__")
        for parent in parents:
            target = target[int(parent)] if parent.isdigit() else getattr(target, parent)
        if isinstance(value, list):
            getattr(target, name)[:] = value
        else:
            setattr(target, name, value)
    return message


@pytest.mark.parametrize("changes, expected", [
    ({"version": 0}, "plan version must be >= 1, got 0"),
    ({"world_size": 0}, "plan world_size must be >= 1"),
    ({"ops__0__key__kind": "gather"}, "unknown kind 'gather'"),
    ({"ops__0__key__group": [4]}, "uses group position 1 but the group has 1 members"),
    ({"ops__1__composition__par__parts__0__seq__parts__0__motif__channel": 7}, "uses channel 7"),
    ({"ops__0__composition__seq__parts__0__motif__collective": 0}, "motif collective 0 is not one of"),
])
def test_bad_messages_are_one_line_plan_errors(changes, expected):
    with pytest.raises(PlanError, match=expected) as error:
        plan_from_proto(_message(**changes))
    assert "\n" not in str(error.value)


def test_missing_parts_are_named():
    message = plan_to_proto(sample_plan())
    message.ops[0].ClearField("composition")
    with pytest.raises(PlanError, match="missing field 'composition'"):
        plan_from_proto(message)
    message.ops[0].ClearField("key")
    with pytest.raises(PlanError, match=r"plan ops\[0\]: missing field 'key'"):
        plan_from_proto(message)
    empty = plan_to_proto(sample_plan())
    empty.ops[0].composition.seq.parts[0].Clear()
    with pytest.raises(PlanError, match="an empty composition node"):
        plan_from_proto(empty)


def test_a_channel_listed_twice_is_refused():
    message = plan_to_proto(sample_plan())
    message.channels.add(id=1)
    with pytest.raises(PlanError, match="channel 1 is listed twice"):
        plan_from_proto(message)


def test_nesting_is_bounded():
    leaf = plan_pb2.Composition(motif=plan_pb2.Motif(collective=plan_pb2.ALL_REDUCE, ranks=[0],
                                                     ranges=[plan_pb2.Range(lo=0, hi=1)]))
    node = leaf
    for _ in range(MAX_DEPTH + 2):
        node = plan_pb2.Composition(seq=plan_pb2.Parts(parts=[node, leaf]))
    message = plan_pb2.Plan(version=1, world_size=1, ops=[plan_pb2.OpPlan(
        key=plan_pb2.OpKey(seq=0, kind="all_reduce", bytes=4, group=[0]), composition=node)])
    with pytest.raises(PlanError, match=f"nested deeper than {MAX_DEPTH} levels"):
        plan_from_proto(message)
