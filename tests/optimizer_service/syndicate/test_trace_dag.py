"""Training DAGs read from enforcer traces (optimizer_service.syndicate.trace_dag)."""

import importlib
from types import SimpleNamespace

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op
from optimizer_service.syndicate.dag import to_tasks
from optimizer_service.syndicate.scheduler import schedule
from optimizer_service.syndicate.trace_dag import dag_from_traces, trace_iteration_seconds
from tests.support.traces import op, trace


def node(dag, name):
    return dag.nodes[dag.index[name]]


def blocking_trace(rank=0, shift=0.0):
    # Every op completes before the next is issued.
    return trace([op("all_reduce", 400, 1.0, 1.5), op("all_reduce", 800, 2.0, 2.25)],
                 [op("all_reduce", 400, 3.0 + shift, 3.5 + shift), op("all_reduce", 800, 4.0, 4.25)],
                 [op("all_reduce", 400, 5.0, None)], rank=rank)


def test_a_blocking_chain_alternates_compute_and_ops():
    dag = dag_from_traces([blocking_trace()])
    assert [n.name for n in dag.nodes] == ["compute#0", "all_reduce#0", "compute#1", "all_reduce#1", "step"]
    assert [n.seconds for n in dag.nodes] == [0.75, 0.0, 0.5, 0.0, 0.0]  # 3.0-2.25, 4.0-3.5
    assert node(dag, "compute#0").after == () and node(dag, "compute#0").after_previous == ("step",)
    assert node(dag, "all_reduce#0").after == ("compute#0",)
    assert node(dag, "compute#1").after == ("all_reduce#0",)
    assert node(dag, "all_reduce#1").after == ("compute#1",)
    assert node(dag, "step").after == ("compute#1", "all_reduce#1")
    assert node(dag, "all_reduce#0").comm == comm_op(Collective.ALL_REDUCE, (0, 1), 100)
    assert node(dag, "all_reduce#1").comm == comm_op(Collective.ALL_REDUCE, (0, 1), 200)
    assert "iteration 1" in dag.description and "2 ops" in dag.description and "1.25 s of compute" in dag.description
    assert trace_iteration_seconds([blocking_trace()]) == 2.0  # 5.0 - 3.0

    unrolled = dag.unroll(2)
    assert set(node(unrolled, "compute#0@1").after) == {"step@0"}
    assert node(unrolled, "compute#0@0").after == ()

    # Measured op durations give back the measured iteration.
    measured = {node(dag, "all_reduce#0").comm: 0.5, node(dag, "all_reduce#1").comm: 0.25}
    tasks, _ = to_tasks(dag, {}, measured.__getitem__)
    assert schedule(tasks).seconds == pytest.approx(2.0)
    tasks, _ = to_tasks(unrolled, {}, measured.__getitem__)
    assert schedule(tasks).seconds == pytest.approx(4.0)


def test_an_explicit_iteration_is_read():
    dag = dag_from_traces([blocking_trace()], iteration=0)
    assert node(dag, "compute#0").seconds == 0.0  # the first op of the trace: no gap known
    assert node(dag, "compute#1").seconds == 0.5  # 2.0 - 1.5
    assert trace_iteration_seconds([blocking_trace()], iteration=0) == 2.0  # 3.0 - 1.0


def test_overlapped_ops_are_timed_issue_to_issue_and_feed_step():
    # all_reduce#0 runs until 4.5 while all_reduce#1 (issued 3.5) and its blocking successor run.
    t = trace([op("all_reduce", 4, 1.0, 1.5)],
              [op("all_reduce", 400, 2.0, 4.5), op("all_reduce", 800, 3.5, 4.0), op("reduce", 40, 4.25, 4.5)],
              [op("all_reduce", 4, 5.0, 5.5)])
    dag = dag_from_traces([t])
    assert [n.name for n in dag.nodes] == ["compute#0", "all_reduce#0", "compute#1", "all_reduce#1",
                                          "compute#2", "reduce#2", "step"]
    assert node(dag, "compute#0").seconds == 0.5      # gap after the previous iteration
    assert node(dag, "compute#1").seconds == 1.5      # issued 3.5 - issued 2.0
    assert node(dag, "compute#1").after == ("compute#0",)
    assert node(dag, "compute#2").seconds == 0.25     # blocking: 4.25 - 4.0
    assert node(dag, "compute#2").after == ("all_reduce#1",)
    assert node(dag, "step").after == ("compute#2", "all_reduce#0", "reduce#2")
    assert trace_iteration_seconds([t]) == 3.0


def test_every_comm_kind_maps_to_its_motif_and_other_ops_become_compute():
    group = (2, 5, 7)
    ops = [op("all_reduce", 402, 0.0, 0.5, group),                 # ceil(402 / 4) = 101
           op("broadcast", 4000, 1.0, 1.5, group, root=1),
           op("reduce", 4000, 2.0, 2.5, group),
           op("all_gather", 1200, 3.0, 3.5, group),
           op("all_gather_into_tensor", 1200, 4.0, 4.5, group),
           op("reduce_scatter", 1200, 5.0, 5.5, group),
           op("reduce_scatter_tensor", 1200, 6.0, 6.5, group),
           op("all_to_all", 1200, 7.0, 7.5, group),                # 3 blocks of 100 elements
           op("all_to_all_single", 1204, 8.0, 8.5, group),         # ceil(1204 / 4 / 3) = 101
           op("barrier", 0, 9.0, 9.25, group),
           op("send", 64, 10.0, None, group),
           op("all_reduce_coalesced", 64, 11.0, 11.125, group)]
    later = [dict(o, issued=o["issued"] + 20, completed=o["issued"] + 20.5) for o in ops]
    dag = dag_from_traces([trace(ops, later, world_size=8)], iteration=0)
    expected = {"all_reduce#0": comm_op(Collective.ALL_REDUCE, group, 101),
                "broadcast#1": comm_op(Collective.BROADCAST, (5, 7, 2), 1000),
                "reduce#2": comm_op(Collective.REDUCE, group, 1000),
                "all_gather#3": comm_op(Collective.ALL_GATHER, group, 300),
                "all_gather_into_tensor#4": comm_op(Collective.ALL_GATHER, group, 300),
                # the list form passes through, as gloo (the traces name no other backend) runs it
                "reduce_scatter#5": comm_op(Collective.ALL_REDUCE, group, 300),
                "reduce_scatter_tensor#6": comm_op(Collective.REDUCE_SCATTER, group, 300),
                "all_to_all#7": comm_op(Collective.ALL_TO_ALL, group, 100),
                "all_to_all_single#8": comm_op(Collective.ALL_TO_ALL, group, 101)}
    assert {n.name: n.comm for n in dag.comm_ops} == expected
    assert node(dag, "all_gather#3").comm.ranges == ((0, 100), (100, 200), (200, 300))
    barrier, send, coalesced = node(dag, "barrier#9"), node(dag, "send#10"), node(dag, "all_reduce_coalesced#11")
    assert not barrier.is_comm and barrier.seconds == 0.25 and barrier.after == ("compute#9",)
    assert send.seconds == 0.0 and coalesced.seconds == 0.125   # never completed: 0
    assert node(dag, "compute#10").after == ("barrier#9",)      # the barrier blocked
    assert node(dag, "compute#11").after == ("compute#10",)     # the send did not complete
    assert "send#10" in node(dag, "step").after
    assert "9 optimizable" in dag.description and "barrier#9, send#10, all_reduce_coalesced#11" in dag.description


def test_an_op_that_completed_before_a_later_one_was_issued_precedes_it():
    # DDP: buckets b0, b1 issued back to back; the reducer waits on both (in C++, unseen), then the
    # loss all-reduce comes. b0 does not block b1, yet it finished before the loss was issued: a plan
    # that put the loss first would deadlock (the dispatcher waits for it, the program for b0).
    t = trace([op("all_reduce", 4, 1.0, 1.5)],
              [op("all_reduce", 400, 2.0, 2.6), op("all_reduce", 400, 2.1, 3.0), op("all_reduce", 4, 3.2, 3.3)],
              [op("all_reduce", 4, 5.0, 5.5)])
    dag = dag_from_traces([t])
    assert node(dag, "compute#1").after == ("compute#0",)                  # b1 was issued while b0 ran
    assert set(node(dag, "compute#2").after) == {"all_reduce#1", "all_reduce#0"}


def test_a_completion_stamped_just_after_the_next_issue_is_a_tie():
    # DDP's loss all-reduce is issued when the last bucket completes; the enforcer's stamp of that
    # completion can land a little after the issue (a future callback). Read as "issued while the
    # bucket ran", the whole bucket time became compute (found live: 150 ms of a 180 ms step).
    t = trace([op("all_reduce", 4, 1.0, 1.5)],
              [op("all_reduce", 400, 2.0, 2.6), op("all_reduce", 400, 2.1, 3.0), op("all_reduce", 4, 2.9995, 3.1)],
              [op("all_reduce", 4, 5.0, 5.5)])
    dag = dag_from_traces([t])
    assert node(dag, "compute#2").seconds == 0.0
    assert set(node(dag, "compute#2").after) == {"all_reduce#1", "all_reduce#0"}
    late = trace([op("all_reduce", 4, 1.0, 1.5)],                     # 10 ms apart: not a tie
                 [op("all_reduce", 400, 2.0, 2.6), op("all_reduce", 400, 2.1, 3.0), op("all_reduce", 4, 2.99, 3.1)],
                 [op("all_reduce", 4, 5.0, 5.5)])
    dag = dag_from_traces([late])
    assert node(dag, "compute#2").after == ("compute#1", "all_reduce#0")   # b0 done before; b1 not
    assert node(dag, "compute#2").seconds == pytest.approx(2.99 - 2.6)


def test_a_compute_that_waited_for_an_earlier_op_is_not_charged_the_wait():
    # o0 completes at 2.5 while o1 (issued 2.1) runs on; o2 comes at 3.0. The trace says the program
    # was past o0 when it issued o2, so compute#2 follows o0: its seconds run from o0's completion,
    # so that o0 ending at 2.5 puts o2's issue back at 3.0 (not at 2.5 + 0.9, issue to issue).
    t = trace([op("all_reduce", 4, 1.0, 1.5)],
              [op("all_reduce", 400, 2.0, 2.5), op("all_reduce", 400, 2.1, 4.0), op("all_reduce", 4, 3.0, 4.2)],
              [op("all_reduce", 4, 5.0, 5.5)])
    dag = dag_from_traces([t])
    assert node(dag, "compute#2").after == ("compute#1", "all_reduce#0")
    assert node(dag, "compute#2").seconds == pytest.approx(0.5)      # 3.0 - 2.5


def test_two_ranks_take_the_slowest_compute():
    fast, slow = blocking_trace(rank=0), blocking_trace(rank=1, shift=0.125)
    # rank 1: compute#0 = 3.125 - 2.25, compute#1 = 4.0 - 3.625
    dag = dag_from_traces([fast, slow])
    assert node(dag, "compute#0").seconds == 0.875 and node(dag, "compute#1").seconds == 0.5
    assert "2 rank(s)" in dag.description
    assert trace_iteration_seconds([fast, slow]) == 2.0  # rank 0: 5.0 - 3.0; rank 1: 5.0 - 3.125


def test_ranks_must_record_the_same_ops():
    other = blocking_trace(rank=1)
    other["ops"][3]["bytes"] = 804
    with pytest.raises(InvalidInputError, match=r"iteration 1, op 1: rank 1 has all_reduce of 804 bytes .* "
                                                r"rank 0 has all_reduce of 800 bytes"):
        dag_from_traces([blocking_trace(), other])
    other = blocking_trace(rank=1)
    del other["ops"][3]
    with pytest.raises(InvalidInputError, match="op 1: rank 1 has no op but rank 0 has all_reduce"):
        dag_from_traces([blocking_trace(), other], iteration=1)
    other = blocking_trace(rank=1)
    other["ops"][2]["group"] = [1, 0]
    with pytest.raises(InvalidInputError, match=r"op 0: rank 1 has all_reduce of 400 bytes on group \[1, 0\]"):
        dag_from_traces([blocking_trace(), other])
    with pytest.raises(InvalidInputError, match="world size 4 but rank 0 has 2"):
        dag_from_traces([blocking_trace(), dict(blocking_trace(rank=1), world_size=4)])
    with pytest.raises(InvalidInputError, match="two traces of rank 0"):
        dag_from_traces([blocking_trace(), blocking_trace()])


def test_bad_input_is_reported_in_one_line():
    one = trace([op("all_reduce", 4, 0.0, 1.0)])
    with pytest.raises(InvalidInputError, match="fewer than two iterations; record more steps"):
        dag_from_traces([one])
    assert dag_from_traces([one], iteration=0).nodes[1].name == "all_reduce#0"  # complete: every op completed
    assert trace_iteration_seconds([one], iteration=0) == 1.0
    with pytest.raises(InvalidInputError, match="iteration 2 of rank 0 is still running"):
        dag_from_traces([blocking_trace()], iteration=2)
    with pytest.raises(InvalidInputError, match=r"no ops in iteration 7 \(it holds iterations \[0, 1, 2\]\)"):
        dag_from_traces([blocking_trace()], iteration=7)
    with pytest.raises(InvalidInputError, match="no traces given"):
        dag_from_traces([])
    with pytest.raises(InvalidInputError, match="not a 'p2enforcer-trace' trace .format 'p2enforcer-plan'"):
        dag_from_traces([dict(blocking_trace(), format="p2enforcer-plan")])
    with pytest.raises(InvalidInputError, match=r"trace 1 is not a 'p2enforcer-trace' trace \(a list\)"):
        dag_from_traces([blocking_trace(), []])
    broken = blocking_trace()
    del broken["ops"][3]["issued"]
    with pytest.raises(InvalidInputError, match="no field 'issued'") as error:
        dag_from_traces([broken])
    assert "\n" not in str(error.value)
    bad_root = trace([op("broadcast", 4, 0.0, 1.0, root=2)], [op("broadcast", 4, 2.0, 3.0, root=2)])
    with pytest.raises(InvalidInputError, match="root 2 is not a group position 0..1"):
        dag_from_traces([bad_root], iteration=0)


def test_a_recorded_trace_schedules_to_its_measured_iteration(monkeypatch):
    trace_module = importlib.import_module("enforcer.trace")  # the module, not enforcer.trace()

    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(trace_module, "time", SimpleNamespace(perf_counter=lambda: clock.now, time=lambda: 0.0))
    tracer = trace_module.Tracer(0, 2)
    setup = tracer.issue("broadcast", "float32", 1024, (0, 1), "0")
    clock.now += 0.25
    tracer.complete(setup)
    for _ in range(3):
        clock.now += 0.5                                   # forward + backward
        ar = tracer.issue("all_reduce", "float32", 4096, (0, 1), "0")
        clock.now += 0.25
        tracer.complete(ar)
        clock.now += 0.125
        ag = tracer.issue("all_gather_into_tensor", "float32", 8192, (0, 1), "0")
        clock.now += 0.375
        tracer.complete(ag)
        clock.now += 0.0625
        barrier = tracer.issue("barrier", "", 0, (0, 1), "0")
        clock.now += 0.125
        tracer.complete(barrier)
        tracer.step()
    recorded = tracer.to_dict()

    dag = dag_from_traces([recorded])
    assert [n.name for n in dag.nodes] == ["compute#0", "all_reduce#0", "compute#1", "all_gather_into_tensor#1",
                                          "compute#2", "barrier#2", "step"]
    assert "iteration 1" in dag.description
    measured = {node(dag, "all_reduce#0").comm: 0.25, node(dag, "all_gather_into_tensor#1").comm: 0.375}
    iteration = trace_iteration_seconds([recorded])
    assert iteration == pytest.approx(0.5 + 0.25 + 0.125 + 0.375 + 0.0625 + 0.125)
    tasks, _ = to_tasks(dag, {}, measured.__getitem__)
    assert schedule(tasks).seconds == pytest.approx(iteration)
    tasks, _ = to_tasks(dag.unroll(2), {}, measured.__getitem__)
    assert schedule(tasks).seconds == pytest.approx(2 * iteration)


def subgroup_traces():
    """4 ranks, ``new_group`` style: a bucket all-reduce on [0,1] / [2,3], a gradient all-reduce on
    [0,2] / [1,3], a barrier on the replica group, the loss all-reduce on the world."""
    def ops_of(rank, start):
        replica, peer = ((0, 1) if rank < 2 else (2, 3)), ((0, 2) if rank % 2 == 0 else (1, 3))
        return [op("all_reduce", 400, start, start + 0.5, replica), op("all_reduce", 800, start + 1.0, start + 1.5, peer),
                op("barrier", 0, start + 1.75, start + 2.0, replica), op("all_reduce", 4, start + 2.5, start + 2.75,
                                                                         (0, 1, 2, 3))]
    return [trace(ops_of(rank, 0.0), ops_of(rank, 10.0), ops_of(rank, 20.0)[:1], rank=rank, world_size=4)
            for rank in range(4)]


def test_parallel_subgroups_are_one_node_per_group_sharing_the_compute():
    dag = dag_from_traces(subgroup_traces())
    assert [n.name for n in dag.nodes] == [
        "compute#0", "all_reduce#0[0,1]", "all_reduce#0[2,3]", "compute#1", "all_reduce#1[0,2]", "all_reduce#1[1,3]",
        "compute#2", "barrier#2", "compute#3", "all_reduce#3", "step"]
    assert node(dag, "all_reduce#0[2,3]").comm == comm_op(Collective.ALL_REDUCE, (2, 3), 100)
    assert node(dag, "all_reduce#1[1,3]").comm == comm_op(Collective.ALL_REDUCE, (1, 3), 200)
    assert node(dag, "all_reduce#3").comm == comm_op(Collective.ALL_REDUCE, (0, 1, 2, 3), 1)
    assert node(dag, "compute#1").after == ("all_reduce#0[0,1]", "all_reduce#0[2,3]")   # blocking, on every rank
    assert not node(dag, "barrier#2").is_comm and node(dag, "barrier#2").seconds == 0.25
    assert "2 on parallel subgroups" in dag.description and "timed as compute: barrier#2" in dag.description


def test_the_groups_of_one_op_must_be_equal_or_disjoint():
    traces = subgroup_traces()
    traces[2]["ops"][5]["group"] = [1, 2]       # rank 2's second op of iteration 1 overlaps [0,2] and [1,3]
    with pytest.raises(InvalidInputError, match=r"iteration 1, op 1: rank 2 has all_reduce of 800 bytes on group "
                                                r"\[1, 2\] but rank 0 has .* on group \[0, 2\]; the groups of one op "
                                                r"must be the same or disjoint"):
        dag_from_traces(traces)
