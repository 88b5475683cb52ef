"""Training DAGs: unrolling across iterations, lowering plans to scheduler
tasks, compute nodes on compute streams of their own and comm-ops on lanes of
their own (a pipeline's stages and directed edges)."""

from dataclasses import replace

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Seq, on_channel
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute, to_tasks
from optimizer_service.syndicate.scheduler import (
    COMPUTE,
    Task,
    channel_and_lane,
    lane_channel,
    schedule,
    stream_channel,
)
from optimizer_service.syndicate.transforms import segment, spline_ring


def seconds(motif):
    return {Collective.REDUCE_SCATTER: 1.0, Collective.ALL_GATHER: 1.0, Collective.ALL_REDUCE: 3.0, Collective.ALL_TO_ALL: 2.0}[motif.kind]


def one_iteration():
    return TrainingDAG("toy", (
        compute("dataprep", 0.5),
        comm("a2a", Collective.ALL_TO_ALL, range(4), 64, "dataprep"),
        compute("fwd", 2.0, "a2a", previous=["step"]),
        compute("bwd", 2.0, "fwd"),
        comm("ar", Collective.ALL_REDUCE, range(4), 1000, "bwd"),
        compute("step", 1.0, "ar"),
    ))


def test_unrolling_wires_the_previous_iteration():
    dag = one_iteration().unroll(2)
    assert len(dag.nodes) == 12
    fwd1 = dag.nodes[dag.index["fwd@1"]]
    assert set(fwd1.after) == {"a2a@1", "step@0"}
    assert dag.nodes[dag.index["fwd@0"]].after == ("a2a@0",)
    with pytest.raises(InvalidInputError, match="unroll 0"):
        one_iteration().unroll(0)


def test_plans_become_motif_tasks_with_their_structure():
    dag = one_iteration()
    tasks, owned = to_tasks(dag, {"ar": spline_ring(dag.nodes[dag.index["ar"]].comm)}, seconds)
    rs, ag = owned["ar"]
    assert tasks[rs].after == tuple(owned["bwd"]) and tasks[ag].after == (rs,)
    assert tasks[owned["step"][0]].after == (ag,)
    s = schedule(tasks)
    assert s.seconds == pytest.approx(0.5 + 2.0 + 2.0 + 2.0 + 2.0 + 1.0)  # dataprep a2a fwd bwd RS+AG step


def test_parallel_segments_all_gate_the_successor_and_channels_overlap():
    dag = one_iteration()
    ar = dag.nodes[dag.index["ar"]].comm
    two = segment(ar, 500)
    split = Seq((two.parts[0],)), on_channel(two.parts[1], 1)
    tasks, owned = to_tasks(dag, {"ar": type(two)(split)}, seconds)
    assert len(owned["ar"]) == 2
    assert set(tasks[owned["step"][0]].after) == set(owned["ar"])
    assert schedule(tasks).seconds == pytest.approx(0.5 + 2.0 + 2.0 + 2.0 + 3.0 + 1.0)  # the halves overlap


def test_the_next_iteration_overlaps_through_previous_edges():
    dag = one_iteration().unroll(2)
    tasks, owned = to_tasks(dag, {}, seconds)
    s = schedule(tasks)
    # iteration 1's data prep and all-to-all do not wait for iteration 0: they hide under it
    assert s.start[owned["a2a@1"][0]] < s.end[owned["step@0"][0]]
    assert s.start[owned["fwd@1"][0]] >= s.end[owned["step@0"][0]]


def test_bad_dags_are_one_line_errors():
    with pytest.raises(InvalidInputError, match="appears twice"):
        TrainingDAG("d", (compute("a", 1.0), compute("a", 1.0)))
    with pytest.raises(InvalidInputError, match="unknown node 'b'"):
        TrainingDAG("d", (compute("a", 1.0, "b"),))
    with pytest.raises(InvalidInputError, match="cycle"):
        TrainingDAG("d", (compute("a", 1.0, "b"), compute("b", 1.0, "a")))


def two_stages():
    """Two devices computing at once (a pipeline's two stages), a send between them."""
    return TrainingDAG("two", (
        compute("a0", 2.0, stream=0),
        comm("send", Collective.BROADCAST, (0, 1), 64, "a0"),
        compute("a1", 2.0, "a0", stream=0),
        compute("b0", 3.0, stream=1),
        compute("b1", 1.0, "b0", "send", stream=1),
    ))


def test_a_compute_node_names_its_stream_and_streams_run_side_by_side():
    dag = two_stages()
    tasks, owned = to_tasks(dag, {}, lambda motif: 0.5)
    assert [tasks[owned[n][0]].channel for n in ("a0", "a1", "b0", "b1")] == [COMPUTE, COMPUTE, -2, -2]
    assert [stream_channel(k) for k in (0, 1, 3)] == [-1, -2, -4]
    assert tasks[owned["send"][0]].channel == 0 and not tasks[owned["send"][0]].is_compute
    s = schedule(tasks)
    # a0 | a1 on stream 0 and b0 | b1 on stream 1 overlap; b1 waits for b0 (3.0), the send ends at 2.5
    assert [(s.start[owned[n][0]], s.end[owned[n][0]]) for n in ("a0", "a1", "b0", "b1")] == [
        (0.0, 2.0), (2.0, 4.0), (0.0, 3.0), (3.0, 4.0)]
    assert s.seconds == 4.0 and s.compute_idle_fraction(tasks) == 0.0
    # on one stream the same DAG runs its compute one task after another
    one = TrainingDAG("one", tuple(replace(n, stream=0) for n in dag.nodes))
    tasks, _ = to_tasks(one, {}, lambda motif: 0.5)
    assert schedule(tasks).seconds == 8.0


def test_streams_survive_unrolling_and_bad_streams_are_one_line_errors():
    unrolled = two_stages().unroll(2)
    assert unrolled.nodes[unrolled.index["b1@1"]].stream == 1
    assert unrolled.nodes[unrolled.index["a1@1"]].stream == 0
    with pytest.raises(InvalidInputError, match="node 'x' has compute stream -1; it must be a whole number >= 0"):
        TrainingDAG("d", (compute("x", 1.0, stream=-1),))
    with pytest.raises(InvalidInputError, match="compute stream 'a'"):
        TrainingDAG("d", (compute("x", 1.0, stream="a"),))
    with pytest.raises(InvalidInputError, match="comm-op 'c' names compute stream 2"):
        TrainingDAG("d", (replace(comm("c", Collective.BROADCAST, (0, 1), 8), stream=2),))
    with pytest.raises(InvalidInputError, match="compute stream -3 must be a whole number"):
        stream_channel(-3)


def test_a_slowing_motif_slows_every_stream_and_idle_counts_every_stream():
    # stream 0 and stream 1 compute 2 s each from 0; a motif on channel 0 (drag 1.0) runs 0..1
    tasks = [Task("x", 2.0, stream_channel(0)), Task("y", 2.0, stream_channel(1)), Task("m", 1.0, 0)]
    s = schedule(tasks, slowdown={0: 1.0})
    # each stream does half a second of work in the first second, the remaining 1.5 s after it
    assert (s.end[0], s.end[1]) == (2.5, 2.5)
    # a stream with nothing after its task idles: one stream busy 2.5 of 2.5, the other 1.0 of 2.5
    tasks = [Task("x", 2.5, stream_channel(0)), Task("y", 1.0, stream_channel(1))]
    assert schedule(tasks).compute_idle_fraction(tasks) == pytest.approx(1 - 3.5 / 5.0)


def test_comm_ops_on_lanes_of_their_own_do_not_queue_behind_each_other():
    def dag(lanes):
        return TrainingDAG("lanes", (
            compute("x", 1.0),
            comm("a", Collective.BROADCAST, (0, 1), 8, "x", lane=lanes[0]),
            comm("b", Collective.BROADCAST, (2, 3), 8, "x", lane=lanes[1]),
            compute("y", 1.0, "a", "b"),
        ))
    tasks, owned = to_tasks(dag((0, 3)), {}, lambda motif: 2.0)
    assert tasks[owned["a"][0]].channel == 0 and tasks[owned["b"][0]].channel == lane_channel(0, 3) == 3 * (1 << 16)
    assert channel_and_lane(lane_channel(1, 3)) == (1, 3)
    assert schedule(tasks).seconds == 4.0                # x, then a | b side by side, then y
    tasks, _ = to_tasks(dag((2, 2)), {}, lambda motif: 2.0)
    assert schedule(tasks).seconds == 6.0                # one lane of channel 0: a, then b
    assert dag((0, 3)).unroll(2).nodes[6].lane == 3
    with pytest.raises(InvalidInputError, match="compute node 'x' names lane 1; only comm-ops have lanes"):
        TrainingDAG("d", (replace(compute("x", 1.0), lane=1),))
    with pytest.raises(InvalidInputError, match="node 'c' has lane -1; it must be a whole number >= 0"):
        TrainingDAG("d", (comm("c", Collective.BROADCAST, (0, 1), 8, lane=-1),))
    with pytest.raises(InvalidInputError, match="lanes are below 65536"):
        TrainingDAG("d", (comm("c", Collective.BROADCAST, (0, 1), 8, lane=1 << 16),))
