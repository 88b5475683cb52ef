"""The joint optimizer end to end in simulation: templates, policies, MCMC search, baselines, the plan."""

import dataclasses
import itertools

import pytest

from optimizer_service.catalog import load_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif, Par, Seq, comm_op
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import SYSTEMS, run_systems
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute
from optimizer_service.syndicate.mcmc import mcmc
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.plan_export import export_plan
from optimizer_service.syndicate.problem import Problem, template_of
from optimizer_service.syndicate.scheduler import COMPUTE, Policy, Task, schedule
from optimizer_service.syndicate.transforms import spline_tree
from optimizer_service.syndicate.workloads import build, workload_names

TOPOLOGY = load_topology("hgx2-4n")
COST = MotifCostModel(TOPOLOGY)


def FROZEN() -> float:
    """A clock that never advances: searches stop by their evaluation rules, never by the wall clock."""
    return 0.0


def figure6() -> TrainingDAG:
    """Syndicate Figure 6 in miniature: an all-to-all and an all-reduce that both
    wait for the same compute, and a step that needs both."""
    return TrainingDAG("figure6", (
        compute("bwd", 0.001),
        comm("a2a", Collective.ALL_TO_ALL, range(32), 4096, "bwd"),
        comm("ar", Collective.ALL_REDUCE, range(32), 8_000_000, "bwd"),
        compute("step", 0.001, "a2a", "ar"),
    ))


def test_a_tree_phase_is_one_task_priced_as_one_step():
    op = comm_op(Collective.ALL_REDUCE, range(32), 1000)
    template = template_of(spline_tree(op, 8), COST.step_seconds)
    # ∥ Reduce in every node, Reduce then Broadcast over the four roots, ∥ Broadcast in every node
    assert [len(m) for m in template.motifs] == [4, 1, 1, 4]
    assert template.after == ((), (0,), (1,), (2,)) and template.entries == (0,) and template.exits == (3,)
    assert template.isolated == pytest.approx(sum(template.seconds))


def test_segments_on_one_channel_share_it_and_on_two_run_together():
    a = Motif(Collective.ALL_REDUCE, (0, 1), ((0, 50),))
    b = Motif(Collective.ALL_REDUCE, (0, 1), ((50, 100),))
    same = template_of(Par((a, b)), lambda group: 1.0)
    assert same.isolated == 2.0 and same.after == ((), ())
    apart = template_of(Par((a, Motif(Collective.ALL_REDUCE, (0, 1), ((50, 100),), channel=1))), lambda group: 1.0)
    assert apart.isolated == 1.0
    chain = template_of(Seq((a, b)), lambda group: 1.0)
    assert chain.after == ((), (0,)) and chain.isolated == 2.0


def test_fifo_issues_motifs_strictly_in_program_order_and_lifo_takes_the_latest():
    tasks = [Task("c", 1.0), Task("m0", 2.0, 0, (0,), program=1), Task("m1", 1.0, 1, (), program=2),
             Task("m2", 1.0, 0, (), program=3)]
    fifo = schedule(tasks, policy=Policy.FIFO)
    assert fifo.start[1] == 1.0 and fifo.start[2] == 1.0 and fifo.start[3] == 3.0   # m1 waits for m0 to start
    lifo = schedule(tasks, policy=Policy.LIFO)
    assert lifo.start[3] == 0.0 and lifo.start[2] == 0.0 and lifo.start[1] == 1.0


def test_program_order_edges_bind_the_framework_but_not_syndicate():
    dag = build("dlrm-a1", TOPOLOGY)
    problem = Problem(dag, COST)
    choice = problem.greedy()
    kept = problem.evaluate(choice, Policy.CRITICAL_PATH, framework_order=True)
    dropped = problem.evaluate(choice, Policy.CRITICAL_PATH, framework_order=False)
    prep = problem.unrolled.index["a2a-data-prep@1"]
    emb = problem.unrolled.index["bwd-emb@0"]
    start = lambda e, node: min(e.start[t] for t, n in enumerate(e.task_node) if n == node)
    end = lambda e, node: max(e.end[t] for t, n in enumerate(e.task_node) if n == node)
    assert start(kept, prep) >= end(kept, emb)             # submitted after the iteration's last backward
    assert start(dropped, prep) < end(dropped, emb)        # prefetched into the previous iteration
    assert dropped.seconds <= kept.seconds


def test_the_joint_plan_beats_the_greedy_one_by_using_the_other_channel():
    problem = Problem(figure6(), COST)
    greedy = problem.greedy()
    names = lambda choice: [problem.options[s][k].name for s, k in enumerate(choice)]
    assert names(greedy)[0].endswith("@ch0")              # alone, the all-to-all is fastest on channel 0
    found = mcmc(problem, greedy, budget=30, seed=3, clock=FROZEN)
    assert found.seconds < found.start_seconds * 0.9
    a2a, ar = (problem.options[s][k] for s, k in enumerate(found.choice))
    assert a2a.channel != ar.channel or "split" in a2a.channel + ar.channel
    exhaustive = min(problem.cost_of(c) for c in itertools.product(*[range(len(o)) for o in problem.options]))
    assert found.seconds == pytest.approx(exhaustive, rel=0.02)


def test_a_gpu_driven_channel_that_slows_compute_sends_the_overlapped_op_to_the_other():
    # An all-reduce beside 10 ms of compute: it hides on either channel, unless channel 0's
    # kernels slow the compute (scheduler "Interference"); then the search moves it to channel 1.
    dag = TrainingDAG("overlap", (compute("fwd", 0.010), comm("ar", Collective.ALL_REDUCE, range(32), 1_000_000),
                                  compute("step", 0.001, "fwd", "ar")))
    links = tuple(dataclasses.replace(link, compute_slowdown=1.0) if link.channel == 0 else link
                  for link in TOPOLOGY.links)
    plain = Problem(dag, COST)
    slowed = Problem(dag, MotifCostModel(dataclasses.replace(TOPOLOGY, links=links)))
    assert slowed.slowdown == {0: 1.0} and plain.slowdown == {}
    greedy = plain.greedy()
    assert plain.options[0][greedy[0]].channel == "ch0" and slowed.greedy() == greedy
    assert plain.cost_of(greedy) == pytest.approx(0.011)                  # hidden behind fwd
    assert slowed.cost_of(greedy) > 0.011 + 1e-5                          # fwd pays for it
    assert slowed.evaluate(greedy).compute_idle_fraction == pytest.approx(0.0, abs=1e-12)  # slower, not idle
    found = mcmc(slowed, greedy, budget=30, seed=0, clock=FROZEN)
    assert slowed.options[0][found.choice[0]].channel == "ch1" and found.seconds == pytest.approx(0.011)


def test_search_never_worsens_its_start_and_is_deterministic_per_seed():
    problem = Problem(build("dlrm-a2", TOPOLOGY), COST)
    start = problem.default()
    first = mcmc(problem, start, budget=60, seed=7, min_evaluations=300, clock=FROZEN)
    again = mcmc(problem, start, budget=60, seed=7, min_evaluations=300, clock=FROZEN)
    other = mcmc(problem, start, budget=60, seed=8, min_evaluations=300, clock=FROZEN)
    assert first.seconds <= problem.cost_of(start) == first.start_seconds
    assert (first.choice, first.evaluations, first.accepted) == (again.choice, again.evaluations, again.accepted)
    assert first.stopped_by == "no-improvement"
    assert (other.choice, other.evaluations) != (first.choice, first.evaluations)
    assert problem.cost_of(first.choice) == pytest.approx(first.seconds)


def test_search_respects_its_budget_and_evaluation_bound():
    problem = Problem(build("dlrm-a1", TOPOLOGY), COST)
    ticks = itertools.count()
    timed = mcmc(problem, problem.greedy(), budget=50, seed=1, clock=lambda: next(ticks) * 1.0)
    assert timed.stopped_by == "budget" and timed.evaluations <= 50
    bounded = mcmc(problem, problem.greedy(), budget=60, seed=1, max_evaluations=25, min_evaluations=10**9,
                   clock=FROZEN)
    assert bounded.stopped_by == "evaluations" and bounded.evaluations == 25
    with pytest.raises(InvalidInputError, match="budget"):
        mcmc(problem, problem.greedy(), budget=0)


@pytest.mark.parametrize("name", workload_names())
def test_every_workload_runs_every_system_and_yields_an_installable_plan(name):
    problem = Problem(build(name, TOPOLOGY), COST)
    results = run_systems(problem, budget=2, seed=0, min_evaluations=200)
    assert [r.name for r in results] == list(SYSTEMS)
    seconds = {r.name: r.seconds for r in results}
    assert seconds["Syndicate"] <= problem.cost_of(problem.greedy()) + 1e-12
    for r in results:
        assert 0 <= r.evaluation.compute_idle_fraction < 1
        tasks = r.evaluation
        for i, before in enumerate(tasks.graph.successors):
            for s in before:
                assert tasks.start[s] >= tasks.end[i] - 1e-12
    plan = export_plan(problem, results[-1])
    back = Plan.parse(plan.to_json())
    assert back == plan and back.world_size == 32 and back.topology == "hgx2-4n"
    for op in back.ops:
        p = len(op.key.group)
        op.validate(op.key.nbytes // 4 // (p if op.key.kind in ("all_gather", "reduce_scatter") else 1))
    motif_tasks = [i for i, c in enumerate(results[-1].evaluation.channel) if c != COMPUTE]
    assert motif_tasks


def test_the_serial_cnn_leaves_nothing_to_gain():
    problem = Problem(build("cnn-dp", TOPOLOGY), COST)
    results = run_systems(problem, budget=2, seed=0, min_evaluations=300)
    seconds = {r.name: r.seconds for r in results}
    assert seconds["Syndicate"] == pytest.approx(seconds["BS+"], rel=0.03)
    # One serial chain per iteration: nothing crosses the boundary, the steady state is the same.
    for r in results:
        assert r.steady_seconds == pytest.approx(r.seconds)


def test_steady_state_counts_the_prefetch_the_first_iteration_cannot_have():
    # The next batch's data-prep all-to-all needs nothing of this iteration: Syndicate runs it
    # during fwd and bwd (1 ms each), except in the very first iteration.
    dag = TrainingDAG("prefetch", (
        comm("prep", Collective.ALL_TO_ALL, range(32), 4096, issued_after_previous=["bwd"]),
        compute("fwd", 0.001, "prep", previous=["bwd"]),
        compute("bwd", 0.001, "fwd"),
    ))
    problem = Problem(dag, COST)
    choice = problem.greedy()
    prep = problem.templates[0][choice[0]].isolated
    assert 0 < prep < 0.002
    assert problem.cost_of(choice) == pytest.approx((prep + 0.004) / 2)
    assert problem.steady_seconds(choice) == pytest.approx(0.002)
    # The training loop's program order puts the prep after the previous bwd: nothing to hide it under.
    assert problem.steady_seconds(choice, Policy.FIFO, framework_order=True) == pytest.approx(prep + 0.002)
    six = problem.unrolled_over(6)
    assert six.iterations == 6 and problem.iterations == 2 and six.options is problem.options
    assert six.cost_of(choice) == pytest.approx((prep + 0.012) / 6)
    with pytest.raises(InvalidInputError, match="cannot unroll 0 iterations"):
        problem.unrolled_over(0)
    assert problem.unrolled_over(2) is problem and problem.iterations == 2


def test_unknown_workloads_and_channels_are_one_line_errors():
    with pytest.raises(InvalidInputError, match="unknown workload 'bert'.*--list"):
        build("bert", TOPOLOGY)
    with pytest.raises(InvalidInputError, match="no channel 5"):
        COST.seconds(Motif(Collective.ALL_REDUCE, (0, 1), ((0, 8),), channel=5))


def fastest_alone(kind: Collective, elements: int, allowed=lambda o: True) -> str:
    dag = TrainingDAG("one", (compute("c", 1e-6), comm("op", kind, range(32), elements, "c")))
    problem = Problem(dag, COST)
    return problem.options[0][problem.greedy(allowed)[0]].base


def test_all_to_all_is_splined_more_as_it_grows():
    # hgx2-4n's NICs lose throughput to incast (192 flows into a node for a whole 32-rank
    # all-to-all): small blocks stay whole (fewer motifs to launch), large ones go pairwise.
    windows = [fastest_alone(Collective.ALL_TO_ALL, nbytes // 4, lambda o: o.channel == "ch0")
               for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20)]
    sizes = [32 if w == "a2a" else int(w.removeprefix("spline")) for w in windows]
    assert sizes[0] == 32 and sizes[-1] < 4
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) >= 3


def test_todays_stack_runs_all_to_all_whole_on_channel_zero():
    problem = Problem(build("dlrm-a2", TOPOLOGY), COST)
    results = {r.name: r for r in run_systems(problem, budget=1, seed=0, names=("FIFO", "BS+", "HO", "S-Sched"))}
    for name in ("FIFO", "BS+", "S-Sched"):
        for op, k in enumerate(results[name].choice):
            option = problem.options[op][k]
            assert option.channel == "ch0" and not option.base.startswith("spline"), (name, option.name)
    a2a = [op for op, node in enumerate(problem.comm_nodes) if problem.dag.nodes[node].comm.kind is Collective.ALL_TO_ALL]
    assert any(problem.options[op][results["HO"].choice[op]].base.startswith("spline") for op in a2a)
