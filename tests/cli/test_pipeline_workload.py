"""The pipeline workloads of ``p2 optimize`` (optimizer_service.cli.pipeline_workload):
every boundary's resharding planned by the resharding planner as broadcast
motifs, a compute stream per stage, and the joint optimizer on them."""

from dataclasses import replace
from itertools import pairwise

import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.cli.pipeline_workload import (
    ACTIVATION,
    SKIP_FACTOR,
    build_pipeline_workload,
    default_topology,
    stage_mesh,
)
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.resharding.pipeline_costs import CommEdge, PipelineCosts
from optimizer_service.resharding.pipeline_sim import simulate
from optimizer_service.syndicate.dag import TrainingDAG
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.problem import Problem

TOPOLOGY = default_topology()


def test_the_default_topology_is_the_emulated_4x4_cluster_and_stages_sit_a_host_each():
    assert TOPOLOGY.name == "emulated-4x4" and TOPOLOGY.hierarchy == (4, 4)
    assert [stage_mesh(s, TOPOLOGY).ranks for s in range(4)] == [tuple(range(4 * s, 4 * s + 4)) for s in range(4)]
    assert stage_mesh(2, load_topology("hgx2-4n")).ranks == (16, 17, 18, 19)      # host 2's first four GPUs


@pytest.mark.parametrize("name, edges", [
    ("pipeline-gpt", {(0, 1), (1, 2), (2, 3)}),
    ("pipeline-u-transformer", {(0, 1), (1, 2), (2, 3), (0, 3)}),
])
def test_every_boundary_is_the_planners_program_as_broadcast_motifs(name, edges):
    workload = build_pipeline_workload(name, TOPOLOGY, "eager-1f1b", 4)
    dag = workload.dag
    assert {(b, a) for a, b in edges} | edges == set(workload.transfers)
    assert workload.simulated_seconds == simulate(workload.schedule, workload.costs).iteration_seconds
    node = {n.name: n for n in dag.nodes}
    for a, b in edges:
        for prefix, (src, dst) in ((f"{a}>{b}:F2", (a, b)), (f"{b}>{a}:B2", (b, a))):
            planned = [t for plan in workload.transfers[(src, dst)] for t in plan.program.tasks]
            motifs = [node[f"{prefix}#{k}"].comm for k in range(len(planned))]
            assert f"{prefix}#{len(planned)}" not in node
            for task, motif in zip(planned, motifs):
                assert motif.kind is Collective.BROADCAST
                assert motif.ranks == (task.sender, *task.receivers) and motif.elements == task.box.elements
                assert set(motif.ranks[1:]) == set(stage_mesh(dst, TOPOLOGY).ranks)
                assert motif.ranks[0] in stage_mesh(src, TOPOLOGY).ranks
    # S^0RR on a 1x4 mesh: every device holds the whole activation; a skip edge carries a larger map
    whole = ACTIVATION[0] * ACTIVATION[1] * ACTIVATION[2]
    assert node["0>1:F0#0"].comm.elements == whole
    if (0, 3) in edges:
        assert node["0>3:F0#0"].comm.elements == SKIP_FACTOR * whole
        assert {n.name for n in dag.nodes if n.name.startswith("1>2:F0#")} == {"1>2:F0#0", "1>2:F0#1"}
    assert {n.stream for n in dag.nodes if not n.is_comm} == {0, 1, 2, 3}


def costs_as_priced(workload, cost: MotifCostModel) -> PipelineCosts:
    """The workload's stage profile with every edge's transfer priced as the joint optimizer prices its motifs."""
    node = {n.name: n for n in workload.dag.nodes}

    def price(prefix: str) -> float:
        return sum(cost.seconds(n.comm) for name, n in node.items() if name.startswith(prefix))
    pairs = sorted({tuple(sorted(edge)) for edge in workload.transfers})
    return PipelineCosts(workload.costs.name, workload.costs.stages,
                         tuple(CommEdge(a, b, price(f"{a}>{b}:F0#"), price(f"{b}>{a}:B0#")) for a, b in pairs))


@pytest.mark.parametrize("name", ["pipeline-gpt", "pipeline-u-transformer"])
def test_the_joint_optimizer_keeps_dependencies_and_each_stage_computes_one_action_at_a_time(name):
    workload = build_pipeline_workload(name, TOPOLOGY, "eager-1f1b", 4)
    job = plan_job(workload.dag, TOPOLOGY, budget=0.3, seed=0, clock=lambda: 0.0)
    systems = {r.name: r for r in job.results}
    assert systems["Syndicate"].seconds <= systems["FIFO"].seconds * (1 + 1e-12)
    # a stream per stage, a lane per directed edge: the critical-path systems predict the simulator's iteration
    # (each transfer priced as the optimizer prices its motifs, which it keeps whole); FIFO's order costs more
    simulated = simulate(workload.schedule, costs_as_priced(workload, job.problem.cost)).iteration_seconds
    assert simulated == pytest.approx(workload.simulated_seconds, rel=0.02)
    for system in ("HO", "S-Sched", "Syndicate"):
        assert systems[system].seconds == pytest.approx(simulated, rel=1e-9), system
        assert systems[system].steady_seconds == pytest.approx(simulated, rel=1e-9), system
    assert systems["FIFO"].seconds > simulated
    # the same choices with every stage's compute on one stream take longer (FIFO's as long where its one
    # channel, issued in program order, is the bottleneck either way)
    one_stream = TrainingDAG("one", tuple(replace(n, stream=0) for n in workload.dag.nodes))
    serialised = Problem(one_stream, job.problem.cost)
    nodes = job.problem.unrolled.nodes
    for result in job.results:
        e = result.evaluation
        alone = serialised.cost_of(result.choice, result.policy, result.framework_order)
        assert e.seconds < alone if result.name == "Syndicate" else e.seconds <= alone, result.name
        assert e.seconds >= simulated * (1 - 1e-9)
        tasks_of: dict[int, list[int]] = {}
        for task, node in enumerate(e.task_node):
            tasks_of.setdefault(node, []).append(task)
        for index, node in enumerate(nodes):
            begin = min(e.start[t] for t in tasks_of[index])
            for before in node.after:
                assert begin >= max(e.end[t] for t in tasks_of[job.problem.unrolled.index[before]]) - 1e-12
        spans: dict[int, list[tuple[float, float]]] = {}
        for index, node in enumerate(nodes):
            if not node.is_comm:
                task, = tasks_of[index]
                spans.setdefault(node.stream, []).append((e.start[task], e.end[task]))
        assert set(spans) == {0, 1, 2, 3}
        for stream in spans.values():
            stream.sort()
            assert all(a[1] <= b[0] + 1e-12 for a, b in pairwise(stream)), result.name


def test_a_topology_without_four_hosts_of_four_devices_is_refused():
    with pytest.raises(InvalidInputError, match="has 2 of 8; pass a larger --topology"):
        build_pipeline_workload("pipeline-gpt", load_topology("gcp-v100-2n"))
    with pytest.raises(InvalidInputError, match="unknown pipeline workload 'pipeline-bert'"):
        build_pipeline_workload("pipeline-bert", TOPOLOGY)
