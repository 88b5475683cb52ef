"""One entry point to Syndicate's joint optimizer: :func:`plan_job`.

The CLI (``p2 optimize``), the benchmarks and the service plan a job the same
way: a training DAG (a built-in workload's, or one read from the enforcer
traces of a recorded job, Syndicate §4.3), every comm-op's options priced on
the topology (P² programs among the all-reduce options), the systems of §6.4
run on it — Syndicate last, with its MCMC search (Pseudocode 1) under a time
budget — and Syndicate's result exported as the plan the enforcer installs,
carrying the lower bound on the job's iteration time on that topology
(:mod:`optimizer_service.syndicate.bound`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.baselines import SYSTEMS, SystemResult, run_systems
from optimizer_service.syndicate.bound import Bound, iteration_bound
from optimizer_service.syndicate.dag import TrainingDAG
from optimizer_service.syndicate.host_load import HostLoad, host_loads
from optimizer_service.syndicate.mcmc import TieBreak
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.plan_export import export_plan
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.trace_dag import dag_from_traces, trace_iteration_seconds


@dataclass(frozen=True)
class JobPlan:
    """What :func:`plan_job` found: the priced problem, every system's result
    (``SYSTEMS`` order, Syndicate last), Syndicate's plan (its
    ``bound_iteration_seconds`` is ``bound.seconds``), the lower bound on the
    job's iteration time on the topology, and for a traced job the measured
    time of the planned iteration."""

    problem: Problem
    results: tuple[SystemResult, ...]
    plan: Plan
    bound: Bound
    measured_iteration_seconds: float | None = None

    @property
    def chosen(self) -> SystemResult:
        return self.results[-1]


def plan_job(dag_or_traces: TrainingDAG | Sequence[Mapping], topology: Topology, budget: float = 10.0,
             seed: int = 0, clock: Callable[[], float] = time.perf_counter, *, iteration: int | None = None,
             name: str = "trace", native: bool = True, version: int = 1,
             progress: Callable[[str], None] | None = None, cost: MotifCostModel | None = None,
             max_evaluations: int | None = None, hosts: Sequence[HostLoad] | None = None,
             tiebreak: TieBreak | None = None) -> JobPlan:
    """Plan a job on ``topology`` with ``budget`` seconds of search per searching
    system (same ``seed``, same plan; ``clock`` measures the budget).

    ``dag_or_traces`` is a :class:`TrainingDAG` or the per-rank traces of one
    job (``iteration`` picks the traced iteration, default the last complete
    one; ``name`` names the DAG). ``native=False`` prices with the Python
    scheduler even where the C++ twin is built. ``progress`` hears each step.
    ``cost`` prices the motifs (default: ``topology``'s calibrated
    :class:`MotifCostModel`; the live loop's is fitted to the job's telemetry,
    :mod:`optimizer_service.syndicate.telemetry_fit`); ``max_evaluations`` also
    bounds each search by evaluations (:func:`optimizer_service.syndicate.mcmc.mcmc`).
    ``hosts``: the job's CPU per host for the bound's host term (default: read from
    the traces; none for a DAG). ``tiebreak`` picks among plans the search's cost
    cannot tell apart (:func:`optimizer_service.syndicate.mcmc.restarted`).
    """
    say = progress or (lambda text: None)
    measured = None
    if isinstance(dag_or_traces, TrainingDAG):
        dag = dag_or_traces
    else:
        traces = list(dag_or_traces)
        dag = dag_from_traces(traces, iteration, name=name)
        measured = trace_iteration_seconds(traces, iteration)
        if hosts is None:
            hosts = host_loads(traces)
    highest = max((r for n in dag.nodes if n.is_comm for r in n.comm.ranks), default=0)
    if highest >= topology.device_count:
        raise InvalidInputError(f"the job uses rank {highest} but topology {topology.name!r} has "
                                f"{topology.device_count} devices; pass a topology with at least {highest + 1}")
    say(f"{dag.name}: pricing the options of {len(dag.comm_ops)} comm-ops on {topology.name} ...")
    problem = Problem(dag, cost or MotifCostModel(topology), native=native)
    say(f"  {sum(len(o) for o in problem.options)} options; running {', '.join(SYSTEMS)} "
        f"(search budget {budget:g} s each, seed {seed})")
    results = run_systems(problem, budget=budget, seed=seed, progress=lambda system: say(f"  {system} ..."),
                          clock=clock, max_evaluations=max_evaluations, tiebreak=tiebreak)
    bound = iteration_bound(dag, topology, hosts or ())
    say(f"  lower bound {bound}")
    plan = dataclasses.replace(export_plan(problem, results[-1], version=version),
                               bound_iteration_seconds=bound.seconds)
    return JobPlan(problem, tuple(results), plan, bound, measured)
