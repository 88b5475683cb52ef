"""Reading a running plan back as a choice of options (the inverse of export_plan's choice)."""

from __future__ import annotations

from dataclasses import replace

from optimizer_service.catalog import load_topology
from optimizer_service.plan.motif import on_channel
from optimizer_service.plan.op_plan import OpPlan
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import library_default
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.plan_import import running_choice
from optimizer_service.syndicate.scheduler import Policy
from optimizer_service.syndicate.workloads import build

TOPOLOGY = load_topology("hgx2-4n")


def frozen() -> float:
    return 0.0


def test_an_exported_plan_reads_back_as_a_choice_priced_like_the_search_result():
    job = plan_job(build("dlrm-a1", TOPOLOGY), TOPOLOGY, budget=5, seed=1, clock=frozen)
    problem = job.problem
    choice = running_choice(problem, Plan.parse(job.plan.to_json()))
    assert choice is not None and len(choice) == len(problem.comm_nodes)
    chosen = job.chosen
    read = [problem.options[s][k].plan for s, k in enumerate(choice)]
    assert read == [problem.options[s][k].plan for s, k in enumerate(chosen.choice)]
    assert problem.steady_seconds(choice, Policy.CRITICAL_PATH) == chosen.steady_seconds


def test_an_empty_plan_is_the_library_default_everywhere():
    job = plan_job(build("cnn-dp", TOPOLOGY), TOPOLOGY, budget=1, seed=0, clock=frozen)
    empty = Plan(1, TOPOLOGY.device_count, {0: None}, ())
    assert running_choice(job.problem, empty) == job.problem.greedy(library_default)


def test_a_plan_whose_motifs_are_no_option_here_cannot_be_priced():
    job = plan_job(build("cnn-dp", TOPOLOGY), TOPOLOGY, budget=1, seed=0, clock=frozen)
    first = job.plan.ops[0]
    elsewhere = OpPlan.of(first.key, on_channel(first.plan, 9))     # hgx2-4n has no channel 9
    foreign = replace(job.plan, channels={**job.plan.channels, 9: None}, ops=(elsewhere, *job.plan.ops[1:]))
    assert running_choice(job.problem, foreign) is None
