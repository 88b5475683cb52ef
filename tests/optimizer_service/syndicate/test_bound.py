"""The lower bound on a job's iteration time (issue 32, item 6): per collective kind on
hand-made DAGs and topologies, what binds, the best split over two NICs, the
critical path through the iteration boundary, and that no plan of a searched
problem is priced below it."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from pathlib import Path

import pytest

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op
from optimizer_service.service import search_record
from optimizer_service.syndicate.baselines import run_systems
from optimizer_service.syndicate.bound import crossing, cycle_seconds, iteration_bound, least_seconds, max_cycle_mean
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.trace_dag import dag_from_traces
from optimizer_service.syndicate.workloads import build
from tests.support.traces import op, trace

MB = 1_000_000


def cluster(nodes: int, per_node: int, nic: float = 100 * MB, nic2: float | None = None,
            loopback: float = 1000 * MB) -> Topology:
    """``nodes`` × ``per_node`` devices: a loopback every device shares, one NIC per node (a second
    on channel 1 when ``nic2`` is given)."""
    links = [{"name": "loopback", "levels": ["device"], "bandwidth": loopback, "latency": 0,
              "shared_by": nodes * per_node},
             {"name": "nic", "levels": ["node"], "bandwidth": nic, "latency": 0, "shared_by": per_node}]
    if nic2 is not None:
        links.append({"name": "nic2", "levels": ["node"], "bandwidth": nic2, "latency": 0, "shared_by": per_node,
                      "channel": 1})
    return Topology.from_dict({"name": f"c{nodes}x{per_node}", "links": links,
                               "levels": [{"name": "node", "cardinality": nodes},
                                          {"name": "device", "cardinality": per_node}]})


def loads(found) -> dict[int, tuple[float, float]]:
    return {part: (out, into) for (part, out), (_, into) in zip(found.out_bytes, found.in_bytes)}


# ------------------------------------------------------------- bytes per collective kind
TWO_BY_TWO = cluster(2, 2)
FOUR_BY_TWO = cluster(4, 2)


def test_all_reduce_moves_its_bytes_out_of_and_into_every_node_and_2k_minus_2_times_in_all():
    found = crossing(comm_op(Collective.ALL_REDUCE, range(8), 1000), FOUR_BY_TWO, 0)
    assert loads(found) == {n: (4000.0, 4000.0) for n in range(4)}
    assert (found.total_out, found.total_in) == (6 * 4000.0, 6 * 4000.0)
    # the set of all four nodes binds: 2(k-1)/k·D = 1.5·D per node on average, above D
    assert least_seconds(comm_op(Collective.ALL_REDUCE, range(8), 1000), FOUR_BY_TWO) == pytest.approx(
        1.5 * 4000 / (100 * MB))


def test_reduce_scatter_and_all_gather_move_k_minus_1_over_k_of_the_gathered_bytes():
    scatter = crossing(comm_op(Collective.REDUCE_SCATTER, range(8), 8000), FOUR_BY_TWO, 0)
    gather = crossing(comm_op(Collective.ALL_GATHER, range(8), 8000), FOUR_BY_TWO, 0)
    whole = 8000 * 4.0
    assert loads(scatter) == {n: (whole * 3 / 4, whole / 4) for n in range(4)}
    assert loads(gather) == {n: (whole / 4, whole * 3 / 4) for n in range(4)}
    assert scatter.total_in == gather.total_out == 3 * whole


def test_all_to_all_moves_the_blocks_destined_off_node():
    found = crossing(comm_op(Collective.ALL_TO_ALL, range(8), 100, element_bytes=8), FOUR_BY_TWO, 0)
    block = 100 * 8.0
    assert loads(found) == {n: (2 * 6 * block, 2 * 6 * block) for n in range(4)}
    assert found.total_out == 4 * 12 * block
    # a window of destinations: every rank to the next one only; ranks 1 and 3 send off their node
    ring = crossing(replace(comm_op(Collective.ALL_TO_ALL, range(4), 100), window=(1, 2)), TWO_BY_TWO, 0)
    assert loads(ring) == {0: (400.0, 400.0), 1: (400.0, 400.0)}


def test_broadcast_leaves_the_roots_node_once_and_enters_every_other_node():
    ranks = (2, 0, 1, 3, 4, 5, 6, 7)                  # the root (rank 2) first, on node 1
    found = crossing(comm_op(Collective.BROADCAST, ranks, 1000), FOUR_BY_TWO, 0)
    assert loads(found) == {0: (0.0, 4000.0), 1: (4000.0, 0.0), 2: (0.0, 4000.0), 3: (0.0, 4000.0)}
    assert found.total_out == 3 * 4000.0
    reduce = crossing(comm_op(Collective.REDUCE, ranks, 1000), FOUR_BY_TWO, 0)
    assert loads(reduce) == {0: (4000.0, 0.0), 1: (0.0, 4000.0), 2: (4000.0, 0.0), 3: (4000.0, 0.0)}


def test_element_size_counts_and_an_op_inside_one_node_crosses_no_nic():
    assert crossing(comm_op(Collective.ALL_REDUCE, (0, 1), 1000), TWO_BY_TWO, 0) is None
    bf16 = comm_op(Collective.ALL_REDUCE, range(4), 1000, element_bytes=2)
    fp64 = comm_op(Collective.ALL_REDUCE, range(4), 1000, element_bytes=8)
    assert least_seconds(fp64, TWO_BY_TWO) == pytest.approx(4 * least_seconds(bf16, TWO_BY_TWO))
    # inside one node, the bytes between its devices over the loopback's one instance: 2(p-1)·D
    assert least_seconds(comm_op(Collective.ALL_REDUCE, (0, 1), 1000), TWO_BY_TWO) == pytest.approx(
        2 * 4000 / (1000 * MB))


# ------------------------------------------------------------------- what binds
def test_a_long_compute_chain_binds_on_the_compute_critical_path():
    dag = TrainingDAG("compute-bound", (
        compute("fwd", 0.5, previous=["step"]),
        compute("bwd", 1.0, "fwd"),
        comm("ar", Collective.ALL_REDUCE, range(4), 1000, "bwd"),
        compute("step", 0.1, "ar"),
    ))
    bound = iteration_bound(dag, TWO_BY_TWO)
    assert bound.binding == "compute critical path"
    assert bound.compute_seconds == pytest.approx(1.6 + 2 * 4000 / (2 * 100 * MB))   # 2·D over both nodes' NICs
    assert bound.seconds == bound.compute_seconds and bound.stream_seconds == pytest.approx(1.6)


def test_compute_off_the_cycle_binds_on_its_stream():
    # "step" waits for the all-reduce, but the next iteration waits only for "bwd": iterations overlap
    dag = TrainingDAG("stream-bound", (
        compute("fwd", 0.5, previous=["bwd"]),
        compute("bwd", 1.0, "fwd"),
        comm("ar", Collective.ALL_REDUCE, range(4), 1000, "bwd"),
        compute("step", 0.1, "ar"),
    ))
    bound = iteration_bound(dag, TWO_BY_TWO)
    assert bound.compute_seconds == pytest.approx(1.5)          # fwd -> bwd -> fwd: the all-reduce is off the cycle
    assert bound.binding == "compute stream 0" and bound.seconds == pytest.approx(1.6)


def test_nic_bytes_of_independent_ops_add_up_and_bind_on_a_nodes_nics():
    ops = [comm(f"ar{k}", Collective.ALL_REDUCE, range(4), 25 * MB, "fwd") for k in range(3)]
    dag = TrainingDAG("nic-bound", (compute("fwd", 0.01, previous=["ar0", "ar1", "ar2"]), *ops))
    bound = iteration_bound(dag, TWO_BY_TWO)
    assert bound.compute_seconds == pytest.approx(1.01)           # fwd, then one all-reduce alone: 100 MB at 100 MB/s
    assert bound.network_seconds == pytest.approx(3.0)            # all three through each node's NIC
    assert bound.binding == "node 0's NICs, outbound" and bound.seconds == bound.network_seconds
    assert [(n.node, n.out_bytes, n.in_bytes) for n in bound.nodes] == [(0, 300 * MB, 300 * MB),
                                                                       (1, 300 * MB, 300 * MB)]


def test_two_nics_of_different_rates_split_in_proportion_to_their_rates():
    topology = cluster(2, 2, nic=100 * MB, nic2=300 * MB)
    dag = TrainingDAG("two-nics", (comm("ar", Collective.ALL_REDUCE, range(4), 100 * MB, previous=["ar"]),))
    bound = iteration_bound(dag, topology)
    assert bound.network_seconds == pytest.approx(400 * MB / (400 * MB))    # 1 s: both NICs finish at once
    node = bound.nodes[0]
    assert node.rate == 400 * MB and node.seconds == pytest.approx(1.0)
    assert [(nic.channel, nic.links, nic.rate, nic.out_bytes) for nic in node.nics] == [
        (0, "nic", 100 * MB, pytest.approx(100 * MB)), (1, "nic2", 300 * MB, pytest.approx(300 * MB))]


def test_a_one_node_job_has_no_nic_term():
    topology = cluster(1, 4)
    ranks = range(topology.device_count)
    dag = TrainingDAG("one-node", (compute("fwd", 0.001, previous=["ar"]),
                                   comm("ar", Collective.ALL_REDUCE, ranks, 10 * MB, "fwd")))
    bound = iteration_bound(dag, topology)
    assert bound.network_seconds == 0.0 and bound.nodes == ()
    assert bound.binding == "compute critical path" and bound.seconds > 0.001     # the all-reduce inside the node


def test_the_nodes_of_an_all_reduce_over_four_bind_together():
    # each node moves D out, but 2(k-1)·D = 6·D must cross the 4 nodes' NICs in all
    ops = tuple(comm(f"ar{k}", Collective.ALL_REDUCE, range(8), MB, previous=[f"ar{k}"]) for k in range(2))
    bound = iteration_bound(TrainingDAG("set", ops), FOUR_BY_TWO)
    assert bound.binding == "the NICs of nodes 0, 1, 2, 3 together, outbound"
    assert bound.network_seconds == pytest.approx(2 * 6 * 4 * MB / (4 * 100 * MB))
    assert bound.compute_seconds == pytest.approx(bound.network_seconds / 2)
    assert all(node.out_bytes == 2 * 4 * MB for node in bound.nodes)     # what each node itself must send


def test_bytes_released_late_bind_on_a_nodes_nics_after_their_release():
    # 100 MB leave after 0.5 s of compute, 25 MB more after another 0.5: each node's NIC needs 1.25 s
    # for both, the heaviest chain is 1.5 s, but the NIC cannot start before 0.5 s: 1.75 s
    dag = TrainingDAG("released", (
        compute("c0", 0.5, previous=["step"]),
        comm("big", Collective.ALL_REDUCE, range(4), 25 * MB, "c0"),
        compute("c1", 0.5, "c0"),
        comm("small", Collective.ALL_REDUCE, range(4), 25 * MB // 4, "c1"),
        compute("step", 0.0, "big", "small", "c1"),
    ))
    bound = iteration_bound(dag, TWO_BY_TWO)
    assert bound.network_seconds == pytest.approx(1.25) and bound.compute_seconds == pytest.approx(1.5)
    assert bound.release_seconds == pytest.approx(1.75) == bound.seconds
    assert bound.binding == "node 0's NICs after the ops' release, outbound"
    assert "NICs 1.25 s, from the ops' release 1.75 s)" in str(bound)
    assert bound.to_dict()["release_seconds"] == bound.release_seconds


def test_no_release_term_where_iterations_may_overlap():
    # the next iteration waits for "bwd" only: the all-reduce may run beside it
    dag = TrainingDAG("overlapping", (
        compute("fwd", 0.5, previous=["bwd"]),
        compute("bwd", 1.0, "fwd"),
        comm("ar", Collective.ALL_REDUCE, range(4), 100 * MB, "bwd"),
        compute("step", 0.1, "ar"),
    ))
    assert iteration_bound(dag, TWO_BY_TWO).release_seconds == 0.0
    # two boundaries the next iteration waits for
    two = TrainingDAG("two", (compute("a", 1.0, previous=["a"]),
                              comm("ar", Collective.ALL_REDUCE, range(4), MB, previous=["ar"])))
    assert iteration_bound(two, TWO_BY_TWO).release_seconds == 0.0


def test_no_plan_of_a_traced_ddp_window_is_priced_below_its_release_bound():
    """The recorded DDP first window (three gradient buckets, then the loss): its bound is the
    release term, above both the NICs' bytes and the critical path, and every system's plan and
    random choices are priced above it."""
    record = search_record.read(Path(__file__).parent / "data" / "ddp-first-window.json")
    topology = Topology.from_yaml(record.topology_yaml)
    dag = dag_from_traces(record.traces)
    bound = iteration_bound(dag, topology)
    assert bound.release_seconds > max(bound.network_seconds, bound.compute_seconds)
    assert "NICs after the ops' release" in bound.binding and bound.seconds == bound.release_seconds
    problem = Problem(dag, MotifCostModel(topology))
    results = run_systems(problem, budget=30, seed=0, clock=itertools.count().__next__)
    rng = random.Random(0)
    for choice in [r.choice for r in results] + [[rng.randrange(len(o)) for o in problem.options] for _ in range(20)]:
        assert problem.cost_of(choice) >= bound.seconds * (1 - 1e-9)


# ---------------------------------------------------------- the critical path per iteration
def test_the_critical_path_is_the_heaviest_cycle_through_the_iteration_boundary_per_iteration():
    dag = TrainingDAG("alternating", (
        compute("a", 3.0, previous=["b"]),
        compute("b", 1.0, previous=["a"]),
    ))
    assert cycle_seconds(dag, [3.0, 1.0]) == pytest.approx(2.0)     # a@k -> b@k+1 -> a@k+2: 4 s per 2 iterations
    assert cycle_seconds(TrainingDAG("free", (compute("x", 5.0),)), [5.0]) == 0.0
    inf = float("-inf")
    assert max_cycle_mean([[inf, 1.0, inf], [inf, inf, 5.0], [0.0, inf, 2.0]]) == pytest.approx(2.0)


def test_a_traced_dag_bound_is_its_iterations_critical_path():
    iteration = [op("all_reduce", 4 * MB, 0.010, 0.050), op("all_reduce", 4 * MB, 0.060, 0.090)]
    later = [op("all_reduce", 4 * MB, 0.110, 0.150), op("all_reduce", 4 * MB, 0.160, 0.190)]
    traces = [trace(iteration, later, rank=r) for r in range(4)]
    dag = dag_from_traces(traces)
    topology = TWO_BY_TWO
    weight = [least_seconds(n.comm, topology) if n.is_comm else n.seconds for n in dag.nodes]
    longest = {}
    for i in dag.order:                      # the one iteration's critical path, compute#0 .. step
        node = dag.nodes[i]
        longest[node.name] = weight[i] + max((longest[b] for b in node.after), default=0.0)
    assert iteration_bound(dag, topology).compute_seconds == pytest.approx(longest["step"])


# ------------------------------------------------------------- no plan beats it
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", ["dlrm-a1", "cnn-dp", "transformer-dp-tp"])
def test_no_plan_of_a_searched_problem_is_priced_below_the_bound(name, seed):
    topology = cluster(2, 4, nic=25 * MB, nic2=12 * MB, loopback=200 * MB)
    dag = build(name, topology)
    bound = iteration_bound(dag, topology)
    problem = Problem(dag, MotifCostModel(topology))
    results = run_systems(problem, budget=30, seed=seed, clock=itertools.count().__next__)   # 30 evaluations
    rng = random.Random(seed)
    choices = [r.choice for r in results] + [[rng.randrange(len(o)) for o in problem.options] for _ in range(20)]
    for choice in choices:
        assert problem.cost_of(choice) >= bound.seconds * (1 - 1e-9)


def test_plan_job_carries_the_bound_on_its_plan():
    topology = cluster(2, 4, nic=25 * MB, nic2=12 * MB, loopback=200 * MB)
    job = plan_job(build("dlrm-a1", topology), topology, budget=20, seed=0, clock=itertools.count().__next__)
    assert job.plan.bound_iteration_seconds == job.bound.seconds > 0
    assert job.plan.predicted_iteration_seconds >= job.bound.seconds
    assert "bound by" in str(job.bound)
