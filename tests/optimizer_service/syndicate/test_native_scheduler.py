"""The C++ twin of optSched and of Problem.cost_of (cpp_ext/, optimizer_service.syndicate.native_scheduler):
built in this checkout, and bit-identical to the Python scheduler."""

import dataclasses
import functools
import importlib
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer_service.catalog import load_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.syndicate import native_scheduler
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.scheduler import COMPUTE, Graph, Policy, lane_channel
from optimizer_service.syndicate.workloads import build, workload_names

PURE = os.environ.get("P2_PURE_PYTHON") == "1"
native = pytest.mark.skipif(PURE or native_scheduler.native is None,
                            reason="the compiled scheduler is off: P2_PURE_PYTHON=1, or not built "
                            "(test_the_extension_is_built fails then)")


@functools.cache
def cost_model() -> MotifCostModel:
    return MotifCostModel(load_topology("hgx2-4n"))      # the preset p2 optimize uses


@functools.cache
def workload_problem(name: str) -> Problem:
    return Problem(build(name, cost_model().topology), cost_model())


@functools.cache
def slowed_problem(name: str) -> Problem:
    """The workload where channel 0's motifs slow compute by 25 % (scheduler "Interference")."""
    topology = cost_model().topology
    links = tuple(dataclasses.replace(link, compute_slowdown=0.25) if link.channel == 0 else link
                  for link in topology.links)
    cost = MotifCostModel(dataclasses.replace(topology, links=links))
    return Problem(build(name, cost.topology), cost)


def outcome(price, *args):
    """A cost, or the message of the InvalidInputError it raises."""
    try:
        return price(*args)
    except InvalidInputError as error:
        return f"InvalidInputError: {error}"


@pytest.mark.skipif(PURE, reason="P2_PURE_PYTHON=1 asks for the Python scheduler")
def test_the_extension_is_built():
    # scripts/setup.sh builds it (pip install -e); missing here means the build failed.
    importlib.import_module("optimizer_service.syndicate._schedule_cpp")
    assert native_scheduler.native is not None
    assert workload_problem("cnn-dp").compiled is not None


def test_p2_pure_python_turns_it_off():
    """The setting reaches Settings from the environment, and native=False prices in Python."""
    code = "from optimizer_service.settings import Settings; print(Settings().pure_python)"
    env = dict(os.environ, P2_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    problem = Problem(build("cnn-dp", cost_model().topology), cost_model(), native=False)
    assert problem.compiled is None
    choice = problem.greedy()
    assert problem.cost_of(choice) == problem.python_cost_of(choice)


@native
@pytest.mark.parametrize("name,slowed", [(name, False) for name in workload_names()]
                         + [("dlrm-a2", True), ("fsdp", True)])
def test_every_workload_costs_exactly_the_same(name, slowed):
    problem = slowed_problem(name) if slowed else workload_problem(name)
    assert bool(problem.slowdown) == slowed
    rng = random.Random(name)
    choices = [problem.greedy(), problem.default()]
    choices += [[rng.randrange(len(options)) for options in problem.options] for _ in range(18)]
    for choice in choices:
        for policy in Policy:
            for framework_order in (False, True):
                python = problem.python_cost_of(choice, policy, framework_order)
                assert problem.cost_of(choice, policy, framework_order) == python, (choice, policy, framework_order)


@native
def test_fifo_deadlock_and_bad_choices_fail_alike():
    # x is submitted first but waits for y: FIFO cannot issue either
    dag = TrainingDAG("stuck", (comm("x", Collective.ALL_REDUCE, range(8), 1024, "y"),
                                comm("y", Collective.ALL_REDUCE, range(8), 1024), compute("step", 0.001, "x")))
    problem = Problem(dag, cost_model())
    choice = problem.greedy()
    python = outcome(problem.python_cost_of, choice, Policy.FIFO)
    assert python.startswith("InvalidInputError: no task can start")
    assert outcome(problem.cost_of, choice, Policy.FIFO) == python
    assert problem.cost_of(choice, Policy.LIFO) == problem.python_cost_of(choice, Policy.LIFO)
    last = [-1] * len(choice)                              # Python indexing: the last option
    assert problem.cost_of(last) == problem.python_cost_of(last)
    for bad in ([len(problem.options[0])] + choice[1:], choice[:-1]):
        with pytest.raises(IndexError):
            problem.python_cost_of(bad)
        with pytest.raises(IndexError):
            problem.cost_of(bad)
    graph, seconds, _, _ = problem.graph(choice, False)
    python = outcome(graph.run, seconds, 0)
    assert python == "InvalidInputError: channel capacity 0 must be at least 1"
    assert outcome(native_scheduler.run, graph, seconds, 0) == python


@st.composite
def task_graphs(draw):
    """A random task DAG with ties everywhere: few durations, shared program indices, repeated edges."""
    count = draw(st.integers(1, 30))
    channel, after, program = [], [], []
    for index in range(count):
        channel.append(draw(st.sampled_from([COMPUTE, 0, 1, 4])))
        after.append(draw(st.lists(st.integers(0, index - 1), max_size=4)) if index else [])
        program.append(draw(st.integers(0, count // 2)))
    seconds = draw(st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.0, 2.5]), min_size=count, max_size=count))
    return channel, after, program, seconds


@native
@settings(max_examples=150, deadline=None)
@given(graph=task_graphs(), capacity=st.integers(1, 3), policy=st.sampled_from(list(Policy)),
       ordered=st.booleans(), slowdown=st.sampled_from([{}, {0: 0.25}, {0: 0.25, 4: 1.0}, {1: 0.3, 0: 0.0}]))
def test_random_graphs_schedule_exactly_the_same(graph, capacity, policy, ordered, slowdown):
    channel, after, program, seconds = graph
    g = Graph(channel, after, program, ordered=ordered)    # ordered keeps repeated edges, else sorts
    assert (outcome(native_scheduler.run, g, seconds, capacity, policy, slowdown)
            == outcome(g.run, seconds, capacity, policy, slowdown))


@native
def test_a_bad_slowdown_fails_alike():
    g = Graph([COMPUTE, 0], [[], []], [0, 1])
    python = outcome(g.run, [1.0, 1.0], 1, Policy.CRITICAL_PATH, {0: -1.0})
    assert python.startswith("InvalidInputError: channel 0 has compute slowdown -1.0")
    assert outcome(native_scheduler.run, g, [1.0, 1.0], 1, Policy.CRITICAL_PATH, {0: -1.0}).startswith(
        "InvalidInputError: channel 0 has compute slowdown -1")


@native
@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 2), policy=st.sampled_from(list(Policy)),
       slowdown=st.sampled_from([{}, {0: 0.25}, {0: 0.25, 4: 1.0}, {0: 0.25, lane_channel(0, 1): 0.25}]))
def test_random_graphs_on_several_compute_streams_schedule_exactly_the_same(data, capacity, policy, slowdown):
    """Compute streams of their own (negative channels other than COMPUTE, a pipeline's stages) and lanes."""
    count = data.draw(st.integers(1, 30))
    channel = data.draw(st.lists(st.sampled_from([COMPUTE, -2, -4, 0, 1, 4, lane_channel(0, 1), lane_channel(4, 2)]),
                                 min_size=count, max_size=count))
    after = [data.draw(st.lists(st.integers(0, i - 1), max_size=3)) if i else [] for i in range(count)]
    program = data.draw(st.lists(st.integers(0, count // 2), min_size=count, max_size=count))
    seconds = data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.3, 1.0, 2.5]), min_size=count, max_size=count))
    g = Graph(channel, after, program)
    assert (outcome(native_scheduler.run, g, seconds, capacity, policy, slowdown)
            == outcome(g.run, seconds, capacity, policy, slowdown))


@native
@pytest.mark.parametrize("slowed", [False, True])
def test_a_pipeline_on_a_stream_per_stage_and_a_lane_per_edge_costs_exactly_the_same(slowed):
    from optimizer_service.resharding.pipeline_costs import u_transformer_like
    from optimizer_service.resharding.pipeline_schedules import build_schedule
    from optimizer_service.syndicate.pipeline_dag import BoundaryMotifs, broadcasts, pipeline_dag

    costs = u_transformer_like(4, forward_seconds=[0.001, 0.002, 0.001, 0.0015], backward_seconds=0.002)
    boundaries = [BoundaryMotifs(e.from_stage, e.to_stage,
                                 broadcasts([((8 * e.from_stage + k, *range(8 * e.to_stage, 8 * e.to_stage + 4)),
                                              1 << 18) for k in range(2)]),
                                 broadcasts([((8 * e.to_stage, 8 * e.from_stage + 1), 1 << 18)]))
                  for e in costs.all_edges()]
    dag = pipeline_dag(build_schedule("eager-1f1b", 4, 4), costs.seconds, boundaries)
    model = slowed_problem("fsdp").cost if slowed else cost_model()
    problem = Problem(dag, model)
    assert problem.compiled is not None and {n.stream for n in dag.nodes} == {0, 1, 2, 3}
    assert {n.lane for n in dag.nodes if n.is_comm} == set(range(8))       # a lane per directed edge
    rng = random.Random(slowed)
    choices = [problem.greedy(), problem.default()]
    choices += [[rng.randrange(len(options)) for options in problem.options] for _ in range(8)]
    for choice in choices:
        for policy in Policy:
            for framework_order in (False, True):
                python = problem.python_cost_of(choice, policy, framework_order)
                assert problem.cost_of(choice, policy, framework_order) == python, (choice, policy, framework_order)
