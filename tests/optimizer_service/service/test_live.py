"""The live view the dashboard and the metrics read: iterations gathered over
ranks, lagging ranks, dispatcher waits per op and channel, timelines; and the
plan view's per-op cost and diff. Pure: messages built in memory."""

from __future__ import annotations

import json

from optimizer_service.control.coordinator import Coordinator, Timing
from optimizer_service.plan import Plan
from optimizer_service.service.jobs import Job, RankInfo
from optimizer_service.service.live import (
    STALE_ITERATIONS,
    IterationGatherer,
    LiveView,
    channel_waits,
    op_counts,
    op_label,
)
from optimizer_service.service.plan_view import plan_diff, plan_view
from tests.support.plans import sample_plan
from tests.support.telemetry import iteration_message


def test_an_iteration_is_the_mean_over_ranks_once_every_rank_reported_it():
    gather = IterationGatherer(3)
    assert gather.add(0, 0, 0.10, 0.01, 1, {0: 0.05}, 1.0) == []
    assert gather.add(1, 0, 0.20, 0.02, 1, {0: 0.07}, 1.0) == []
    assert gather.add(1, 0, 9.99, 9.99, 1, {}, 1.0) == []                  # a second report of a rank: ignored
    [done] = gather.add(2, 0, 0.30, 0.03, 2, {0: 0.09, 1: 0.01}, 2.0)
    assert (done.index, done.ranks, done.version, done.unix) == (0, 3, 1, 2.0)
    assert abs(done.seconds - 0.2) < 1e-12 and abs(done.wait_seconds - 0.02) < 1e-12
    assert dict(done.channels) == {0: 0.07, 1: 0.01}
    assert gather.add(0, 0, 0.1, 0.0, 1, {}, 3.0) == []                    # an index once done stays done


def test_a_rank_that_stops_reporting_does_not_hold_the_job_back():
    gather = IterationGatherer(2)
    done = []
    for index in range(STALE_ITERATIONS + 1):
        done += gather.add(0, index, 0.1, 0.0, 0, {}, float(index))
    assert [it.index for it in done] == [0] and done[0].ranks == 1


def test_the_view_keeps_history_waits_per_op_and_channel_lagging_ranks_and_timelines():
    view = LiveView(4)
    for iteration in range(6):
        for rank in range(4):
            if rank == 3 and iteration > 1:
                continue                                         # rank 3 stopped at iteration 1
            message = iteration_message("j", rank, 4, iteration, 0.05, 1, wait=0.004).telemetry
            done = view.observe(rank, message, 100.0 + iteration)
            assert done == ([view.history[-1]] if rank == 3 else [])       # rank 3 completes 0 and 1
    assert [it.index for it in view.history] == [0, 1]           # 2..5 wait for rank 3 (not yet stale)
    assert channel_waits(message) == {0: 0.002, 1: 0.002} and op_counts(message) == {("all_reduce", True): 2}
    assert view.lagging({0, 1, 2, 3}, now=105.0) == {3}
    assert view.lagging({0, 1, 2, 3}, now=105.0 + 60) == {0, 1, 2, 3}             # silent for a minute
    table = view.wait_table()
    assert {(row["op"], row["channel"]) for row in table} == {("all_reduce#0", 0), ("all_reduce#0", 1),
                                                              ("all_reduce#1", 0), ("all_reduce#1", 1)}
    # one motif per op and channel a message: 3 ranks x 6 iterations + rank 3's 2, each waiting 4 ms / 4
    assert [row["motifs"] for row in table] == [20] * 4
    assert all(abs(row["mean_wait_seconds"] - 0.001) < 1e-12 for row in table)
    timeline = view.timelines[0]
    assert timeline["iteration"] == 5 and timeline["version"] == 1
    assert [m["channel"] for m in timeline["motifs"]] == [0, 1, 0, 1] and len(timeline["ops"]) == 2
    view.observe(0, iteration_message("j", 0, 4, 6, 0.05, 2, wait=0.004).telemetry, 107.0)
    assert all(row["motifs"] == 1 for row in view.wait_table())  # a new plan: waits start over


def test_a_job_observes_a_ranks_telemetry_in_one_call_and_returns_the_iterations_it_completed():
    job = Job("j", 2, 4, 0.0, Coordinator.new("j", 2, 1, 4, Timing()), ranks={0: RankInfo(), 1: RankInfo()})
    assert job.observe(0, iteration_message("j", 0, 2, 7, 0.2, 1).telemetry, 10.0) == []
    [done] = job.observe(1, iteration_message("j", 1, 2, 7, 0.4, 1).telemetry, 11.0)
    assert (done.index, done.version, done.ranks) == (7, 1, 2) and abs(done.seconds - 0.3) < 1e-12
    assert (job.ranks[1].iteration, job.ranks[1].running_version) == (7, 1)
    summary = job.telemetry.summary(12.0)
    assert (summary["messages"], summary["iterations"], summary["max_iteration"]) == (2, 1, 7)
    assert job.live.ranks[0].unix == 10.0 and list(job.live.history) == [done]


def test_op_labels_name_subgroups_only():
    assert op_label("all_reduce", 3, (0, 1, 2, 3), 4) == "all_reduce#3"
    assert op_label("all_to_all", 0, (2, 0), 4) == "all_to_all#0 [2,0]"
    assert op_label("broadcast", 1, tuple(range(20)), 64).endswith(",…]")


def test_plan_view_prices_each_motif_and_each_op_by_its_critical_path():
    plan = sample_plan()
    view = plan_view(plan, TWO_LEVEL)
    assert view["op_count"] == 5 and view["motif_count"] == sum(len(op.motifs) for op in plan.ops)
    tree = view["ops"][0]                       # Reduce, Reduce ∥ → Reduce → Broadcast → Broadcast ∥
    seconds = [m["predicted_seconds"] for m in tree["motifs"]]
    assert all(s > 0 for s in seconds) and tree["group"] == [4, 5, 6, 7]
    assert abs(tree["predicted_seconds"] - (seconds[0] + seconds[2] + seconds[3] + seconds[4])) < 1e-12
    assert tree["motifs"][0]["ranks"] == [4, 5]                   # group positions mapped to global ranks
    a2a = view["ops"][2]
    assert a2a["channels"] == [1] and a2a["predicted_seconds"] is None   # no channel 1 in the topology: unpriced
    assert plan_view(plan)["priced"] is False and json.loads(json.dumps(view)) == view


def test_plan_diff_says_what_changed_per_op():
    old = sample_plan()
    new = Plan(3, 8, old.channels, old.ops[1:] + (old.ops[0].__class__.of(old.ops[0].key, old.ops[1].plan),),
               topology=old.topology)
    diff = plan_diff(old, new)
    assert diff["counts"] == {"added": 0, "removed": 0, "changed": 1, "same": 4}
    [changed] = [row for row in diff["ops"] if row["status"] == "changed"]
    assert changed["seq"] == 0 and changed["group"] == [4, 5, 6, 7] and changed["before"] != changed["after"]
    assert plan_diff(None, old)["counts"]["added"] == 5 and plan_diff(None, old)["channels_changed"]


TWO_LEVEL = """
name: two-level
levels:
  - {name: node, cardinality: 2}
  - {name: gpu, cardinality: 4}
links:
  - {name: nvlink, levels: [gpu], bandwidth: 100GB/s, latency: 2us}
  - {name: nic, levels: [node], bandwidth: 10GB/s, latency: 20us, shared_by: 4}
"""
