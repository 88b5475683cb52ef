"""Planning end to end (§2.2–3.2): the lower bound under every plan, lowered
programs that give each destination exactly its slice, Table 2's cases."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.plan.resharding import ReshardProgram, Strategy
from optimizer_service.resharding.cases import TABLE2_CASES, scaled_shape, table2_case
from optimizer_service.resharding.mesh import Mesh
from optimizer_service.resharding.planner import ALGORITHMS, plan_request, plan_resharding
from optimizer_service.resharding.request import ReshardRequest, build_request
from tests.optimizer_service.resharding.test_unit_tasks import endpoint
from tests.optimizer_service.resharding.topologies import emulated, two_level


def assert_program_delivers_every_slice(plan):
    program = plan.program
    assert ReshardProgram.parse(str(program)) == program
    assert [task.order for task in program.tasks] == list(range(len(plan.unit_tasks)))
    assert program.algorithm == plan.algorithm and program.predicted_seconds == plan.predicted_seconds
    for rank, box in program.destinations.items():
        received = [task.box for task in program.tasks_of(rank)]
        assert all(rank in task.receivers for task in program.tasks_of(rank))
        assert all(box.contains(part) for part in received)
        assert all(a.intersect(b).empty for k, a in enumerate(received) for b in received[k + 1:])
        assert sum(part.elements for part in received) == box.elements, f"rank {rank} does not get all of [{box}]"
    starts = [plan.starts[i] for i in plan.order]
    assert starts == sorted(starts)


@st.composite
def requests(draw):
    rank = draw(st.integers(1, 3))
    tensor = tuple(draw(st.lists(st.integers(1, 12), min_size=rank, max_size=rank)))
    (src_spec, src_shape), (dst_spec, dst_shape) = draw(endpoint(rank)), draw(endpoint(rank))
    topology = draw(st.sampled_from([emulated(6, 4), two_level(6, 4, nic_latency=1e-4, loopback=5e9)]))
    if draw(st.booleans()):                     # explicit meshes, possibly sharing hosts
        ranks = draw(st.permutations(range(24)))
        n_src, n_dst = math.prod(src_shape), math.prod(dst_shape)
        src = Mesh(src_shape, tuple(ranks[:n_src]))
        dst = Mesh(dst_shape, tuple(ranks[n_src:n_src + n_dst]))
    else:
        src, dst = src_shape, dst_shape
    strategy = draw(st.sampled_from(list(Strategy)))
    request = build_request(tensor, src_spec, src, dst_spec, dst, topology, element_bytes=draw(st.integers(1, 8)),
                            strategy=strategy)
    return request, topology


@given(requests())
@settings(max_examples=60, deadline=None)
def test_the_lower_bound_is_below_every_plan_and_every_program_delivers(case):
    request, topology = case
    plans = plan_request(request, topology, max_nodes=2000, seed=1)
    assert [p.algorithm for p in plans] == list(ALGORITHMS)
    for plan in plans:
        assert plan.lower_bound_seconds <= plan.predicted_seconds * (1 + 1e-9)
        assert_program_delivers_every_slice(plan)
        for i, task in enumerate(plan.unit_tasks):
            assert plan.senders[i] in task.sources_on(plan.sender_hosts[i])
    by_name = {p.algorithm: p.predicted_seconds for p in plans}
    assert by_name["ensemble"] <= min(by_name["naive"], by_name["lb"]) * (1 + 1e-12)
    assert by_name["dfs"] <= min(by_name["naive"], by_name["lb"]) * (1 + 1e-12)


def test_request_text_round_trips():
    request = build_request((64, 64, 32), "S^0RR", (2, 4), "RS^0R", "2x4", emulated(4, 4))
    text = str(request)
    assert text == ("reshard 64x64x32 S^0RR@[[0,1,2,3],[4,5,6,7]] -> RS^0R@[[8,9,10,11],[12,13,14,15]] "
                    "element_bytes=4 strategy=broadcast")
    assert ReshardRequest.parse(text) == request
    with pytest.raises(InvalidInputError, match="both meshes must list their ranks"):
        ReshardRequest.parse("reshard 4x4 S^0R@2x2 -> RR@2x2 element_bytes=4 strategy=broadcast")


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(shape=(64, 64)), InvalidInputError, "has 3 dimensions but the tensor 64x64 has 2"),
    (dict(src_spec="S^1RR", src_mesh=(4,)), InvalidInputError, "needs a 2-D mesh"),
    (dict(dst_mesh=(2, 8)), InvalidInputError, "puts 8 devices on a host"),
    (dict(dst_mesh=(3, 4)), InvalidInputError, "need 5 free hosts"),
    (dict(shape=(2**20, 2**20, 2**12)), SearchBoundError, "of 4-byte elements is larger than"),
    (dict(element_bytes=0), InvalidInputError, "element size 0 B"),
    (dict(shape=(64, 64, 64), src_spec="S^0S^1R", src_mesh=(2, 4), dst_spec="RS^0S^1", dst_mesh=(2, 4),
          algorithm="fifo"), InvalidInputError, "unknown load-balance algorithm 'fifo'"),
])
def test_bad_requests_are_one_line_errors(kwargs, error, message):
    args = dict(shape=(64, 64, 32), src_spec="S^0RR", src_mesh=(2, 4), dst_spec="RS^0R", dst_mesh=(2, 4))
    args.update(kwargs)
    with pytest.raises(error, match=message) as raised:
        plan_resharding(args.pop("shape"), args.pop("src_spec"), args.pop("src_mesh"), args.pop("dst_spec"),
                        args.pop("dst_mesh"), emulated(4, 4), **args)
    assert "\n" not in str(raised.value)


def test_too_many_unit_tasks_are_refused():
    topology = emulated(16, 16)
    with pytest.raises(SearchBoundError, match="makes 16384 unit tasks; at most 4096"):
        plan_resharding((128, 128, 4), "S^01RR", (8, 16), "RS^01R", (8, 16), topology)


def test_naive_sends_from_one_device_the_others_spread_over_hosts_and_devices():
    """Case 2: every source device holds the whole tensor."""
    case = table2_case("case2")
    topology = emulated(case.hosts, case.devices_per_host)
    plans = {p.algorithm: p for p in plan_request(case.request((64, 64, 32), topology), topology)}
    assert set(plans["naive"].senders) == {0}
    assert set(plans["ensemble"].sender_hosts) == {0, 1}
    assert plans["ensemble"].predicted_seconds < plans["naive"].predicted_seconds / 1.8


def test_planning_without_a_clock_is_deterministic():
    case = table2_case("case4")
    topology = emulated(case.hosts, case.devices_per_host)
    first = plan_request(case.request((64, 64, 32), topology), topology, seed=7)
    again = plan_request(case.request((64, 64, 32), topology), topology, seed=7)
    assert [str(p.program) for p in first] == [str(p.program) for p in again]


def test_cases_scale_and_name_themselves():
    assert scaled_shape(16) == (64, 64, 32)
    assert [c.name for c in TABLE2_CASES] == [f"case{i}" for i in range(1, 10)]
    assert str(table2_case("case4")) == "case4: RS^01R@2x4 -> S^01RR@2x4"
    with pytest.raises(InvalidInputError, match="unknown Table 2 case 'case10'"):
        table2_case("case10")


SHAPE = (256, 256, 128)


@pytest.mark.parametrize("case", TABLE2_CASES, ids=lambda c: c.name)
def test_table2_cases_plan_close_to_the_lower_bound(case):
    """On the emulated cluster the ensemble (AlpaComm) comes within 1.2x of the
    NIC bound, and the algorithms keep Figure 8's order."""
    topology = emulated(case.hosts, case.devices_per_host)
    plans = {p.algorithm: p for p in plan_request(case.request(SHAPE, topology), topology)}
    assert plans["ensemble"].ratio_to_lower_bound <= 1.2
    assert plans["ensemble"].predicted_seconds <= plans["lb"].predicted_seconds <= plans["naive"].predicted_seconds
    for plan in plans.values():
        assert_program_delivers_every_slice(plan)


@pytest.mark.parametrize("name", ["case3", "case9"])
def test_broadcast_with_scheduling_beats_send_recv_with_load_balance(name):
    case = table2_case(name)
    topology = emulated(case.hosts, case.devices_per_host)
    send_recv = plan_request(case.request(SHAPE, topology, strategy="send-recv"), topology, ("lb",))[0]
    broadcast = plan_request(case.request(SHAPE, topology), topology, ("ensemble",))[0]
    assert send_recv.predicted_seconds >= 3 * broadcast.predicted_seconds
    assert len(case.request(SHAPE, topology).src_mesh.ranks) == 8


def test_case4_schedules_64_unit_tasks():
    case = table2_case("case4")
    topology = emulated(case.hosts, case.devices_per_host)
    plan = plan_request(case.request(SHAPE, topology), topology, ("ensemble",))[0]
    assert len(plan.unit_tasks) == 64 and plan.search.optimal


@pytest.mark.parametrize("name", ["case4", "case9"])
@pytest.mark.parametrize("algorithm", ["naive", "lb", "ensemble"])
def test_each_tasks_after_replays_the_planned_host_schedule(name, algorithm):
    """Lowering (§3.2, Eq. 3): started when the tasks it names in ``after`` have
    finished, every task starts exactly when the plan has it start, and it names
    only tasks sharing its sender host's sending side or a receiver host's
    receiving side."""
    case = table2_case(name)
    topology = emulated(case.hosts, case.devices_per_host)
    plan = plan_request(case.request(SHAPE, topology), topology, (algorithm,))[0]
    finishes = []
    for k, task in enumerate(plan.program.tasks):
        i = plan.order[k]
        assert max((finishes[p] for p in task.after), default=0.0) == plan.starts[i]
        finishes.append(plan.finishes[i])
        for p in task.after:
            j = plan.order[p]
            assert plan.sender_hosts[j] == plan.sender_hosts[i] \
                or set(plan.unit_tasks[j].destination_hosts) & set(plan.unit_tasks[i].destination_hosts)
    assert any(task.after for task in plan.program.tasks)
