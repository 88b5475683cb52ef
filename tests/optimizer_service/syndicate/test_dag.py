"""Training DAGs: unrolling across iterations and lowering plans to scheduler tasks."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Seq, on_channel
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute, to_tasks
from optimizer_service.syndicate.scheduler import schedule
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
