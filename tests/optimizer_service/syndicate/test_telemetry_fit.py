"""The cost model fitted to a job's telemetry (pure): known parameters are recovered
from synthetic records, outliers do not move the fit, too few samples keep the
calibrated values, and what a window cannot say is shared or carried forward."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Par, Seq, comm_op, on_channel
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.motif_cost import DEFAULT_DISPATCH_SECONDS, MotifCostModel
from optimizer_service.syndicate.telemetry_fit import (
    MAX_SCALE,
    MAX_SHAPES,
    Line,
    Sample,
    TelemetryFit,
    calibrated_rounds,
    fit_line,
    fit_samples,
    fit_telemetry,
    motif_samples,
    passthrough_samples,
    values_only,
)
from tests.support.traces import op, trace

TOPOLOGY = Topology.from_yaml(cluster_topology("t", 2, 2, 25e6, 25e6, 1e9))
#: The parameters the synthetic job "measures": (motif seconds, latency factor, rate factor) per channel / host.
TRUE = {0: (0.004, 8.0, 1.2), 1: (0.002, 3.0, 4.0), None: (0.001, 20.0, 6.0)}


def shapes(rng: random.Random, n: int, channel: int | None = 0) -> list[Sample]:
    """``n`` samples of a handful of shapes, measured exactly as ``TRUE[channel]`` says."""
    fixed, latency, scale = TRUE[channel]
    out = []
    for _ in range(n):
        motifs, rounds, transfer = rng.choice([(1, 1, 0.002), (1, 2, 0.02), (2, 14, 0.04), (1, 6, 0.08),
                                               (2, 2, 0.005), (1, 1, 0.12)])
        lat = rounds * 1e-4
        out.append(Sample(channel, motifs, lat, transfer, motifs * fixed + latency * lat + scale * transfer))
    return out


def test_known_parameters_are_recovered():
    line = fit_line(shapes(random.Random(1), 200))
    assert line.fitted == ("rate", "motif_seconds", "latency")
    assert (line.motif_seconds, line.latency_scale, line.scale) == pytest.approx(TRUE[0], rel=1e-6)


def test_stalled_iterations_do_not_move_the_fit():
    rng = random.Random(2)
    clean = shapes(rng, 300)
    stalled = [replace(s, measured=s.measured * 10 + 0.2) if rng.random() < 0.1 else s for s in clean]
    assert sum(s.measured > 0.2 for s in stalled) > 20
    line = fit_line(stalled)
    assert (line.motif_seconds, line.latency_scale, line.scale) == pytest.approx(TRUE[0], rel=0.05)
    # one whole shape far off the others (a kind of op the model's form misses) is down-weighted too
    odd = [replace(s, measured=s.measured * 3) if s.transfer == 0.005 else s for s in clean]
    line = fit_line(odd)
    assert line.scale == pytest.approx(TRUE[0][2], rel=0.15) and line.motif_seconds < 0.02


def test_too_few_samples_or_shapes_keep_the_calibrated_values():
    few = fit_line(shapes(random.Random(3), 5))
    assert few.fitted == () and few.how == "calibrated"
    assert (few.motif_seconds, few.latency_scale, few.scale) == (DEFAULT_DISPATCH_SECONDS, 1.0, 1.0)
    # one size only: a fixed cost and a rate cannot be told apart; the rate takes the difference
    one = [Sample(0, 1, 1e-4, 0.02, 0.05) for _ in range(20)]
    line = fit_line(one)
    assert line.fitted == ("rate",) and line.motif_seconds == DEFAULT_DISPATCH_SECONDS and line.latency_scale == 1
    assert line.scale == pytest.approx((0.05 - DEFAULT_DISPATCH_SECONDS - 1e-4) / 0.02)


def test_a_link_is_never_fitted_faster_than_calibrated_and_odd_windows_are_clamped():
    fast = [replace(s, measured=s.measured * 0.3) for s in shapes(random.Random(4), 100)]
    assert fit_line(fast).scale == 1.0
    slow = [replace(s, measured=s.transfer * 1000) for s in shapes(random.Random(5), 100)]
    assert fit_line(slow).scale == MAX_SCALE


def test_a_channel_without_samples_shares_the_fixed_cost_and_keeps_its_rate():
    fit = fit_samples(shapes(random.Random(6), 100), TOPOLOGY.channels)
    assert fit.channels[0].how == "rate, motif_seconds, latency"
    channel1, host = fit.channels[1], fit.host
    assert channel1.motif_seconds == host.motif_seconds == pytest.approx(TRUE[0][0])
    assert channel1.shared and channel1.scale == 1.0 and channel1.latency_scale == 1.0
    assert fit.parameters() == ["channel 0 motif_seconds", "channel 0 latency", "channel 0 rate",
                                "channel 1 motif_seconds", "host motif_seconds"]


def test_a_line_that_fitted_nothing_takes_the_fitted_time_per_round():
    """Channel 0 alone measured (passthrough): channel 1 and the host, with no sample, take channel 0's
    fitted time per round, each over its own calibrated round (the host's is 5x shorter here)."""
    rounds = calibrated_rounds(TOPOLOGY)
    assert rounds == {0: 1e-4, 1: 1e-4, None: 2e-5}
    fit = fit_samples(shapes(random.Random(6), 100), TOPOLOGY.channels, rounds=rounds)
    channel0, channel1, host = fit.channels[0], fit.channels[1], fit.host
    per_round = channel0.latency_scale * rounds[0]
    assert channel0.latency_scale == pytest.approx(TRUE[0][1]) and not channel0.round_shared
    assert channel1.latency_scale * rounds[1] == pytest.approx(per_round) and channel1.round_shared
    assert host.latency_scale * rounds[None] == pytest.approx(per_round) and host.round_shared
    assert channel1.how == "motif_seconds shared, latency shared" and channel1.scale == 1.0
    assert "channel 1 latency" in fit.parameters() and "host latency" in fit.parameters()
    assert TelemetryFit.from_dict(fit.to_dict(TOPOLOGY)) == fit
    # a line that fitted anything keeps its own values; nothing shared where no line fitted its latency
    both = fit_samples(shapes(random.Random(6), 100) + shapes(random.Random(7), 100, 1), TOPOLOGY.channels,
                       rounds=rounds)
    assert both.channels[1].latency_scale == pytest.approx(TRUE[1][1]) and not both.channels[1].round_shared
    few = fit_samples(shapes(random.Random(6), 3), TOPOLOGY.channels, rounds=rounds)
    assert not any(line.round_shared for line in (*few.channels.values(), few.host))
    # never under the line's calibrated round (channel 0's fitted 0.8 ms against a 10 ms one)
    slow_link = fit_samples(shapes(random.Random(6), 100), TOPOLOGY.channels, rounds={**rounds, 1: 1e-2})
    assert slow_link.channels[1].latency_scale == 1.0 and slow_link.channels[1].round_shared


def test_an_earlier_window_of_the_cluster_state_fills_in_what_this_one_cannot_fit():
    rng = random.Random(7)
    earlier = fit_samples(shapes(rng, 100, 0) + shapes(rng, 100, 1), TOPOLOGY.channels)
    assert earlier.channels[1].scale == pytest.approx(TRUE[1][2])
    now = fit_samples(shapes(rng, 100, 0), TOPOLOGY.channels, prior=TelemetryFit.from_dict(earlier.to_dict(TOPOLOGY)))
    assert now.channels[1].earlier and now.channels[1].scale == pytest.approx(TRUE[1][2])
    assert "(an earlier window)" in now.channels[1].how and not now.channels[0].earlier


def test_a_fits_values_alone_fill_what_a_window_cannot_fit_and_pool_nothing():
    """A drift state's prior (:func:`values_only`): channel 1, unsampled now, keeps the slow rate last fitted
    for it; channel 0, sampled now on a changed cluster, is this window's alone, not pooled with the old one."""
    rng = random.Random(12)
    before = fit_samples(shapes(rng, 100, 0) + shapes(rng, 100, 1), TOPOLOGY.channels).to_dict(TOPOLOGY)
    bare = values_only(before)
    assert all(not entry["shapes"] for entry in [*bare["channels"].values(), bare["host"]])
    assert before["channels"]["0"]["shapes"]                # the kept fit itself is untouched
    changed = [replace(sample, measured=2 * sample.measured) for sample in shapes(rng, 100, 0)]
    alone = fit_samples(changed, TOPOLOGY.channels)
    now = fit_samples(changed, TOPOLOGY.channels, prior=TelemetryFit.from_dict(bare))
    assert now.channels[1].earlier and now.channels[1].scale == pytest.approx(TRUE[1][2])
    assert now.channels[0] == alone.channels[0]
    pooled = fit_samples(changed, TOPOLOGY.channels, prior=TelemetryFit.from_dict(before))
    assert pooled.channels[0] != alone.channels[0]           # the whole fit as a prior would have pooled them


def test_the_fit_round_trips_and_prices_with_its_values():
    fit = fit_samples(shapes(random.Random(8), 100, 0) + shapes(random.Random(9), 100, None), TOPOLOGY.channels)
    written = fit.to_dict(TOPOLOGY)
    assert TelemetryFit.from_dict(written) == fit
    assert written["channels"]["0"]["rate_bytes_per_s"] == pytest.approx(25e6 / TRUE[0][2])
    assert written["host"]["round_seconds"] == pytest.approx(2e-5 * TRUE[None][1])
    cost = fit.motif_cost(TOPOLOGY)
    across = comm_op(Collective.ALL_REDUCE, (0, 2), 1000)
    inside = comm_op(Collective.ALL_REDUCE, (0, 1), 1000)
    bare = MotifCostModel(TOPOLOGY, dispatch_seconds=0.0)
    assert cost.seconds(across) == pytest.approx(bare.seconds(across) + fit.channels[0].motif_seconds)
    assert cost.seconds(inside) == pytest.approx(bare.seconds(inside) + fit.host.motif_seconds)


# ------------------------------------------------------------- from the records
def hierarchical(seq: int, elements: int, channel: int) -> OpPlan:
    """An all-reduce over 4 ranks: reduce-scatter in each node, all-reduce across on ``channel``, all-gather."""
    rs = Par((comm_op(Collective.REDUCE_SCATTER, (0, 1), elements),
              comm_op(Collective.REDUCE_SCATTER, (2, 3), elements)))
    across = on_channel(Par((comm_op(Collective.ALL_REDUCE, (0, 2), elements // 2),
                             comm_op(Collective.ALL_REDUCE, (1, 3), elements // 2))), channel)
    ag = Par((comm_op(Collective.ALL_GATHER, (0, 1), elements), comm_op(Collective.ALL_GATHER, (2, 3), elements)))
    return OpPlan.of(OpKey(seq, "all_reduce", 4 * elements, (0, 1, 2, 3)), Seq((rs, across, ag)), base=10 * seq)


def flat(seq: int, elements: int, channel: int) -> OpPlan:
    return OpPlan.of(OpKey(seq, "all_reduce", 4 * elements, (0, 1, 2, 3)),
                     on_channel(comm_op(Collective.ALL_REDUCE, (0, 1, 2, 3), elements), channel), base=10 * seq)


def job_plan() -> Plan:
    """Ops of several sizes and shapes on both channels, numbered in plan order (as exported plans are)."""
    ops = [build(seq, elements, channel) for seq, (build, elements, channel) in enumerate(
        [(hierarchical, 2_000, 0), (hierarchical, 40_000, 1), (flat, 500, 0), (flat, 60_000, 1),
         (hierarchical, 250_000, 0), (flat, 120_000, 0), (hierarchical, 8_000, 1), (flat, 4_000, 1)])]
    return Plan(1, 4, {0: None, 1: None}, tuple(ops))


def true_seconds(motifs: tuple, channel: int | None) -> float:
    """What the synthetic cluster takes for motifs run at once (``TRUE``'s form, priced independently)."""
    fixed, latency, scale = TRUE[channel]
    slow = tuple(replace(link, bandwidth=1e30, reduction=0.0) for link in TOPOLOGY.links)
    instant = tuple(replace(link, latency=0.0) for link in TOPOLOGY.links)
    lat = MotifCostModel(replace(TOPOLOGY, links=slow), dispatch_seconds=0.0).step_seconds(motifs)
    transfer = MotifCostModel(replace(TOPOLOGY, links=instant), dispatch_seconds=0.0).step_seconds(motifs)
    return fixed + latency * lat + scale * transfer


def recorded(plan: Plan, iterations: int = 6, seed: int = 0) -> list[dict]:
    """Every rank's motif records: ranks start a motif up to 5 ms apart (the late one
    sets its start), all end together; a rank's own seconds count its wait for the late one."""
    rng = random.Random(seed)
    base = {rank: 1000.0 + rank * 0.25 for rank in range(4)}        # each rank's trace clock starts elsewhere
    motifs = {rank: [] for rank in range(4)}
    now = 0.0
    for iteration in range(iterations):
        for op_plan in plan.ops:
            together: dict[int, list] = {}
            for motif, order in zip(op_plan.motifs, op_plan.order):
                together.setdefault(order, []).append(motif)
            for order, group in sorted(together.items()):
                crosses = any({r // 2 for r in m.ranks} != {m.ranks[0] // 2} for m in group)
                took = true_seconds(tuple(group), group[0].channel if crosses else None)
                for motif in group:
                    starts = {rank: now + rng.uniform(0.0, 0.005) for rank in motif.ranks}
                    end = max(starts.values()) + took
                    for rank, start in starts.items():
                        motifs[rank].append({"iteration": iteration, "op_seq": op_plan.key.seq, "order": order,
                                             "channel": motif.channel, "waited": 0.0, "start": start - base[rank],
                                             "seconds": end - start})
                now += took + 0.006
    return [{"rank": rank, "started_unix": base[rank], "motifs": motifs[rank], "ops": []} for rank in range(4)]


def test_motif_records_recover_every_channel_and_the_host_despite_skewed_ranks():
    plan = job_plan()
    traces = recorded(plan)
    samples = motif_samples(TOPOLOGY, plan, traces)
    assert {s.channel for s in samples} == {0, 1, None}
    fit = fit_telemetry(TOPOLOGY, traces, plan)
    for where, line in [(0, fit.channels[0]), (1, fit.channels[1])]:
        assert (line.motif_seconds, line.latency_scale, line.scale) == pytest.approx(TRUE[where], rel=0.02), where
    # inside a node every motif here has 2 ranks, one round: its latency cannot be told from its fixed
    # cost, so it stays calibrated and the fixed cost takes the round's measured latency
    fixed, latency, scale = TRUE[None]
    assert fit.host.fitted == ("rate", "motif_seconds") and fit.host.latency_scale == 1.0
    assert (fit.host.motif_seconds, fit.host.scale) == pytest.approx((fixed + (latency - 1) * 2e-5, scale), rel=0.02)
    # a rank's own seconds include its wait for the late rank (up to 5 ms here): read so, every motif
    # would measure longer than it took
    own = [dict(t, started_unix=0.0, motifs=[dict(r, start=0.0) for r in t["motifs"]]) for t in traces]
    longer = [a.measured - b.measured for a, b in zip(motif_samples(TOPOLOGY, plan, own), samples)]
    assert min(longer) >= 0 and statistics.median(longer) > 0.001


def test_records_of_another_plan_version_are_not_read_as_this_ones():
    plan = job_plan()
    traces = [dict(t, switches=[{"iteration": 0, "version": 7, "at": 0.0}]) for t in recorded(plan)]
    assert motif_samples(TOPOLOGY, plan, traces) == []            # the ranks ran v7 then, not v1
    later = [dict(t, switches=[{"iteration": 0, "version": 7, "at": 0.0}, {"iteration": 3, "version": 1, "at": 1.0}])
             for t in recorded(plan)]
    every = {s.measured for s in motif_samples(TOPOLOGY, plan, recorded(plan))}
    assert {s.measured for s in motif_samples(TOPOLOGY, plan, later)} < every          # iterations 3.. only


def test_passthrough_ops_that_overlap_are_one_busy_period():
    group = [0, 1, 2, 3]

    def iteration(t: float) -> list[dict]:       # two bucket all-reduces issued together, run by two threads
        return [op("all_reduce", 400_000, t, t + 0.05, group), op("all_reduce", 400_000, t + 0.001, t + 0.07, group),
                op("all_reduce", 4_000, t + 0.1, t + 0.11, group)]

    traces = [dict(trace(*(iteration(k * 0.2) for k in range(3)), rank=rank, world_size=4), started_unix=0.0)
              for rank in range(4)]
    samples = passthrough_samples(TOPOLOGY, traces)
    assert len(samples) == 6 and {s.channel for s in samples} == {0}
    busy = [s for s in samples if s.motifs == 4]                     # ring all-reduce: 2 motifs each, summed
    assert len(busy) == 3 and all(s.measured == pytest.approx(0.07) for s in busy)
    single = [s for s in samples if s.motifs == 2]
    assert all(s.measured == pytest.approx(0.01) for s in single)
    assert busy[0].transfer == pytest.approx(2 * (single[0].transfer * 100), rel=0.05)


def test_a_fixed_cost_the_fit_puts_at_zero_is_not_a_measurement_and_takes_the_shared_one():
    # channel 0's window: large motifs whose time the rate alone explains best (what a running
    # plan's few big network motifs gave in the live loop); the host measured a 3 ms fixed cost
    rng = random.Random(7)
    big = []
    for _ in range(40):
        transfer = rng.choice([0.05, 0.08, 0.12, 0.2])
        big.append(Sample(0, 1, 1e-4, transfer, 2.5 * transfer - 0.004 + rng.uniform(-1e-4, 1e-4)))
    alone = fit_line(big)
    assert "motif_seconds" not in alone.fitted and alone.motif_seconds == DEFAULT_DISPATCH_SECONDS
    host = [Sample(None, motifs, 1e-4 * motifs, transfer, 0.003 * motifs + 1e-4 * motifs + 2 * transfer)
            for motifs, transfer in [(1, 0.001), (2, 0.004), (3, 0.002), (1, 0.01)] * 5]
    fit = fit_samples(big + host, channels=(0,))
    line = fit.channels[0]
    assert fit.host.motif_seconds == pytest.approx(0.003, rel=1e-3)
    assert line.shared and line.motif_seconds == fit.host.motif_seconds and "rate" in line.fitted
    # the rate is measured with that fixed cost in place, not on top of a cost it had absorbed
    assert line.scale < alone.scale - 0.01


def slowed_nic_window(rng: random.Random) -> tuple[list[Sample], list[Sample]]:
    """What a DDP loop window measured after the second NIC was slowed 4x (the shapes of its search
    record, 7 iterations): channel 1's motifs of 131 KB at 70 ms and of 526 KB at 84 ms (a token
    bucket lets a motif's first 80 KB through at line rate, the rest queue behind the others'), its
    latency-bound ones at 2.4 ms; channel 0's one shape (1 MB) under its calibrated transfer."""
    def jitter(x: float) -> float:
        return x * rng.uniform(0.98, 1.02)
    slowed, fast = [], []
    for _ in range(8):
        slowed += [Sample(1, 1, 2e-4, 0.00526, jitter(0.06975)) for _ in range(4)]
        slowed += [Sample(1, 1, 7e-4, 1e-7, jitter(0.00242)) for _ in range(2)]
        slowed += [Sample(1, 1, 2e-4, 0.02105, jitter(0.08405))]
        fast += [Sample(0, 1, 2e-4, 0.04202, jitter(0.03552)) for _ in range(4)]
    return slowed, fast


def test_no_fixed_cost_is_over_what_a_motif_of_its_line_measured():
    slowed, fast = slowed_nic_window(random.Random(5))
    fit = fit_samples(slowed + fast, TOPOLOGY.channels)
    line, other = fit.channels[1], fit.channels[0]
    # the least squares alone put about 38 ms on every motif, 16 times what the small motifs measured (the
    # median of their shape, 2.4 ms): the fixed cost is that median
    small = statistics.median(s.measured for s in slowed if s.transfer < 1e-6)
    assert line.capped and line.motif_seconds == pytest.approx(small)
    assert "motif_seconds at the fastest motif" in line.how and line.fitted == ("rate", "motif_seconds")
    # the small motifs are priced at what they measured and their calibrated round (3.1 ms, not 38.7), and the
    # rate takes what the fixed cost could not of the large ones
    assert price(line, 1, 7e-4, 1e-7) == pytest.approx(0.00242 + 7e-4, rel=0.05)
    assert line.scale > 4.0
    # channel 0 shares a fixed cost no larger than channel 1's (and its own shape's time)
    assert other.shared and other.motif_seconds <= line.motif_seconds
    # the cap survives the round trip through the service's store
    again = TelemetryFit.from_dict(fit.to_dict(TOPOLOGY)).channels[1]
    assert again.capped and again.motif_seconds == line.motif_seconds


def test_a_shared_fixed_cost_is_capped_by_the_receiving_line_and_says_so():
    # channel 0's large motifs cannot tell a fixed cost (the rate alone explains them) and one small
    # shape measured 0.5 ms a motif; the host fitted 3 ms a motif, over what channel 0's small motif took
    rng = random.Random(3)
    big = [Sample(0, 1, 1e-4, t, 2.5 * t - 0.004 + rng.uniform(-1e-4, 1e-4))
           for t in [0.05, 0.08, 0.12, 0.2] * 10]
    small = [Sample(0, 1, 1e-4, 1e-6, 0.0005)] * 2
    host = [Sample(None, motifs, 1e-4 * motifs, transfer, 0.003 * motifs + 1e-4 * motifs + 2 * transfer)
            for motifs, transfer in [(1, 0.001), (2, 0.004), (3, 0.002), (1, 0.01)] * 5]
    fit = fit_samples(big + small + host, channels=(0,))
    line = fit.channels[0]
    assert fit.host.motif_seconds == pytest.approx(0.003, rel=1e-3) and not fit.host.capped
    assert line.shared and line.capped and line.motif_seconds == pytest.approx(0.0005)
    assert "motif_seconds shared" in line.how and "motif_seconds at the fastest motif" in line.how
    # a reading that gives terms their calibrated values is not capped: all of the large motifs' excess per motif
    reading = fit_samples(big + small + host, channels=(0,), given={"rate": 1.0})
    assert reading.channels[0].motif_seconds > 100 * 0.0005 and not reading.channels[0].capped


def passthrough_and_segments(rng: random.Random) -> tuple[list[Sample], list[Sample]]:
    """What the FSDP2 loop measured on channel 0 (7 iterations; a ring's 7 rounds at 0.1 ms each):
    passthrough's whole ops (tiny ones at 1.5 ms, 1 MB all-gathers and 2 MB reduce-scatters at
    about 1.9x the NIC's time) and a rolled-back plan's eighth-of-an-op segments on both channels
    (16-17 ms each: the fixed cost passthrough's shapes cannot show)."""
    def jitter(x: float) -> float:
        return x * rng.uniform(0.97, 1.03)
    whole, segments = [], []
    for _ in range(7):
        whole += [Sample(0, 1, 7e-4, 2e-4, jitter(0.0015)) for _ in range(2)]
        whole += [Sample(0, 1, 7e-4, 0.035, jitter(0.067)) for _ in range(4)]
        whole += [Sample(0, 1, 7e-4, 0.07, jitter(0.13)) for _ in range(2)] + [Sample(0, 2, 14e-4, 1e-6, jitter(0.003))]
        segments += [Sample(0, 1, 7e-4, 0.0044, jitter(0.016)) for _ in range(20)]
        segments += [Sample(0, 1, 7e-4, 0.0088, jitter(0.022)) for _ in range(4)]
        segments += [Sample(1, 1, 7e-4, 0.0044, jitter(0.017)) for _ in range(30)]
    return whole, segments


def price(line, motifs: int, latency: float, transfer: float) -> float:
    return motifs * line.motif_seconds + line.latency_scale * latency + line.scale * transfer


def test_the_next_window_pools_what_a_rolled_back_plan_measured_in_its_cluster_state():
    whole, segments = passthrough_and_segments(random.Random(11))
    alone = fit_samples(whole, TOPOLOGY.channels)
    tried = TelemetryFit.from_dict(fit_samples(segments, TOPOLOGY.channels).to_dict(TOPOLOGY))
    pooled = fit_samples(whole, TOPOLOGY.channels, prior=tried)
    # passthrough's window alone prices a segment at about half of what it measured ...
    assert price(alone.channels[0], 1, 7e-4, 0.0044) < 0.011
    # ... pooled with the tried plan's shapes, within 10 % on both channels, and a whole op still within 5 %
    assert price(pooled.channels[0], 1, 7e-4, 0.0044) == pytest.approx(0.016, rel=0.1)
    assert price(pooled.channels[1], 1, 7e-4, 0.0044) == pytest.approx(0.017, rel=0.1)
    assert price(pooled.channels[0], 1, 7e-4, 0.035) == pytest.approx(0.067, rel=0.05)
    # no fixed cost over the 1.5 ms a tiny op measured whole: the segments' excess goes to their rounds
    assert pooled.channels[0].capped and pooled.channels[0].motif_seconds == pytest.approx(0.0015, rel=0.05)
    assert pooled.channels[0].latency_scale > 4 * alone.channels[0].latency_scale
    # channel 1 has no samples of its own: fitted from the earlier window's, its rate around the shared fixed cost
    assert pooled.channels[1].earlier and pooled.channels[1].shared and "rate" in pooled.channels[1].fitted
    assert not pooled.channels[0].earlier
    # the line keeps its own shapes first, then the earlier ones, for the window after it
    own = {shape[:3] for shape in alone.channels[0].shapes}
    assert {shape[:3] for shape in pooled.channels[0].shapes[:len(own)]} == own
    assert len(pooled.channels[0].shapes) == len(own) + len(tried.channels[0].shapes)


def test_shapes_are_bounded_and_odd_ones_are_left_out_when_read():
    many = [Sample(0, 1, 1e-4 * (1 + k % 7), 0.001 * (1 + k), 0.002 + 0.0011 * k) for k in range(100)]
    line = fit_line(many)
    assert len(line.shapes) == MAX_SHAPES and line.samples == 100
    written = line.to_dict()
    written["shapes"] = [*written["shapes"][:3], ["x", 1, 2, 3, 4], [1, -1.0, 0.1, 0.2, 3], [1, 0, 0, 0.2, 3],
                         [1, float("nan"), 0.1, 0.2, 3], [1, 1e-4, 0.1, 0.2, 0], "shape", [1, 2]]
    assert Line.from_dict(written).shapes == line.shapes[:3]
    assert Line.from_dict({**written, "shapes": "none"}).shapes == ()
    # a fit written before lines kept shapes still fills in what a window cannot fit
    old = {**fit_samples(shapes(random.Random(12), 100, 1), TOPOLOGY.channels).to_dict(TOPOLOGY)}
    for entry in (*old["channels"].values(), old["host"]):
        del entry["shapes"]
    now = fit_samples(shapes(random.Random(13), 100, 0), TOPOLOGY.channels, prior=TelemetryFit.from_dict(old))
    assert now.channels[1].earlier and now.channels[1].scale == pytest.approx(TRUE[1][2])
