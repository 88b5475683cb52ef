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

* **the first plan is chosen by every reading of whole ops** — before any plan
  ran in the cluster state, the window holds only ops the inner backend ran
  whole, one at a time, and their shapes cannot say whether what they took
  beyond the NIC's time is a slow rate (paid per byte, so cutting an op into
  segments costs nothing), time per round (paid by every round of a ring or a
  tree) or a fixed cost per motif (paid again by every segment): every op of
  the window has about as many rounds per motif. The fit takes the reading its
  least squares prefer; the other readings are the same window fitted with
  every link at its calibrated rate
  (:data:`~optimizer_service.syndicate.telemetry_fit.RATE_AS_CALIBRATED`) and
  with every link at its calibrated rate and round, all the rest per motif
  (:data:`~optimizer_service.syndicate.telemetry_fit.PER_MOTIF`), and every
  round of every line at the slowest time per round any op of the window took
  (:func:`~optimizer_service.syndicate.telemetry_fit.slowest_round_reading`).
  The search prices every motif at the worst of the four
  (:class:`~optimizer_service.syndicate.motif_cost.WorstOf`) and so chooses a
  plan that gains under each; among plans the worst prices alike, the fit's
  price at the load on the host's cores decides
  (:func:`~optimizer_service.syndicate.mcmc.restarted`, "Ties"); the
  prediction, and the policy's judgement of the gain, stay the fit's. Why the second: two FSDP2 loop runs' first searches
  fitted about 1 ms per motif (0.97 and 1.51 ms) from passthrough's window and
  cut every op into eight segments over both channels; those plans measured
  16-18 ms per motif and ran 0.79-0.87 s against passthrough's 0.64-0.65 s. A
  third fitted 5.6 ms, cut each op in two (one part per channel) and ran
  0.505 s, predicted 9 % low; with this rule, a fourth, on a 0.99 ms fit, cut
  each op in two and ran 0.497 s. Why the third: the DLRM job's windows fit a
  ring's rounds at 9-11 times their calibrated latency and its fixed cost at
  the calibrated 20 µs (the non-negative fit's bound), under both earlier
  readings; one first search then reduced the 4-byte loss through a binary tree
  of 14 two-rank motifs (7 rounds instead of a ring's 14), which the fit priced
  at 20 µs a motif. The plan ran 0.213 s, predicted 19 % low. Read per motif,
  the same window says 5.1 ms a motif; the job's next window, under that plan,
  measured 0.9 ms a motif and a round at 1-35 times calibrated: the truth
  between the readings. Replayed on the recorded windows of six loop runs
  (``benchmarks/replay.py``), the third reading changes only DLRM's first plans
  (the loss reduced in two motifs, reduce-scatter and all-gather). Why the
  fourth: the least squares set a round's time between what the latency-bound
  ops measured (DLRM's 4-byte loss: 2 ms a round) and what the large ones add
  (whose rounds overlap their bytes: about 1 ms); a first search priced a flat
  ring over eight ranks by the latter, committed it for a gradient of 526 KB,
  and the plan ran 0.23 s where plans that reduce inside each node before
  crossing ran 0.19 and 0.21 s, in turns on one cluster (the ring measured
  23 ms, priced 16); the same window searched with the fourth reading gives
  the 0.21 s plan. Once a plan
  has run in the state, its motifs are in the window (or pooled from an
  earlier one) and the fit alone chooses.
* **a first plan is predicted between two readings** — the same ambiguity
  biases the fit's prediction by the job: where its least squares put the
  excess in the fixed cost (DDP's windows: 2.2-2.6 ms a motif), a plan of more
  motifs with fewer rounds each was predicted high; where they put it in the
  rounds (DLRM's: 7 times the calibrated round), low. The window cannot tell,
  so a first plan (and passthrough beside it, for the policy's judgement of the
  gain) is predicted at the middle of the window's two readings with the rate
  fitted and the excess beyond it all per motif
  (:data:`~optimizer_service.syndicate.telemetry_fit.EXCESS_PER_MOTIF`) or all
  per round (:data:`~optimizer_service.syndicate.telemetry_fit.EXCESS_PER_ROUND`),
  which bracket what a plan's motifs pay. Our reading of "predicted": the time
  the policy is told. Over the 47 first plans of the lossless loop benchmarks
  of 3-7 December, each priced on the window before it ran against what it
  measured in the loop (``benchmarks/extrapolation.py``): by the fit, mean
  absolute error 9.7 %, within 15 % 40 of 47 (DDP's 23: +7.9 % on average,
  19 within); at the middle, 6.6 % and 42 (DDP's -0.4 %, 22 within; DLRM's 22:
  8.5 -> 6.9 %, 20 -> 19 within, the plans that move out being runs' of 3-5
  December that the per-motif reading prices 27-33 % high; the seven since
  the cost model of 7 December: 11.6 -> 3.4 %). Passthrough's price moves
  by at most 1.3 points over 46 first windows (every reading is fitted to it);
  with the rate as calibrated, as the third reading has it, FSDP2's would have
  moved from +6 % to -17 %.
  The search still chooses by the worst of the readings, and the fit's own
  prediction and each fitted value's effect on it stay in :attr:`LiveSearch.fit`.
* **passthrough as the inner backend runs it** — passthrough is every op's
  first option (the library's algorithm, whole, on channel 0) in the program's
  order, except that gloo reduces and scatters by a full AllReduce
  (:mod:`optimizer_service.syndicate.library_ops`): its reduce-scatters are
  priced as that, in the fit's samples and in passthrough's price, and a
  plan's (rings) at the rate the window fitted. FSDP2's first windows had read
  them as channel 0 at half its calibrated rate and predicted their first
  plans 14-27 % high.
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
from optimizer_service.syndicate.library_ops import library_dag, reduce_scatter_by_all_reduce
from optimizer_service.syndicate.motif_cost import WorstOf
from optimizer_service.syndicate.plan_import import running_choice
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.refit import refit
from optimizer_service.syndicate.scheduler import Policy
from optimizer_service.syndicate.telemetry_fit import (
    EXCESS_PER_MOTIF,
    EXCESS_PER_ROUND,
    PER_MOTIF,
    RATE_AS_CALIBRATED,
    TelemetryFit,
    effects,
    fit_readings,
    fit_telemetry,
    passthrough_samples,
    slowest_round_reading,
)
from optimizer_service.syndicate.trace_window import window_dag

#: How much less the fit must price another of the plans the readings tie for it to displace the one the
#: search met first (:func:`live_search`'s tie-break): the load's fixed point is found by bisection and
#: moves a price by about 1e-6, and a plan 0.1 % faster by the model is no reason to change.
TIE_MARGIN = 1e-3

#: The readings of a window of whole ops besides the fit's own (module docstring), by their name in
#: :attr:`LiveSearch.fit`, and the terms each takes at its calibrated value.
READINGS = (("other_reading", RATE_AS_CALIBRATED), ("per_motif_reading", PER_MOTIF))
#: The fourth reading's name in :attr:`LiveSearch.fit`
#: (:func:`~optimizer_service.syndicate.telemetry_fit.slowest_round_reading`).
SLOWEST_ROUND = "slowest_round_reading"
#: The readings a first plan is predicted between (module docstring), in :attr:`LiveSearch.fit`'s
#: ``prediction_readings`` and ``predicted_between`` in this order.
BRACKET = (EXCESS_PER_MOTIF, EXCESS_PER_ROUND)

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


def plan_measured(running: Plan | None, calibrated: Topology) -> Plan | None:
    """The running plan whose motif records a window holds for the fit: one with ops, of the
    topology's world size; None for passthrough (or another world's plan)."""
    return running if running is not None and running.ops and running.world_size == calibrated.device_count else None


def first_window_readings(traces: Sequence[Mapping], calibrated: Topology) -> tuple[
        TelemetryFit, dict[str, TelemetryFit], tuple[TelemetryFit, ...]]:
    """A cluster state's first window (whole ops only, module docstring): its fit, the other readings
    the search chooses by (the worst of all four), and the two its plans are predicted between
    (:data:`BRACKET`, whose prices :func:`middle` takes)."""
    samples = passthrough_samples(calibrated, traces)
    fit, *others = fit_readings(calibrated, samples, (None, *(given for _, given in READINGS), *BRACKET))
    readings = {name: reading for (name, _), reading in zip(READINGS, others)}
    slowest = slowest_round_reading(calibrated, samples)
    if slowest is not None:
        readings[SLOWEST_ROUND] = slowest
    return fit, readings, tuple(others[len(READINGS):])


def middle(prices: Sequence[float]) -> float:
    """A first plan's prediction from its prices under the :data:`BRACKET` readings: their middle."""
    return sum(prices) / len(prices)


def live_search(traces: Sequence[Mapping], calibrated: Topology, seed: int = 0,
                evaluations: int = LIVE_EVALUATIONS, running: Plan | None = None,
                prior: TelemetryFit | None = None, clock: Callable[[], float] = time.perf_counter) -> LiveSearch:
    """Plan the traced job (module docstring); ``running``: the plan the traces ran,
    if any; ``prior``: the fit of an earlier search in the same cluster state
    (:func:`~optimizer_service.syndicate.telemetry_fit.fit_samples`); ``clock`` only
    times the searches (their ``elapsed``), it never stops one."""
    measured_plan = plan_measured(running, calibrated)
    if measured_plan is None and prior is None:
        # Whole ops only (no plan ran in the window, none before it in this cluster state)
        fit, readings, bracket = first_window_readings(traces, calibrated)
    else:
        fit, readings, bracket = fit_telemetry(calibrated, traces, measured_plan, prior), {}, ()
    topology = refit(calibrated, fit)
    chooser = (WorstOf((fit.motif_cost(topology),
                        *(reading.motif_cost(refit(calibrated, reading)) for reading in readings.values())))
               if readings else fit.motif_cost(topology))
    dag, measured, window = window_dag(traces, name="live")
    hosts = host_loads(traces)
    contention = Contention.of(hosts, measured)

    def priced(problem: Problem, changed: TelemetryFit, k: float, choice: Sequence[int], policy: Policy,
               framework_order: bool = False) -> float:
        """``choice`` priced by ``changed`` with its fixed costs ``k`` times as long."""
        if k == 1.0 and changed is fit and not readings:    # the problem's own prices, nothing re-priced
            return problem.steady_seconds(choice, policy, framework_order)
        topology_of = topology if changed is fit else refit(calibrated, changed)
        return problem.steady_seconds_priced(changed.contended(k).motif_cost(topology_of), choice, policy,
                                             framework_order)

    def by_fit(problem: Problem, plans: Sequence[tuple[int, ...]], policy: Policy, framework_order: bool) -> int:
        """Among plans the worst of the readings prices alike, the one the fit prices least at the load
        the first of them puts on the host's cores (mcmc's "Ties")."""
        _, k = contended_seconds(lambda k: priced(problem, fit, k, plans[0], policy, framework_order), contention)
        times = [priced(problem, fit, k, plan, policy, framework_order) for plan in plans]
        least = min(times)
        return 0 if times[0] <= least * (1 + TIE_MARGIN) else times.index(least)

    found = plan_job(dag, topology, budget=math.inf, seed=seed, clock=clock, name="live",
                     cost=chooser, max_evaluations=evaluations, hosts=hosts, tiebreak=by_fit if readings else None)
    problem = found.problem

    def at_load(choice: list[int], policy: Policy, framework_order: bool = False,
                reading: TelemetryFit = fit, on: Problem = problem) -> tuple[float, float]:
        """The time of ``choice`` by ``reading`` at the load it puts on the host's cores (:mod:`.host_contention`)."""
        return contended_seconds(lambda k: priced(on, reading, k, choice, policy, framework_order), contention)

    def predict(choice: list[int], policy: Policy, framework_order: bool = False, on: Problem = problem) -> float:
        """The time of ``choice`` the policy is told: a first window's, the middle of the two readings
        that put all its excess per motif and all of it per round (module docstring); else the fit's."""
        if not bracket:
            return at_load(choice, policy, framework_order, on=on)[0]
        return middle([at_load(choice, policy, framework_order, reading, on)[0] for reading in bracket])

    running_seconds: float | None
    if running is not None and running.ops:
        choice = running_choice(problem, running)
        running_seconds = None if choice is None else predict(choice, Policy.CRITICAL_PATH)
    else:
        # Nothing planned runs every op's first option (the library's own algorithm, whole, on
        # channel 0) in the program's order: gloo's ring, not FIFO's greedy pick among P²'s programs;
        # and gloo's ReduceScatter is an AllReduce (:mod:`.library_ops`).
        library = library_dag(dag, reduce_scatter_by_all_reduce(traces))
        passthrough = problem if library is None else Problem(library, problem.cost, with_programs=False)
        running_seconds = predict([0] * len(passthrough.options), Policy.FIFO, framework_order=True, on=passthrough)
    chosen = found.chosen
    fit_seconds, factor = at_load(chosen.choice, chosen.policy, chosen.framework_order)
    between = [at_load(chosen.choice, chosen.policy, chosen.framework_order, reading)[0] for reading in bracket]
    predicted_seconds = middle(between) if between else fit_seconds     # as predict() takes it
    found = replace(found, plan=replace(found.plan, predicted_iteration_seconds=predicted_seconds))

    def predicted(changed: TelemetryFit) -> float:
        return priced(problem, changed, factor, chosen.choice, chosen.policy, chosen.framework_order)

    uncontended = priced(problem, fit, 1.0, chosen.choice, chosen.policy, chosen.framework_order)
    described = {**fit.to_dict(calibrated), "predicted_seconds": predicted_seconds, "fit_predicted_seconds": fit_seconds,
                 "prediction_readings": [reading.to_dict(calibrated) for reading in bracket] or None,
                 "predicted_between": between or None,
                 **{name: None if name not in readings else {
                     **readings[name].to_dict(calibrated), "chosen_seconds": chosen.steady_seconds}
                    for name in (*(name for name, _ in READINGS), SLOWEST_ROUND)},
                 "effects": effects(fit, predicted) + ([] if contention is None else [
                     {"parameter": "the host's load", "predicted_seconds_without": uncontended}]),
                 "host_contention": None if contention is None else
                 {**contention.to_dict(), "factor": factor, "busy": contention.busy(predicted_seconds),
                  "predicted_seconds_uncontended": uncontended}}
    return LiveSearch(found, measured, window, running_seconds, described, predicted_seconds)
