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

* **the host's cores** — the fixed costs were fitted at the window's load; a
  plan's and the running plan's predictions are taken at the load each puts on
  the cores the ranks share
  (:mod:`optimizer_service.syndicate.host_contention`), and the bound counts
  those cores (:mod:`optimizer_service.syndicate.host_load`).

:attr:`LiveSearch.fit` carries the fitted values with each one's effect: the
chosen plan's predicted time with that one value back at its calibrated
setting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.facade import JobPlan, plan_job
from optimizer_service.syndicate.host_contention import Contention, contended_seconds
from optimizer_service.syndicate.host_load import host_loads
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
    predicted_seconds: float = 0.0        # the chosen plan's, at the load it puts on the host's cores


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
    hosts = host_loads(traces)
    found = plan_job(dag, topology, budget=math.inf, seed=seed, clock=clock, name="live",
                     cost=fit.motif_cost(topology), max_evaluations=evaluations, hosts=hosts)
    problem = found.problem
    contention = Contention.of(hosts, measured)

    def at_load(choice: list[int], policy: Policy, framework_order: bool = False) -> tuple[float, float]:
        """The time of ``choice`` at the load it puts on the host's cores (:mod:`.host_contention`)."""
        def price(k: float) -> float:
            if k == 1.0:            # the fit as it is: the problem's own prices, nothing re-priced
                return problem.steady_seconds(choice, policy, framework_order)
            return problem.steady_seconds_priced(fit.contended(k).motif_cost(topology), choice, policy,
                                                 framework_order)
        return contended_seconds(price, contention)

    # Nothing planned runs every op's first option (the library's own algorithm, whole, on
    # channel 0) in the program's order: gloo's ring, not FIFO's greedy pick among P²'s programs.
    running_seconds: float | None = at_load([0] * len(problem.options), Policy.FIFO, framework_order=True)[0]
    if running is not None and running.ops:
        choice = running_choice(problem, running)
        running_seconds = None if choice is None else at_load(choice, Policy.CRITICAL_PATH)[0]
    chosen = found.chosen
    predicted_seconds, factor = at_load(chosen.choice, chosen.policy, chosen.framework_order)
    found = replace(found, plan=replace(found.plan, predicted_iteration_seconds=predicted_seconds))

    def predicted(other: TelemetryFit) -> float:
        return problem.steady_seconds_priced(other.contended(factor).motif_cost(refit(calibrated, other)),
                                             chosen.choice, chosen.policy, chosen.framework_order)

    described = {**fit.to_dict(calibrated), "predicted_seconds": predicted_seconds,
                 "effects": effects(fit, predicted) + ([] if contention is None else [
                     {"parameter": "the host's load", "predicted_seconds_without": chosen.steady_seconds}]),
                 "host_contention": None if contention is None else
                 {**contention.to_dict(), "factor": factor, "busy": contention.busy(predicted_seconds),
                  "predicted_seconds_uncontended": chosen.steady_seconds}}
    return LiveSearch(found, measured, window, running_seconds, described, predicted_seconds)
