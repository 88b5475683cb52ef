"""Planning a live job off the event loop: Syndicate's joint search in a worker process.

The replanning loop (issue 16) plans a running job from every rank's recent
trace window (:meth:`ServiceCore.collect_traces`) on the job's topology:
:func:`optimizer_service.syndicate.live_search.live_search` fits the model to
the window's telemetry, builds the DAG of the window's median iteration
(Syndicate §4.3), prices every comm-op's options with P² programs among the
all-reduce options, and runs the systems of §6.4 with Syndicate's MCMC search
last, bounded by evaluations (the same traces, the same plan). That is seconds
of CPU, so it runs in a :class:`Planner`'s worker process (spawned once,
reused): the gRPC server and the commits of other jobs stay responsive. A
search that overruns its budget by :data:`GRACE_SECONDS` is killed with its
worker (the next search starts a fresh one), and so is one whose caller is
cancelled while the worker runs it (:meth:`Planner._run`). The worker runs at a
lower CPU priority (``nice``, ``P2_SEARCH_NICE``, 10 by default): where the
service shares a host with the job it plans (the emulated cluster, a small
cluster's head node) a search takes the cores the training loops leave idle
rather than slowing the iterations it is planning, and the service's own
threads (votes, commits, trace collection) keep theirs.

:func:`search` is what runs in the worker: plain values in (trace documents,
topology YAML), plain values out (:class:`SearchOutcome`), so nothing but JSON
crosses the process boundary.
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import time
import weakref
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from optimizer_service.errors import InvalidInputError

DEFAULT_NICE = 10           # the search worker's priority below the service's (os.nice)
MAX_NICE = 19
GRACE_SECONDS = 60.0        # beyond the budget: pricing and the DAG take time too
MAX_TIMELINE_TASKS = 4_000  # tasks of the predicted timeline an outcome carries (the dashboard's Gantt)


class PlanningError(InvalidInputError):
    """A search that could not give a plan (bad traces or topology, a killed worker): one line."""


@dataclass(frozen=True)
class SearchOutcome:
    """What one search found: Syndicate's plan (JSON, version 1 — the service
    numbers it) with its predicted steady-state iteration time, FIFO's
    prediction for the same DAG (the passthrough order), every system's, the
    traced iteration's measured time, the ops of that iteration the plan
    leaves to the inner backend with the reason (``passthrough``:
    :meth:`optimizer_service.syndicate.passthrough.PassedThrough.to_dict`), and
    the lower bound on the job's iteration time on the re-fitted topology
    (``bound_seconds``, and ``bound``:
    :meth:`optimizer_service.syndicate.bound.Bound.to_dict`, its terms and what binds)."""

    plan_json: str
    predicted_seconds: float
    fifo_seconds: float
    measured_seconds: float | None
    systems: dict[str, float]
    comm_ops: int
    planned_ops: int
    search_seconds: float
    #: The model fitted to the window (:attr:`optimizer_service.syndicate.live_search.LiveSearch.fit`).
    fit: dict = field(default_factory=dict)
    running_seconds: float | None = None
    passthrough: tuple[dict, ...] = ()
    #: The chosen schedule's first iteration: ``{"name", "lane", "start", "end"}`` per task
    #: (lane ``compute`` or ``chN``), for the dashboard's predicted Gantt; not stored.
    timeline: tuple[dict, ...] = ()
    bound_seconds: float | None = None
    bound: dict | None = None
    window_iterations: int = 0          # the trace window's iterations the DAG's medians took
    stopped_by: str = ""                # what ended Syndicate's search (mcmc.SearchResult.stopped_by)
    evaluations: int = 0

    def to_dict(self) -> dict:
        return {"predicted_seconds": self.predicted_seconds, "fifo_seconds": self.fifo_seconds,
                "measured_seconds": self.measured_seconds, "systems": dict(self.systems),
                "comm_ops": self.comm_ops, "planned_ops": self.planned_ops, "search_seconds": self.search_seconds,
                "fit": self.fit, "window_iterations": self.window_iterations, "stopped_by": self.stopped_by,
                "evaluations": self.evaluations,
                "running_seconds": self.running_seconds, "passthrough": [dict(entry) for entry in self.passthrough],
                "bound_seconds": self.bound_seconds, "bound": self.bound}


def search(traces: list[dict], topology_yaml: str, seed: int, running_plan_json: str | None = None,
           evaluations: int | None = None, prior_fit: dict | None = None) -> SearchOutcome:
    """Plan the traced job on the topology (runs in the worker process) with
    :func:`optimizer_service.syndicate.live_search.live_search`: the model fitted
    to the window's telemetry (with the plan the traces ran, its motif times), the
    window's median iteration, a search bounded by ``evaluations`` (default
    ``LIVE_EVALUATIONS``), never by the clock; ``prior_fit``: the ``fit`` of an
    earlier search in the same cluster state, for what this window cannot fit.
    ``running_seconds`` is the model's time of the running plan priced the same
    way (:mod:`optimizer_service.syndicate.plan_import`; without one, passthrough's:
    every op's library default in program order), or
    None when the plan cannot be read back on this DAG. The bound is taken on
    the topology the search used (re-fitted: the rates measured)."""
    from optimizer_service.hardware.topology import Topology
    from optimizer_service.plan import Plan
    from optimizer_service.syndicate.live_search import LIVE_EVALUATIONS, live_search
    from optimizer_service.syndicate.passthrough import passed_through
    from optimizer_service.syndicate.telemetry_fit import TelemetryFit

    started = time.perf_counter()
    topology = Topology.from_yaml(topology_yaml, source="the job's topology")
    running = Plan.parse(running_plan_json) if running_plan_json else None
    prior = TelemetryFit.from_dict(prior_fit) if prior_fit else None
    live = live_search(traces, topology, seed, evaluations or LIVE_EVALUATIONS, running, prior)
    found, stopped = live.found, live.found.chosen.search
    systems = {result.name: result.steady_seconds for result in found.results}
    passthrough = tuple(entry.to_dict() for entry in passed_through(traces, found.plan))
    return SearchOutcome(found.plan.to_json(), live.predicted_seconds, systems["FIFO"],
                         live.measured_seconds, systems, len(found.problem.dag.comm_ops),
                         len(found.plan.ops), time.perf_counter() - started, live.fit, live.running_seconds,
                         passthrough, predicted_timeline(found.problem, found.chosen.evaluation), found.bound.seconds,
                         found.bound.to_dict(), live.window_iterations, stopped.stopped_by if stopped else "",
                         stopped.evaluations if stopped else 0)


def fit_tried(traces: list[dict], topology_yaml: str, plan_json: str, prior_fit: dict | None = None) -> dict | None:
    """The telemetry fit of the tried plan ``plan_json`` from the traces of its run
    (runs in the worker process): what the replanner keeps for its cluster state
    when the policy rolls that plan back, so the next search there prices
    channels and the host with the motif times the plan measured, not with what
    passthrough alone could say (it runs channel 0 only). ``prior_fit``: the
    state's fit so far, for what these traces cannot fit. None when the traces
    hold none of the plan's motifs."""
    from optimizer_service.hardware.topology import Topology
    from optimizer_service.plan import Plan
    from optimizer_service.syndicate.live_search import plan_measured
    from optimizer_service.syndicate.telemetry_fit import (
        TelemetryFit,
        calibrated_rounds,
        fit_samples,
        motif_samples,
        passthrough_samples,
    )

    topology = Topology.from_yaml(topology_yaml, source="the job's topology")
    plan = Plan.parse(plan_json)
    motifs = motif_samples(topology, plan, traces) if plan_measured(plan, topology) else []
    if not motifs:
        return None
    prior = TelemetryFit.from_dict(prior_fit) if prior_fit else None
    # fit_telemetry's samples, with the motifs' read once (they were needed to know there are any)
    return fit_samples(passthrough_samples(topology, traces) + motifs, topology.channels, prior=prior,
                       rounds=calibrated_rounds(topology)).to_dict(topology)


def predicted_timeline(problem, evaluation) -> tuple[dict, ...]:
    """The first unrolled iteration of ``evaluation``'s schedule as Gantt rows
    (Syndicate §4.3's critical-path schedule: compute stream and one lane per channel)."""
    from optimizer_service.syndicate.scheduler import COMPUTE

    per_iteration = len(problem.dag.nodes)
    rows = []
    for task, node in enumerate(evaluation.task_node):
        if node >= per_iteration or evaluation.end[task] <= evaluation.start[task]:
            continue
        channel = evaluation.channel[task]
        rows.append({"name": problem.dag.nodes[node].name, "lane": "compute" if channel == COMPUTE else f"ch{channel}",
                     "start": evaluation.start[task], "end": evaluation.end[task]})
        if len(rows) >= MAX_TIMELINE_TASKS:
            break
    return tuple(rows)


#: Longest topology error line a job keeps and serves (the loader's lines are shorter; this bounds any other).
MAX_TOPOLOGY_ERROR = 400


def short_error(text: str, limit: int = MAX_TOPOLOGY_ERROR) -> str:
    """``text`` on one line of at most ``limit`` characters: what a job stores and serves about its topology."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


@functools.lru_cache(maxsize=64)
def usable_topology(value: str) -> str:
    """:func:`resolve_topology`'s YAML, or '' when ``value`` gives no usable topology. The last
    64 texts are remembered: a page that lists every job's topology reads each text once, not
    once per request (the text is a rank's, at most 64 KiB)."""
    try:
        return resolve_topology(value) if value else ""
    except InvalidInputError:
        return ""


def resolve_topology(value: str) -> str:
    """A job's topology as YAML: a YAML document as given, or a preset by name.
    (Never a file path: a rank must not make the service read its files.)

    The text comes from the ranks (``Register.topology``) or the operator
    (``--topology``), so it is read by the bounded loader
    (:mod:`optimizer_service.hardware.bounded_yaml`): its size is checked
    before it is parsed and its aliases cannot expand. The YAML returned is
    the topology written back (no aliases); it is refused here if that text is
    longer than the loader takes (its nodes and depth stay within the loader's
    bounds by :class:`Topology`'s own limits on levels and links), so the
    searches and views that read it again never fail on it. Errors are one
    short line."""
    from optimizer_service.catalog import load_topology, preset_names
    from optimizer_service.hardware.bounded_yaml import DEFAULT_LIMITS, preview
    from optimizer_service.hardware.topology import Topology

    if len(value) > DEFAULT_LIMITS.max_chars:
        raise PlanningError(f"the job's topology has {len(value)} characters, more than the "
                            f"{DEFAULT_LIMITS.max_chars} allowed; give P2_TOPOLOGY a preset or a smaller YAML file")
    if "\n" in value.strip():
        try:
            written = Topology.from_yaml(value, source="the job's topology").to_yaml()
        except InvalidInputError as error:
            raise PlanningError(short_error(f"the job's topology is not valid: {error}")) from None
        if len(written) > DEFAULT_LIMITS.max_chars:
            raise PlanningError(f"the job's topology, written without aliases, has {len(written)} characters, more "
                                f"than the {DEFAULT_LIMITS.max_chars} allowed; give P2_TOPOLOGY a smaller topology")
        return written
    if value in preset_names():
        return load_topology(value).to_yaml()
    raise PlanningError(f"unknown topology {preview(value)}: give P2_TOPOLOGY as a preset "
                        f"({', '.join(preset_names())}) or a YAML file on the ranks, or --topology to p2 serve")


def _lower_priority(nice: int) -> None:
    """The worker's initializer: ``nice`` more than the service (0: as the service)."""
    if nice > 0:
        os.nice(nice)


class Planner:
    """One worker process for searches, started on first use, ``nice`` below the service."""

    def __init__(self, nice: int = DEFAULT_NICE) -> None:
        if not 0 <= nice <= MAX_NICE:
            raise InvalidInputError(f"the search worker's nice value must be 0..{MAX_NICE}, not {nice}")
        self.nice = nice
        self._pool: ProcessPoolExecutor | None = None
        self._stopped: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()   # stopped for a cancelled caller

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_lower_priority, initargs=(self.nice,))
        return self._pool

    async def plan(self, traces: list[dict], topology_yaml: str, budget: float, seed: int = 0,
                   running_plan_json: str | None = None, evaluations: int | None = None,
                   prior_fit: dict | None = None) -> SearchOutcome:
        """:func:`search` in the worker; ``budget`` seconds (+ :data:`GRACE_SECONDS`) before it is stopped."""
        return await self._run("the search", budget, search, traces, topology_yaml, seed, running_plan_json,
                               evaluations, prior_fit)

    async def fit(self, traces: list[dict], topology_yaml: str, plan_json: str, prior_fit: dict | None,
                  budget: float) -> dict | None:
        """:func:`fit_tried` in the worker, stopped like a search after ``budget`` seconds."""
        return await self._run("fitting the tried plan", budget, fit_tried, traces, topology_yaml, plan_json,
                               prior_fit)

    async def _run(self, what: str, budget: float, function, *args):
        """``function(*args)`` in the worker. A caller that is cancelled (the policy
        dropped a search for an old cluster state) stops the worker if it runs its
        call, so the next search does not wait for a result nobody reads (a DLRM
        loop's replan waited 9 s, 20 iterations, behind one); a call of another job
        that was waiting its turn is then submitted again to the fresh worker."""
        while True:
            pool = self._executor()
            work = pool.submit(function, *args)
            try:
                return await self._wait(what, budget, work)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():      # this caller was cancelled
                    if not work.cancel():                        # handed to the worker: stop it there
                        self._kill(stopped=True)
                    raise
            except BrokenProcessPool:
                if pool not in self._stopped:
                    self._kill()
                    raise PlanningError(f"{what}'s worker process died; the next search starts a new one") from None
            # Another caller's cancel stopped the worker before this call ran: submit it again.

    async def _wait(self, what: str, budget: float, work):
        try:
            return await asyncio.wait_for(asyncio.wrap_future(work), budget + GRACE_SECONDS)
        except TimeoutError:
            self._kill()
            raise PlanningError(f"{what} did not finish within its budget of {budget:g} s "
                                f"+ {GRACE_SECONDS:g} s; its worker was stopped") from None
        except InvalidInputError as error:
            raise PlanningError(f"cannot plan this job: {error}") from None

    def _kill(self, stopped: bool = False) -> None:
        """Stop the worker (the next call starts a new one); ``stopped``: for a cancelled
        caller, so the calls it took down with it are submitted again, not failed."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if stopped:
            self._stopped.add(pool)
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
