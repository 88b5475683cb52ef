"""The pipeline simulator (§4, §5.3.2): hand-computed timelines, the paper's
claims about eager-1F1B and backward weight delaying, memory, a dependency
check of every timeline over random pipelines, and the two link models
(a channel per directed edge; a stage's egress and ingress shared, §3)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.resharding.pipeline_costs import PipelineCosts, gpt_like, u_transformer_like
from optimizer_service.resharding.pipeline_schedules import (
    SCHEDULE_NAMES,
    build_schedule,
    eager_1f1b,
    eager_1f1b_wd,
    gpipe,
    one_f_one_b,
)
from optimizer_service.resharding.pipeline_sim import LINK_MODELS, PipelineTimeline, TransferTiming, simulate
from optimizer_service.plan.pipeline_validate import ScheduleError

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT
MIB = 2**20


def toy(comm: float, stages: int = 2) -> PipelineCosts:
    """F = 1, B = 2 (I = W = 1), ``comm`` each way, 10 bytes of activation."""
    return gpt_like(stages, forward_seconds=1.0, backward_seconds=2.0, comm_seconds=comm, activation_bytes=10)


def times(timeline: PipelineTimeline) -> dict[str, tuple[float, float]]:
    return {str(t.action): (t.start, t.end) for stage in timeline.actions for t in stage}


def test_1f1b_without_communication_by_hand():
    t = simulate(one_f_one_b(2, 3), toy(0.0))
    assert times(t) == {"0F0": (0, 1), "0F1": (1, 2), "0B0": (4, 6), "0F2": (6, 7), "0B1": (7, 9), "0B2": (10, 12),
                        "1F0": (1, 2), "1B0": (2, 4), "1F1": (4, 5), "1B1": (5, 7), "1F2": (7, 8), "1B2": (8, 10)}
    assert t.iteration_seconds == 12 == (3 + 2 - 1) * 3      # (M + S - 1)(F + B)
    assert t.busy_seconds == (9, 9) and t.idle_seconds == (3, 3)
    assert t.bubble_fraction == pytest.approx(0.25)


def test_communication_delays_1f1b_but_eager_hides_the_forward_part():
    """S = 2, M = 3, 0.5 s each way (worked by hand in the module's terms)."""
    one = simulate(one_f_one_b(2, 3), toy(0.5))
    assert times(one)["1F0"] == (1.5, 2.5) and times(one)["0B0"] == (5, 7) and times(one)["1F1"] == (4.5, 5.5)
    assert one.iteration_seconds == 14
    eager = simulate(eager_1f1b(2, 3), toy(0.5))
    assert times(eager)["0F2"] == (2, 3) and times(eager)["1F2"] == (7.5, 8.5)
    assert eager.iteration_seconds == 13
    split = simulate(eager_1f1b_wd(2, 3, 0), toy(0.5))
    assert times(split)["1I0"] == (2.5, 3.5) and times(split)["0I0"] == (4, 5)   # the gradient leaves after I
    assert split.iteration_seconds == 12
    sent = [str(x) for x in split.transfers if x.direction is B]
    assert sent == ["1>0 B0 3.5-4", "1>0 B1 6.5-7", "1>0 B2 9.5-10"]


def test_without_overlap_a_send_holds_the_sender():
    t = simulate(one_f_one_b(2, 3), toy(0.5), overlap=False)
    assert times(t)["0F1"] == (1.5, 2.5)          # after 0F0's send
    assert times(t)["1F1"] == (5, 6)              # after 1B0's send
    assert simulate(one_f_one_b(4, 8), toy(0.5, 4), overlap=False).iteration_seconds > \
        simulate(one_f_one_b(4, 8), toy(0.5, 4)).iteration_seconds


def test_channels_are_fifo_per_directed_edge():
    t = simulate(gpipe(2, 3), toy(2.0))        # forwards end every second, transfers take two
    forward = [(x.microbatch, x.start, x.end) for x in t.transfers if x.direction is F]
    assert forward == [(0, 1, 3), (1, 3, 5), (2, 5, 7)]


def test_skip_edges_feed_the_mirrored_stage():
    costs = u_transformer_like(4, forward_seconds=1.0, backward_seconds=2.0, comm_seconds=0.0, skip_seconds=10.0)
    t = simulate(one_f_one_b(4, 1), costs)
    # 3F0 needs 0F0's activation over the skip edge 0>3 (0F0 ends at 1, + 10 s) and 2F0's, which waited for
    # 1F0's over 1>2, the middle skip edge (1F0 ends at 2, + 10 s, then 2F0 takes 1 s)
    assert times(t)["3F0"][0] == pytest.approx(max(1 + 10, 2 + 10 + 1))
    # 0B0 waits for the gradient of 3 back over the skip edge as well as 1B0's
    assert times(t)["0B0"][0] == pytest.approx(max(times(t)["1B0"][1], times(t)["3B0"][1] + 10))


def test_memory_holds_an_activation_from_forward_until_its_backward_is_done():
    one = simulate(one_f_one_b(2, 3), toy(0.0))
    # 0F0 0-1, 0F1 1-2, 0B0 4-6, 0F2 6-7 (0B0's activation goes as 0F2's comes), 0B1 7-9, 0B2 10-12
    assert one.memory[0] == ((0, 10), (1, 20), (9, 10), (12, 0))
    assert one.peak_activation_bytes == (20, 10) and one.peak_inflight_microbatches == (2, 1)
    assert simulate(eager_1f1b(2, 3), toy(0.0)).peak_activation_bytes == (30, 10)
    delayed = simulate(eager_1f1b_wd(2, 3, [0, 1]), toy(0.0))     # 1W0 after 1F1: two activations on stage 1
    assert delayed.peak_activation_bytes == (30, 20)


def respects_dependencies(t: PipelineTimeline, costs: PipelineCosts) -> None:
    """Every rule of the simulator's model, checked on its output."""
    eps = 1e-9
    ended = {str(a.action): a.end for stage in t.actions for a in stage}
    backward = {(a.action.stage, a.action.microbatch): a for stage in t.actions for a in stage
                if a.action.kind in (B, I)}
    arrival = {(x.from_stage, x.to_stage, x.direction, x.microbatch): x.end for x in t.transfers}
    for s, stage in enumerate(t.actions):
        assert [a.action for a in stage] == list(t.schedule.stages[s])           # program order
        for before, after in zip(stage, stage[1:]):
            assert after.start >= before.end - eps                               # one at a time
        for a in stage:
            _, kind, m = a.action
            assert a.end - a.start == pytest.approx(costs.seconds(a.action))
            if kind is F:
                for p in costs.upstream(s):
                    assert a.start >= arrival[(p, s, F, m)] - eps
            elif kind in (B, I):
                assert a.start >= ended[str(Action(s, F, m))] - eps
                for d in costs.downstream(s):
                    assert a.start >= arrival[(d, s, B, m)] - eps
            else:
                assert a.start >= ended[str(Action(s, I, m))] - eps
    for x in t.transfers:
        edge = costs.edge(min(x.from_stage, x.to_stage), max(x.from_stage, x.to_stage))
        seconds = edge.forward_seconds if x.direction is F else edge.backward_seconds
        assert x.end - x.start == pytest.approx(seconds)
        producer = ended[f"{x.from_stage}F{x.microbatch}"] if x.direction is F else \
            backward[(x.from_stage, x.microbatch)].end
        assert x.start >= producer - eps
    for channel in {x.channel for x in t.transfers}:
        mine = [x for x in t.transfers if x.channel == channel]
        mine.sort(key=lambda x: (x.microbatch, x.direction is B))                # the sender's order on one edge
        for before, after in zip(mine, mine[1:]):
            assert after.start >= before.end - eps                                # one transfer at a time, FIFO
    if not t.overlap:
        for s, stage in enumerate(t.actions):
            for a, after in zip(stage, stage[1:]):     # the stage is held until its sends, in turn, are done
                sent = sorted((x for x in t.transfers if x.from_stage == s and x.microbatch == a.action.microbatch
                               and x.direction is (F if a.action.kind is F else B)), key=lambda x: x.to_stage)
                if a.action.kind is not W:
                    for before, later in zip(sent, sent[1:]):
                        assert later.start >= before.end - eps
                    assert after.start >= max((x.end for x in sent), default=a.end) - eps
    if t.links == "host":
        shares_the_nics(t, ready_times(t))
    assert t.iteration_seconds == pytest.approx(max(ended.values()))
    assert 0 <= t.bubble_fraction < 1 or t.iteration_seconds == 0


def ready_times(t: PipelineTimeline) -> dict[TransferTiming, float]:
    """When each transfer was ready: its action's end, or under ``overlap=False`` the end of the send before it."""
    ended = {(a.action.stage, a.action.kind is F, a.action.microbatch): a.end
             for stage in t.actions for a in stage if a.action.kind is not W}
    ready = {}
    for x in t.transfers:
        ready[x] = ended[(x.from_stage, x.direction is F, x.microbatch)]
        if not t.overlap:
            earlier = [y for y in t.transfers if (y.from_stage, y.direction, y.microbatch) ==
                       (x.from_stage, x.direction, x.microbatch) and y.to_stage < x.to_stage]
            ready[x] = max([ready[x]] + [y.end for y in earlier])
    return ready


def shares_the_nics(t: PipelineTimeline, ready: dict[TransferTiming, float]) -> None:
    """``links="host"``: each stage's egress and ingress carry one transfer at a time; a waiting transfer
    starts as soon as both of its ends are free; one ready later passes it only when its other end is busy."""
    eps = 1e-9
    ends = {x: (("out", x.from_stage), ("in", x.to_stage)) for x in t.transfers}
    timed = [x for x in t.transfers if x.end > x.start + eps]

    def busy(end: tuple[str, int], moment: float, besides: TransferTiming | None = None) -> bool:
        return any(end in ends[y] and y.start <= moment + eps and y.end > moment + eps and y != besides
                   for y in timed)

    for end in {e for pair in ends.values() for e in pair}:
        mine = sorted((x for x in timed if end in ends[x]), key=lambda x: x.start)
        for before, after in zip(mine, mine[1:]):
            assert after.start >= before.end - eps, f"{end} carries {before} and {after} at once"
    for x in t.transfers:
        assert x.start >= ready[x] - eps
        moments = [ready[x]] + [y.end for y in timed if set(ends[y]) & set(ends[x]) and ready[x] < y.end < x.start]
        for moment in moments:
            if moment < x.start - eps:              # it waited: one of its ends was busy then
                assert any(busy(end, moment) for end in ends[x]), f"{x} waited at {moment} with both ends free"
        for y in t.transfers:
            if set(ends[y]) & set(ends[x]) and ready[x] < ready[y] - eps and y.start < x.start - eps:
                assert ready[x] > y.start + eps or any(busy(end, y.start, besides=y) for end in ends[x]), \
                    f"{y} passed {x}, which was ready first and could have gone"


def profile(draw_stages, data, homogeneous: bool) -> PipelineCosts:
    stages = draw_stages
    count = 1 if homogeneous else stages
    number = st.floats(0.1, 4.0)
    forward = data.draw(st.lists(number, min_size=count, max_size=count))
    backward = data.draw(st.lists(number, min_size=count, max_size=count))
    if homogeneous:
        forward, backward = forward[0], backward[0]
    make = data.draw(st.sampled_from([gpt_like, u_transformer_like]))
    comm = data.draw(st.floats(0, 4.0))
    extra = {"skip_seconds": data.draw(st.floats(0, 4.0))} if make is u_transformer_like else {}
    return make(stages, forward, backward, comm, backward_comm_seconds=data.draw(st.floats(0, 4.0)),
                weight_share=data.draw(st.floats(0, 1)), activation_bytes=data.draw(st.integers(0, 100)), **extra)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.booleans(), st.booleans(), st.sampled_from(LINK_MODELS),
       st.data())
def test_every_schedule_validates_and_its_timeline_respects_every_dependency(stages, microbatches, homogeneous,
                                                                            overlap, links, data):
    costs = profile(stages, data, homogeneous)
    for name in SCHEDULE_NAMES:
        schedule = build_schedule(name, stages, microbatches, costs, overlap, links=links)
        t = simulate(schedule, costs, overlap, links)
        assert t.links == links
        respects_dependencies(t, costs)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 16), st.data())
def test_without_communication_eager_1f1b_takes_as_long_as_1f1b(stages, microbatches, data):
    """§4: "When there is no communication cost, the latencies of these two schedules are the same"
    (stages of equal cost, as the paper's pipelines are balanced)."""
    costs = profile(stages, data, homogeneous=True).with_comm_scaled(0)
    one = simulate(one_f_one_b(stages, microbatches), costs).iteration_seconds
    assert simulate(eager_1f1b(stages, microbatches), costs).iteration_seconds == pytest.approx(one)
    first = costs.stages[0]
    assert one == pytest.approx((microbatches + stages - 1) * (first.forward + first.backward))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 16), st.data())
def test_eager_1f1b_is_never_slower_when_a_round_trip_fits_in_one_1f1b_step(stages, microbatches, data):
    """With balanced stages and every edge's forward + backward transfer no
    longer than a stage's F + B (the regime of §4's argument: eager-1F1B's two
    extra steps of lead hide a round trip), eager-1F1B <= 1F1B."""
    costs = profile(stages, data, homogeneous=True)
    step = costs.stages[0].forward + costs.stages[0].backward
    longest = max((e.forward_seconds + e.backward_seconds for e in costs.all_edges()), default=0.0)
    if longest > step:
        costs = costs.with_comm_scaled(step / longest)
    one = simulate(one_f_one_b(stages, microbatches), costs).iteration_seconds
    assert simulate(eager_1f1b(stages, microbatches), costs).iteration_seconds <= one + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.booleans(), st.booleans(), st.data())
def test_weight_delaying_is_never_slower_than_eager_1f1b_and_its_memory_bound_holds(stages, microbatches,
                                                                                    homogeneous, overlap, data):
    costs = profile(stages, data, homogeneous)
    eager = simulate(eager_1f1b(stages, microbatches), costs, overlap)
    split = simulate(build_schedule("eager-1f1b-wd", stages, microbatches, costs, overlap), costs, overlap)
    assert split.iteration_seconds <= eager.iteration_seconds + 1e-9
    one = simulate(one_f_one_b(stages, microbatches), costs, overlap)
    for s in range(stages):
        # §4: eager-1F1B "increases per-GPU memory usage by at most #stages x size_activation"
        activation = costs.stages[s].activation_bytes
        assert one.peak_activation_bytes[s] <= eager.peak_activation_bytes[s] <= \
            one.peak_activation_bytes[s] + stages * activation
        assert eager.peak_inflight_microbatches[s] - one.peak_inflight_microbatches[s] <= stages - 1


def paper_profiles():
    """Four stages, F 10 ms, B 20 ms, 4 ms per boundary transfer (the CLI's defaults)."""
    return [gpt_like(4, comm_seconds=0.004), u_transformer_like(4, comm_seconds=0.004)]


@pytest.mark.parametrize("microbatches, expected", [
    # profile: (1F1B, eager-1F1B, eager-1F1B-wd) in ms
    (8, {"gpt": (394, 354, 314), "u-transformer": (418, 362, 322)}),
    (16, {"gpt": (682, 594, 554), "u-transformer": (722, 602, 562)}),
])
def test_the_four_stage_profiles(microbatches, expected):
    for costs in paper_profiles():
        found = tuple(round(simulate(build_schedule(n, 4, microbatches, costs), costs).iteration_seconds * 1e3, 6)
                      for n in ("1f1b", "eager-1f1b", "eager-1f1b-wd"))
        assert found == expected[costs.name]
        # eager-1F1B pays the transfers only while the pipeline fills and drains: (S - 1) round trips
        silent = simulate(one_f_one_b(4, microbatches), costs.with_comm_scaled(0)).iteration_seconds * 1e3
        if costs.name == "gpt":
            assert found[1] == pytest.approx(silent + 3 * 8)


def test_weight_delaying_helps_most_when_backward_communication_is_large():
    costs = gpt_like(4, comm_seconds=0.004, backward_comm_seconds=0.016)
    eager = simulate(eager_1f1b(4, 16), costs).iteration_seconds
    split = simulate(build_schedule("eager-1f1b-wd", 4, 16, costs), costs).iteration_seconds
    assert split < eager - 0.03


def test_a_mismatched_profile_or_a_bad_schedule_is_refused():
    with pytest.raises(InvalidInputError, match="has 2 stages but cost profile gpt has 3"):
        simulate(one_f_one_b(2, 2), toy(0.0, 3))
    bad = PipelineSchedule.parse("bad stages=2 microbatches=1\n0: 0F0 0B0\n1: 1B0 1F0")
    with pytest.raises(ScheduleError, match="stage 1 runs 1B0 before 1F0"):
        simulate(bad, toy(0.0))


def test_the_timeline_prints_and_finds_actions():
    t = simulate(one_f_one_b(2, 1), toy(0.0))
    assert str(t).splitlines() == ["1f1b: 6 s, bubble 0.500", "0: 0F0 0-1 0B0 4-6", "1: 1F0 1-2 1B0 2-4"]
    assert t.timing(Action.parse("1B0")).end == 4
    with pytest.raises(InvalidInputError, match="not in schedule"):
        t.timing(Action.parse("1B5"))


def by_action(t: PipelineTimeline) -> dict[str, tuple[float, float]]:
    return {str(a.action): (a.start, a.end) for stage in t.actions for a in stage}


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.booleans(), st.booleans(), st.data())
def test_two_stages_time_the_same_on_hosts_as_on_edges(microbatches, homogeneous, overlap, data):
    """With two stages stage 0's egress carries only 0>1 and stage 1's only 1>0 (and so the ingresses):
    sharing a NIC changes nothing, to the last bit."""
    costs = profile(2, data, homogeneous)
    for name in SCHEDULE_NAMES:
        schedule = build_schedule(name, 2, microbatches, costs, overlap)
        edge, host = simulate(schedule, costs, overlap), simulate(schedule, costs, overlap, "host")
        assert host.actions == edge.actions and host.memory == edge.memory
        assert sorted(map(str, host.transfers)) == sorted(map(str, edge.transfers))


@settings(max_examples=50, deadline=None)
@given(st.integers(3, 6), st.integers(1, 12), st.booleans(), st.booleans(), st.data())
def test_sharing_a_nic_never_makes_anything_sooner(stages, microbatches, homogeneous, overlap, data):
    """Every constraint of the edge model still holds on hosts, and the edge model's times are the earliest
    those constraints allow: no action starts sooner on hosts."""
    costs = profile(stages, data, homogeneous)
    for name in SCHEDULE_NAMES:
        schedule = build_schedule(name, stages, microbatches, costs, overlap)
        edge, host = by_action(simulate(schedule, costs, overlap)), by_action(simulate(schedule, costs, overlap,
                                                                                       "host"))
        assert all(host[a][0] >= edge[a][0] - 1e-9 for a in edge)


@pytest.mark.parametrize("schedule", ["1f1b", "eager-1f1b", "eager-1f1b-wd"])
def test_four_stages_with_heavy_communication_are_slower_on_hosts(schedule):
    """F 2 ms, B 4 ms, 5.4 ms each way: a middle stage's egress carries its forwards and its gradients."""
    costs = gpt_like(4, forward_seconds=0.002, backward_seconds=0.004, comm_seconds=0.0054)
    plans = {links: build_schedule(schedule, 4, 8, costs, links=links) for links in LINK_MODELS}
    edge = simulate(plans["edge"], costs)
    host = simulate(plans["host"], costs, links="host")
    assert host.iteration_seconds > edge.iteration_seconds
    assert simulate(plans["edge"], costs, links="host").iteration_seconds >= edge.iteration_seconds
    respects_dependencies(host, costs)


def test_two_sends_leaving_one_stage_serialize_by_hand():
    """U-Transformer, 3 stages, one micro-batch: F = 1, B = 2, a boundary 1 s, the skip edge 0>2 2 s."""
    costs = u_transformer_like(3, forward_seconds=1.0, backward_seconds=2.0, comm_seconds=1.0, skip_seconds=2.0)
    edge = simulate(one_f_one_b(3, 1), costs)
    # each edge its own channel: 0F0's two sends travel at once, and so do 2B0's
    assert sorted(map(str, edge.transfers)) == ["0>1 F0 1-2", "0>2 F0 1-3", "1>0 B0 10-11", "1>2 F0 3-4",
                                                "2>0 B0 7-9", "2>1 B0 7-8"]
    assert edge.iteration_seconds == 13
    host = simulate(one_f_one_b(3, 1), costs, links="host")
    assert [str(x) for x in host.transfers] == [
        "0>1 F0 1-2",      # stage 0's egress: to stage 1 first (destination ascending) ...
        "0>2 F0 2-4",      # ... then the skip send, after it
        "1>2 F0 4-5",      # ready at 3, but stage 2's ingress receives the skip send until 4
        "2>0 B0 8-10",     # 2B0 (6-8) sends to 0 first (destination ascending) ...
        "2>1 B0 10-11",    # ... then to 1, which waits for it
        "1>0 B0 13-14",    # 1B0 11-13
    ]
    assert by_action(host) == {"0F0": (0, 1), "1F0": (2, 3), "2F0": (5, 6), "2B0": (6, 8), "1B0": (11, 13),
                               "0B0": (14, 16)}
    assert host.iteration_seconds == 16


def test_a_later_transfer_passes_one_whose_sender_is_busy():
    """Greedy service, U-Transformer, 3 stages, GPipe, 2 micro-batches, every transfer 1 s: 0F1's skip send
    (ready at 2) waits for stage 0's egress, so 1F0's send (ready at 3) takes stage 2's ingress first."""
    costs = u_transformer_like(3, forward_seconds=1.0, backward_seconds=2.0, comm_seconds=1.0)
    host = simulate(gpipe(3, 2), costs, links="host")
    assert [str(x) for x in host.transfers if x.direction is F] == [
        "0>1 F0 1-2", "0>2 F0 2-3",      # 0F0 (0-1) sends to 1, then over the skip edge
        "0>1 F1 3-4",                    # 0F1 (1-2): its sends wait for 0F0's (ready 2 < ready 2 of the skip)
        "1>2 F0 3-4",                    # 1F0 (2-3): stage 1's egress and stage 2's ingress are free at 3
        "0>2 F1 4-5",                    # ready at 2, it goes after 1>2 F0 (ready at 3)
        "1>2 F1 5-6"]                    # 1F1 (4-5)
    assert by_action(host)["2F0"] == (4, 5) and by_action(host)["2F1"] == (6, 7)
    respects_dependencies(host, costs)


def test_an_unknown_link_model_is_refused():
    with pytest.raises(InvalidInputError, match="link model 'nic' is not one of edge, host"):
        simulate(one_f_one_b(2, 2), toy(0.0), links="nic")
