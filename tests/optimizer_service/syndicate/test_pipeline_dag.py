"""A pipeline schedule as a training DAG (eager-1F1B §4 for Syndicate's
scheduler): its nodes and edges, Syndicate's critical-path scheduler on it
(one compute stream per stage reproduces the pipeline simulator), and the
joint optimizer planning its resharding motifs on a real topology with the
stages side by side."""

from dataclasses import dataclass, field, replace
from itertools import pairwise

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.catalog import load_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.pipeline import PipelineSchedule
from optimizer_service.resharding.pipeline_costs import gpt_like, u_transformer_like
from optimizer_service.resharding.pipeline_schedules import SCHEDULE_NAMES, build_schedule, one_f_one_b
from optimizer_service.resharding.pipeline_sim import simulate
from optimizer_service.syndicate.baselines import SYSTEMS, run_systems
from optimizer_service.syndicate.dag import to_tasks
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.pipeline_dag import BoundaryMotifs, broadcasts, pipeline_dag, stage_of
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.scheduler import Policy, schedule, stream_channel

TOPOLOGY = load_topology("hgx2-4n")      # 4 nodes x 8 GPUs: one node per stage


def mesh_boundaries(stages: int, devices: int = 2, elements: int = 1 << 20) -> list[BoundaryMotifs]:
    """Stage s on node s; an activation sharded over ``devices`` GPUs moves GPU k -> GPU k (send/recv
    as 2-rank broadcasts), its gradient back the same way."""
    return [BoundaryMotifs(s, s + 1,
                           broadcasts([((8 * s + k, 8 * (s + 1) + k), elements) for k in range(devices)]),
                           broadcasts([((8 * (s + 1) + k, 8 * s + k), elements) for k in range(devices)]))
            for s in range(stages - 1)]


def test_the_dag_of_a_small_1f1b():
    costs = gpt_like(2, forward_seconds=1.0, backward_seconds=2.0)
    # program order: the dry run's steps (0F0 | 0F1 1F0 | 1B0 | 0B0 1F1 | 1B1 | 0B1), each action then its sends
    dag = pipeline_dag(one_f_one_b(2, 2), costs.seconds, mesh_boundaries(2, devices=1, elements=64))
    assert [n.name for n in dag.nodes] == [
        "0F0", "0>1:F0#0", "0F1", "0>1:F1#0", "1F0", "1B0", "1>0:B0#0", "0B0", "1F1", "1B1", "1>0:B1#0", "0B1"]
    node = {n.name: n for n in dag.nodes}
    assert node["1F0"].after == ("0>1:F0#0",) and node["1F0"].seconds == 1.0
    # the stage's schedule order binds every system (a data dependency, not program order only)
    assert node["0B0"].after == ("0F1", "0F0", "1>0:B0#0") and node["0B0"].issued_after == ()
    assert node["1>0:B1#0"].after == ("1B1",)
    # each stage computes on its own stream; comm-ops name none
    assert [node[a].stream for a in ("0F0", "0B1", "1F0", "1B1")] == [0, 0, 1, 1]
    assert node["1>0:B0#0"].stream == 0
    assert str(node["0>1:F1#0"].comm) == "Broadcast(0,8)[0:64]"
    assert node["1>0:B0#0"].comm.kind is Collective.BROADCAST and node["1>0:B0#0"].comm.ranks == (8, 0)
    # the optimizer step: the next iteration's first action on a stage needs all its weight gradients
    assert node["0F0"].after_previous == ("0B0", "0B1") and node["1F0"].after_previous == ("1B0", "1B1")
    assert node["1F1"].after == ("1B0", "0>1:F1#0") and node["0F0"].after == ()
    unrolled = dag.unroll(2)
    assert set(unrolled.nodes[unrolled.index["0F0@1"]].after) == {"0B0@0", "0B1@0"}
    assert stage_of("1B0@1") == 1 and stage_of("1>0:B0#0") is None


def test_split_backwards_and_skip_edges():
    costs = u_transformer_like(3)
    boundaries = [BoundaryMotifs(0, 2, broadcasts([((0, 16), 8)]), broadcasts([((16, 0), 8)])),
                  *mesh_boundaries(3, devices=1, elements=8)]
    dag = pipeline_dag(build_schedule("eager-1f1b-wd", 3, 2, delays=0), costs.seconds, boundaries)
    node = {n.name: n for n in dag.nodes}
    assert set(node["2F0"].after) == {"0>2:F0#0", "1>2:F0#0"}
    assert node["0I0"].after == ("0F1", "0F0", "1>0:B0#0", "2>0:B0#0")
    assert node["2>0:B0#0"].after == ("2I0",) and node["0W0"].after == ("0I0",)
    assert node["2W0"].after == ("2I0",) and node["2F1"].after == ("2W0", "0>2:F1#0", "1>2:F1#0")
    assert node["0F0"].after_previous == ("0W0", "0W1")


def test_a_boundary_without_motifs_links_the_compute_directly():
    dag = pipeline_dag(one_f_one_b(3, 1), gpt_like(3).seconds, [])
    node = {n.name: n for n in dag.nodes}
    assert node["2F0"].after == ("1F0",) and node["1B0"].after == ("1F0", "2B0")
    assert {n.stream for n in dag.nodes} == {0, 1, 2}
    assert not dag.comm_ops


@pytest.mark.parametrize("boundaries, message", [
    ([BoundaryMotifs(0, 3, (), ())], "names stage 3"),
    ([BoundaryMotifs(0, 1, (), ()), BoundaryMotifs(0, 1, (), ())], "given twice"),
])
def test_bad_boundaries(boundaries, message):
    with pytest.raises(InvalidInputError, match=message):
        pipeline_dag(one_f_one_b(3, 1), gpt_like(3).seconds, boundaries)
    with pytest.raises(InvalidInputError, match="from < to"):
        BoundaryMotifs(1, 1, (), ())


def test_a_deadlocked_schedule_is_refused():
    bad = PipelineSchedule.parse("bad stages=2 microbatches=2\n0: 0F0 0B0 0F1 0B1\n1: 1F0 1F1 1B0 1B1")
    with pytest.raises(InvalidInputError, match="deadlocks"):
        pipeline_dag(bad, gpt_like(2).seconds, [])


@pytest.mark.parametrize("make", [gpt_like, u_transformer_like])
@pytest.mark.parametrize("comm", [0.0, 0.004, 0.02])
def test_the_critical_path_scheduler_with_a_stream_per_stage_is_the_pipeline_simulator(make, comm):
    """Syndicate's scheduler, on the DAG's own compute streams and with each
    directed edge's motif on a channel of its own priced as the simulator
    prices the edge, times every action as :func:`simulate` does."""
    costs = make(4, comm_seconds=comm)
    price, boundaries = {}, []
    for k, e in enumerate(costs.all_edges()):
        forward = replace(broadcasts([((e.from_stage, e.to_stage), 10 + k)])[0], channel=2 * k + 1)
        backward = replace(broadcasts([((e.to_stage, e.from_stage), 10 + k)])[0], channel=2 * k + 2)
        price[forward], price[backward] = e.forward_seconds, e.backward_seconds
        boundaries.append(BoundaryMotifs(e.from_stage, e.to_stage, (forward,), (backward,)))
    for name in SCHEDULE_NAMES:
        plan = build_schedule(name, 4, 8, costs)
        dag = pipeline_dag(plan, costs.seconds, boundaries)
        tasks, owned = to_tasks(dag, {}, price.__getitem__)
        result = schedule(tasks, policy=Policy.CRITICAL_PATH)
        timeline = simulate(plan, costs)
        assert result.seconds == pytest.approx(timeline.iteration_seconds)
        for stage in timeline.actions:
            for timing in stage:
                index, = owned[str(timing.action)]
                assert tasks[index].channel == stream_channel(timing.action.stage)
                assert (result.start[index], result.end[index]) == pytest.approx((timing.start, timing.end))


def test_the_joint_optimizer_plans_the_resharding_motifs_and_keeps_every_dependency():
    costs = gpt_like(4)
    dag = pipeline_dag(build_schedule("eager-1f1b", 4, 4), costs.seconds, mesh_boundaries(4))
    problem = Problem(dag, MotifCostModel(TOPOLOGY))
    evaluation = problem.evaluate(problem.greedy(), Policy.CRITICAL_PATH)
    nodes = problem.unrolled.nodes
    tasks_of: dict[int, list[int]] = {}
    for task, node in enumerate(evaluation.task_node):
        tasks_of.setdefault(node, []).append(task)
    for index, node in enumerate(nodes):
        for before in node.after:
            done = max(evaluation.end[t] for t in tasks_of[problem.unrolled.index[before]])
            assert min(evaluation.start[t] for t in tasks_of[index]) >= done - 1e-12, (node.name, before)
    # a stream per stage: the stages compute side by side, each one task at a time
    compute = sum(n.seconds for n in dag.nodes)
    assert evaluation.makespan < problem.iterations * compute / 2
    assert_streams_never_overlap(evaluation, nodes)
    job = plan_job(dag, TOPOLOGY, budget=1.0, seed=0, clock=lambda: 0.0)
    assert {op.key.kind for op in job.plan.ops} == {"broadcast"}
    assert len(job.plan.ops) == len(dag.comm_ops)
    assert job.chosen.seconds <= job.results[0].seconds + 1e-12
    assert 0.0 <= job.chosen.evaluation.compute_idle_fraction < 1.0


def assert_streams_never_overlap(evaluation, nodes):
    """Every compute task runs on its node's stream, and a stream runs one at a time."""
    by_stream: dict[int, list[tuple[float, float]]] = {}
    for task, node in enumerate(evaluation.task_node):
        if not nodes[node].is_comm:
            assert evaluation.channel[task] == stream_channel(nodes[node].stream)
            by_stream.setdefault(nodes[node].stream, []).append((evaluation.start[task], evaluation.end[task]))
    for spans in by_stream.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-12 for a, b in pairwise(spans))


@dataclass
class EdgePrices(MotifCostModel):
    """Every motif priced as the pipeline simulator prices its edge (by its ranks), on any channel."""

    prices: dict = field(default_factory=dict)

    def step_seconds(self, group):
        return self.prices[group[0].ranks]


#: One channel (an emulated cluster of 4 nodes x 8 devices): each transfer's one option is its whole motif.
ONE_CHANNEL = Topology.from_yaml(cluster_topology("t", 4, 8, 25e6, None, 1e9))


@pytest.mark.parametrize("make", [gpt_like, u_transformer_like])
@pytest.mark.parametrize("name", ["1f1b", "eager-1f1b", "eager-1f1b-wd"])
@pytest.mark.parametrize("comm", [0.0, 0.004, 0.02])
def test_every_system_predicts_the_simulators_iteration_when_motifs_are_priced_alike(make, name, comm):
    """Through the joint optimizer's own pricing (Problem, every system of §6.4):
    with every motif priced as the simulator prices its edge, the stages (a
    stream each) and the directed edges (a lane each) run side by side, and the
    critical-path systems' iteration time, two unrolled iterations over two and
    the steady state, is the simulator's. FIFO's (and S-Exec's) is at least
    that: one thread issues every motif of the job in program order (the dry
    run's), which holds a stage's sends behind another stage's; so is BS+'s,
    whose LIFO may send an edge's transfers out of order."""
    costs = make(4, comm_seconds=comm)
    cost, boundaries = EdgePrices(ONE_CHANNEL), []
    for e in costs.all_edges():
        forward, backward = (8 * e.from_stage, 8 * e.to_stage), (8 * e.to_stage + 1, 8 * e.from_stage + 1)
        cost.prices[forward], cost.prices[backward] = e.forward_seconds, e.backward_seconds
        boundaries.append(BoundaryMotifs(e.from_stage, e.to_stage, broadcasts([(forward, 1)]),
                                         broadcasts([(backward, 1)])))
    plan = build_schedule(name, 4, 6, costs)
    dag = pipeline_dag(plan, costs.seconds, boundaries)
    problem = Problem(dag, cost)
    assert all(len(options) == 1 for options in problem.options)
    expected = simulate(plan, costs).iteration_seconds
    serial = sum(n.seconds for n in dag.nodes)
    assert expected < serial                      # the stages overlap: one stream would take `serial` or more
    results = run_systems(problem, budget=0.2, seed=0, clock=lambda: 0.0)
    assert [r.name for r in results] == list(SYSTEMS)
    for result in results:
        if result.policy is Policy.CRITICAL_PATH:
            assert result.seconds == pytest.approx(expected), result.name
            assert result.steady_seconds == pytest.approx(expected), result.name
        else:
            assert result.seconds >= expected - 1e-12 and result.steady_seconds >= expected - 1e-12
