"""The live loop's search: a trace window and the running plan in, a plan priced
by the model the window fitted out (issue 32, items 3 and 4; pure).

What makes the same job on the same cluster get a plan of the same quality
every run:

* **the model the job measured** — :mod:`optimizer_service.syndicate.telemetry_fit`
  fits every channel's per-motif cost, latency and rate and the host's to the
  window (passthrough ops before the first plan, the running plan's motifs
  after), and the search prices with that
  (:func:`optimizer_service.syndicate.refit.refit`,
  :meth:`~optimizer_service.syndicate.telemetry_fit.TelemetryFit.motif_cost`),
  so the first search already knows what a motif costs on this host;
* **the window's median iteration** — :func:`optimizer_service.syndicate.trace_window.window_dag`,
  not whichever single iteration the window happened to end on;
* **no clock in the search** — the MCMC (:func:`optimizer_service.syndicate.mcmc.mcmc`)
  stops by its no-improvement rule or at ``evaluations``, never by time, so
  for a seed its result is a function of the traces alone: a host busy with
  the job's own ranks cannot cut it short. (The service still stops a worker
  that overruns its deadline: :class:`optimizer_service.service.planning.Planner`.)

:attr:`LiveSearch.fit` carries the fitted values with each one's effect: the
chosen plan's predicted time with that one value back at its calibrated
setting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.facade import JobPlan, plan_job
from optimizer_service.syndicate.plan_import import running_choice
from optimizer_service.syndicate.refit import refit
from optimizer_service.syndicate.scheduler import Policy
from optimizer_service.syndicate.telemetry_fit import TelemetryFit, effects, fit_telemetry
from optimizer_service.syndicate.trace_window import window_dag

#: Evaluations each live search may take at most (its no-improvement rule usually stops it
#: sooner: after its floor, :func:`optimizer_service.syndicate.mcmc.default_floor`, at most 20,000).
LIVE_EVALUATIONS = 40_000


@dataclass(frozen=True)
class LiveSearch:
    """What :func:`live_search` found: the job's plan on the fitted topology, the
    window's median measured iteration time and how many iterations it took, the
    running plan's model time priced alike (None when it cannot be read back on this
    DAG), and the fit (:meth:`TelemetryFit.to_dict` plus ``effects`` and
    ``predicted_seconds``)."""

    found: JobPlan
    measured_seconds: float
    window_iterations: int
    running_seconds: float | None
    fit: dict


def live_search(traces: Sequence[Mapping], calibrated: Topology, seed: int = 0,
                evaluations: int = LIVE_EVALUATIONS, running: Plan | None = None,
                prior: TelemetryFit | None = None, clock: Callable[[], float] = time.perf_counter) -> LiveSearch:
    """Plan the traced job (module docstring); ``running``: the plan the traces ran,
    if any; ``prior``: the fit of an earlier search in the same cluster state
    (:func:`~optimizer_service.syndicate.telemetry_fit.fit_samples`); ``clock`` only
    times the searches (their ``elapsed``), it never stops one."""
    measured_plan = running if running is not None and running.ops and \
        running.world_size == calibrated.device_count else None
    fit = fit_telemetry(calibrated, traces, measured_plan, prior)
    topology = refit(calibrated, fit)
    dag, measured, window = window_dag(traces, name="live")
    found = plan_job(dag, topology, budget=math.inf, seed=seed, clock=clock, name="live",
                     cost=fit.motif_cost(topology), max_evaluations=evaluations)
    problem = found.problem
    # Nothing planned runs every op's first option (the library's own algorithm, whole, on
    # channel 0) in the program's order: gloo's ring, not FIFO's greedy pick among P²'s programs.
    running_seconds: float | None = problem.steady_seconds([0] * len(problem.options), Policy.FIFO,
                                                           framework_order=True)
    if running is not None and running.ops:
        choice = running_choice(problem, running)
        running_seconds = None if choice is None else problem.steady_seconds(choice, Policy.CRITICAL_PATH)
    chosen = found.chosen

    def predicted(other: TelemetryFit) -> float:
        return problem.steady_seconds_priced(other.motif_cost(refit(calibrated, other)), chosen.choice,
                                             chosen.policy, chosen.framework_order)

    described = {**fit.to_dict(calibrated), "predicted_seconds": chosen.steady_seconds,
                 "effects": effects(fit, predicted)}
    return LiveSearch(found, measured, window, running_seconds, described)
