"""The live loop (issue 16): telemetry → policy → search → two-phase commit → measure.

One :class:`JobLoop` per job drives the pure replanning policy
(:mod:`optimizer_service.control.policy`) from what the service sees; the
:class:`Replanner` holds them and is all the service core, the dashboard and
the servicers call. It sees the core only as a
:class:`~optimizer_service.service.replan_host.ReplanHost`:

* **Iterations.** The service gathers every rank's telemetry into one
  :class:`~optimizer_service.service.live.JobIteration` per iteration index
  (:class:`~optimizer_service.service.live.IterationGatherer`: the mean over
  ranks) and feeds it here, in order, as the policy's
  :class:`~optimizer_service.control.policy.Iteration`. The policy's window
  median is the job's measured iteration time
  (:mod:`optimizer_service.service.iteration_time`).
* **Actions.** :class:`RequestPlan` collects every rank's trace window
  (``ReplanHost.collect_traces``) and runs the joint search in the
  :class:`~optimizer_service.service.planning.Planner`'s worker process; its
  plan is stored under a fresh version (not committed) and the policy hears
  :class:`SearchDone`. :class:`Commit` submits that stored plan to the job's
  coordinator; :class:`RollBack` re-submits an earlier plan under a new
  version (version 0, passthrough, as a plan with no ops) — the coordinator's
  versions only grow; the plan rolled back leaves its motif times, fitted (a
  ``fitted`` event), for the next search in its cluster state. A drift state
  (``KEY~dN``: the policy saw the cluster change in the running plan's own
  iterations) starts from the last fit kept for the state it left, values only
  (:func:`~optimizer_service.syndicate.telemetry_fit.values_only`): a line its
  window has no sample of keeps what was last fitted for it, and nothing older
  is pooled with the lines it can fit. In two FSDP2 loop runs the drift state's
  search had no sample of the slowed NIC (the plan running there left it
  unused; the fit that knew it at 5.7 MB/s was kept for the state before),
  took it at its calibrated 25 MB/s and committed a plan over both NICs that
  ran 0.82 and 0.86 s and was rolled back; from the values kept, the same
  windows give no plan over the running one. The
  coordinator's decisions come back as :class:`Committed` /
  :class:`CommitFailed` (:meth:`Replanner.decided`).
* **Search records.** With ``record_dir`` set (``p2 serve --record-searches``),
  each search's inputs and outcome are written there as one file
  (:mod:`optimizer_service.service.search_record`), to be searched again off
  the job.
* **Record.** Every action and note is published as a job event and stored
  with its kind and reason (``ReplanHost.record``). A plan the policy commits
  carries the iteration time the policy expects of it
  (:class:`~optimizer_service.service.jobs.PlanState` ``predicted_seconds``).

The loop never blocks the event loop: searches run in the worker process,
store writes on the store's thread, and a policy step is a pure function call.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from optimizer_service.control import policy as rules
from optimizer_service.control.policy import (
    CancelSearch,
    ClusterChanged,
    Commit,
    CommitFailed,
    Committed,
    Iteration,
    Pause,
    Policy,
    PolicyConfig,
    ReplanNow,
    RequestPlan,
    Resume,
    RollBack,
    SearchDone,
    SearchFailed,
    Tick,
)
from optimizer_service.errors import InvalidInputError
from optimizer_service.metrics import ServiceMetrics
from optimizer_service.plan import Plan
from optimizer_service.service import search_record
from optimizer_service.service.jobs import Job
from optimizer_service.service.live import JobIteration
from optimizer_service.service.planning import DEFAULT_NICE, Planner, resolve_topology, short_error
from optimizer_service.service.replan_host import ReplanHost
from optimizer_service.service.traces import TRACE_ITERATIONS
from optimizer_service.syndicate.live_search import LIVE_EVALUATIONS
from optimizer_service.syndicate.passthrough import summary as passthrough_summary
from optimizer_service.syndicate.telemetry_fit import values_only

log = logging.getLogger("p2.service")

RESOLVE_SECONDS = 10.0      # reading a job's topology off the loop (the bounded loader needs milliseconds)
MAX_TIMELINES = 8           # predicted timelines kept (of the newest searched versions)


@dataclass(frozen=True)
class ReplanConfig:
    """How the service replans live jobs (``p2 serve --replan/--no-replan``, ``--topology``, ``--search-budget``)."""

    enabled: bool = True
    policy: PolicyConfig = PolicyConfig()
    topology: str = ""              # for jobs whose ranks give none (P2_TOPOLOGY): a preset name or YAML
    budget: float = 5.0             # seconds a search may take (+ planning.GRACE_SECONDS) before it is stopped
    trace_iterations: int = TRACE_ITERATIONS    # finished iterations of every rank's trace a search reads
    seed: int = 0
    evaluations: int = LIVE_EVALUATIONS         # the most each MCMC search evaluates (it never stops by time)
    record_dir: str = ""            # where each search's inputs and outcome are written (search_record); "": nowhere
    nice: int = DEFAULT_NICE        # the search worker's CPU priority below the service's (P2_SEARCH_NICE)


def cluster_key(topology_yaml: str) -> str:
    """A short name for a cluster state: the hash of its topology's YAML."""
    return hashlib.sha256(topology_yaml.encode()).hexdigest()[:12] if topology_yaml else "unknown"


def _resolved(value: str) -> tuple[str, str]:
    """``(topology YAML, "")`` or ``("", why not)`` for a job's topology text (runs in a worker thread)."""
    try:
        return resolve_topology(value), ""
    except InvalidInputError as error:
        return "", str(error)


def fit_summary(fit: dict) -> str:
    """One line of a search's fitted model (:attr:`SearchOutcome.fit`): per channel and
    for the host, the fixed cost per motif, the latency of a round and the rate."""
    def one(name: str, entry: dict) -> str:
        rate = entry.get("rate_bytes_per_s")
        round_ = entry.get("round_seconds")
        return (f"{name} {entry['motif_seconds'] * 1e3:.2f} ms/motif"
                + ("" if round_ is None else f", {round_ * 1e3:.2f} ms/round")
                + ("" if rate is None else f", {rate / 1e6:.3g} MB/s")
                + f" ({entry['how']}, {entry['samples']} samples)")

    parts = [one(f"channel {c}", entry) for c, entry in fit.get("channels", {}).items()]
    if "host" in fit:
        parts.append(one("host", fit["host"]))
    return "fitted to the window: " + "; ".join(parts)


class JobLoop:
    """One job's replanning: its policy and the searches and commits it asked for."""

    def __init__(self, host: ReplanHost, metrics: ServiceMetrics, planner: Planner, config: ReplanConfig,
                 job: Job) -> None:
        self.host, self.metrics, self.planner, self.config, self.job = host, metrics, planner, config, job
        self.topology_yaml = ""
        self.topology_error = ""
        self._topology_value: str | None = None      # the text last resolved (or being resolved)
        self._resolving: asyncio.Task | None = None
        self._generation = 0
        self._search: tuple[int, asyncio.Task] | None = None
        self._same_as: dict[int, int] = {}          # version -> the version whose plan it re-installs
        self._tasks: set[asyncio.Task] = set()
        self.timelines: dict[int, tuple[dict, ...]] = {}     # version -> the search's predicted timeline
        self._fit: tuple[str, dict] | None = None    # (cluster state, the last search's fit there)
        self.policy = Policy.new(cluster_key(""), config.policy)
        self._resolve_topology(initial=True)

    # ------------------------------------------------------------- inputs
    def _resolve_topology(self, initial: bool = False) -> None:
        """Read the job's topology (the ranks' ``P2_TOPOLOGY``, else ``--topology``).

        The text comes from a rank, so it is read in a worker thread with a
        deadline (:data:`RESOLVE_SECONDS`) whenever an event loop runs: the
        loop (gRPC health, every rank stream) never waits on it. Until it is
        read, ``topology_yaml`` keeps the previous value; a search waits for it.
        Without a running loop (a test building a loop by hand) it is read here."""
        value = self.job.topology or self.config.topology
        if value == self._topology_value:
            return
        self._topology_value = value
        self._generation += 1
        if not value:
            self._settle(self._generation, "", "no topology: give P2_TOPOLOGY on the ranks or --topology to p2 serve",
                         initial)
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._settle(self._generation, *_resolved(value), initial)
            return
        self._resolving = self._start(self._resolve_off_loop(self._generation, value, initial))

    async def _resolve_off_loop(self, generation: int, value: str, initial: bool) -> None:
        try:
            topology_yaml, error = await asyncio.wait_for(asyncio.to_thread(_resolved, value), RESOLVE_SECONDS)
        except TimeoutError:
            topology_yaml, error = "", (f"the job's topology took more than {RESOLVE_SECONDS:g} s to read; give "
                                        "P2_TOPOLOGY a preset or a smaller YAML file")
        except Exception as failure:        # not the text's fault (a preset unreadable): said once, kept short
            log.warning("job %s: reading its topology failed: %s", self.job.job_id, short_error(repr(failure)))
            topology_yaml, error = "", f"the job's topology cannot be read: {type(failure).__name__}"
        self._settle(generation, topology_yaml, error, initial)

    def _settle(self, generation: int, topology_yaml: str, error: str, initial: bool) -> None:
        """The topology of resolution ``generation`` is known (a later one wins)."""
        if generation != self._generation:
            return
        self.topology_yaml, self.topology_error = topology_yaml, short_error(error) if error else ""
        key = cluster_key(topology_yaml)
        if initial and self.policy.last_index is None and not self.policy.measured:
            self.policy = replace(self.policy, cluster=key)     # the job's first cluster state, not a change
        else:
            self._feed(ClusterChanged(key))

    async def _topology_known(self) -> None:
        """Wait for a topology being read (a search needs it); its own deadline bounds the wait."""
        while self._resolving is not None and not self._resolving.done():
            await asyncio.shield(self._resolving)

    def topology_changed(self) -> None:
        """The ranks reported another topology: a new cluster state for the policy
        once it is read (off the event loop)."""
        self._resolve_topology()

    def iteration(self, it: JobIteration) -> None:
        """One completed iteration of the job (the ranks' mean), in index order."""
        self._feed(Iteration(it.index, it.seconds, it.wait_seconds, it.version, it.channels))

    def decided(self, version: int, decision: str, reason: str) -> None:
        """The coordinator decided plan ``version`` (called once its decision is durable)."""
        if decision == "commit":
            state = self.job.plans.get(version)
            predicted = state.predicted_seconds if state is not None else None
            self._feed(Committed(version, predicted, self._same_as.get(version)))
        else:       # a rollback's failure is the failure of the version it re-installs
            self._feed(CommitFailed(self._same_as.get(version, version), reason or "aborted"))

    def tick(self) -> None:
        self._feed(Tick())

    def pause(self, paused: bool, reason: str = "") -> None:
        """An operator paused (or resumed) replanning for the job."""
        self._feed(Pause(reason) if paused else Resume(reason))

    def replan_now(self, reason: str = "") -> None:
        """An operator asked for a search now (the policy may say why not, as a note)."""
        self._feed(ReplanNow(reason))

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    # ------------------------------------------------------------- the policy
    def _feed(self, event) -> None:
        self.policy, actions = rules.step(self.policy, event, self.host.clock())
        for action in actions:
            self._record(action)
            if isinstance(action, RequestPlan):
                self._start(self._run_search(action.request))
            elif isinstance(action, CancelSearch):
                if self._search is not None and self._search[0] == action.request:
                    self._search[1].cancel()
                    self._search = None
            elif isinstance(action, Commit):
                state = self.job.plans.get(action.version)
                if state is not None:       # the policy's expectation (the model's ratio on the measured median)
                    state.predicted_seconds, state.dirty = action.predicted_seconds, True
                self._start(self._commit(action.version))
            elif isinstance(action, RollBack):
                tried = self.job.coordinator.committed_plan
                if tried is not None and tried.ops:     # before the rollback's switch: the traces still hold it
                    self._start(self._fit_tried(tried, self.policy.cluster))
                self._start(self._roll_back(action.to_version))

    def _record(self, action) -> None:
        version = getattr(action, "version", 0) or getattr(action, "to_version", 0)
        details = {"iteration": self.policy.last_index, "phase": self.policy.phase}
        if isinstance(action, RequestPlan):
            details["trigger"] = action.trigger
            self.metrics.on_replan(self.job.job_id, action.trigger)
        self.host.record(self.job.job_id, action.kind, version, action.reason, details)

    def _start(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------- actions
    async def _run_search(self, request: int) -> None:
        task = asyncio.current_task()
        self._search = (request, task)
        try:
            await self._topology_known()
            if not self.topology_yaml:
                raise InvalidInputError(self.topology_error or "the job's topology is not known yet")
            running = self.job.coordinator.committed_plan
            running_json = running.to_json() if running is not None and running.ops else None
            cluster = self.policy.cluster
            prior = self._prior_fit(cluster)
            traces = await self.host.collect_traces(self.job.job_id, self.config.trace_iterations)
            outcome = await self.planner.plan(traces, self.topology_yaml, self.config.budget, self.config.seed,
                                              running_json, self.config.evaluations, prior)
            if outcome.fit:
                self._fit = (cluster, outcome.fit)
            plan = Plan.parse(outcome.plan_json)
            state = await self.host.store_plan(self.job.job_id, plan, origin=f"search r{request}",
                                               predicted_seconds=outcome.predicted_seconds)
            if self.config.record_dir:
                self._start(self._keep_record(search_record.SearchRecord(
                    self.job.job_id, state.version, cluster, traces, self.topology_yaml, self.config.seed,
                    running_json, self.config.evaluations, prior, outcome.plan_json, outcome.to_dict())))
        except asyncio.CancelledError:
            raise
        except Exception as error:      # a failed search is the policy's to handle, with its reason
            message = str(error) if isinstance(error, InvalidInputError) else f"{type(error).__name__}: {error}"
            self._feed(SearchFailed(request, message))
            return
        finally:
            if self._search is not None and self._search[0] == request:
                self._search = None
        self.timelines[state.version] = outcome.timeline
        for old in sorted(self.timelines)[:-MAX_TIMELINES]:
            del self.timelines[old]
        running_text = ("" if outcome.running_seconds is None
                        else f"the running plan {outcome.running_seconds:.4f} s, ")
        motifs = f"; {fit_summary(outcome.fit)}" if outcome.fit else ""
        bound = ("" if outcome.bound is None
                 else f"; no plan beats {outcome.bound['seconds']:.4f} s (bound by {outcome.bound['binding']})")
        stopped = (f" (stopped by {outcome.stopped_by} after {outcome.evaluations} evaluations; the median of "
                   f"{outcome.window_iterations} traced iterations)" if outcome.stopped_by else "")
        reason = (f"search r{request}: {outcome.planned_ops} of {outcome.comm_ops} comm-ops planned in "
                  f"{outcome.search_seconds:.1f} s{stopped}; the model predicts {outcome.predicted_seconds:.4f} s per "
                  f"iteration ({running_text}FIFO {outcome.fifo_seconds:.4f} s){motifs}{bound}"
                  f"; {passthrough_summary(outcome.passthrough)}")
        self.host.record(self.job.job_id, "searched", state.version, reason,
                         {"iteration": self.policy.last_index, "phase": self.policy.phase, "search": outcome.to_dict()})
        self._feed(SearchDone(request, state.version, outcome.predicted_seconds, outcome.running_seconds,
                              outcome.bound_seconds))

    async def _keep_record(self, record: search_record.SearchRecord) -> None:
        """Write the search's record (``record_dir``) off the event loop; a failure costs only the record."""
        try:
            await asyncio.to_thread(search_record.write, Path(self.config.record_dir), record)
        except (OSError, TypeError, ValueError) as error:
            log.warning("job %s: search record of v%d not written to %s: %s", self.job.job_id, record.version,
                        self.config.record_dir, getattr(error, "strerror", None) or error)

    async def _commit(self, version: int) -> None:
        try:
            await self.host.submit_stored(self.job.job_id, version)
        except Exception as error:
            self._feed(CommitFailed(version, str(error)))

    def _prior_fit(self, cluster: str) -> dict | None:
        """The fit kept for cluster state ``cluster``; for a drift state entered from the state whose fit
        is kept, that fit's values alone (module docstring); None when the last one kept is another
        state's."""
        if self._fit is None:
            return None
        kept, fit = self._fit
        if kept == cluster:
            return fit
        return values_only(fit) if rules.drifted_from(cluster, kept) else None

    async def _fit_tried(self, tried: Plan, cluster: str) -> None:
        """Keep what the plan being rolled back measured as its cluster state's fit
        (:func:`~optimizer_service.service.planning.fit_tried`): the next search
        there (the bound trigger's, from passthrough, which runs channel 0 alone)
        prices the other channels and the host with the tried plan's motif times.
        A failure costs only that knowledge: it is logged."""
        if not self.topology_yaml:
            return
        prior = self._prior_fit(cluster)
        try:
            traces = await self.host.collect_traces(self.job.job_id, self.config.trace_iterations)
            fit = await self.planner.fit(traces, self.topology_yaml, tried.to_json(), prior, self.config.budget)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("job %s: the motif times of v%d were not fitted: %s", self.job.job_id, tried.version, error)
            return
        if fit and self.policy.cluster == cluster:
            self._fit = (cluster, fit)
            self.host.record(self.job.job_id, "fitted", tried.version,
                             f"kept for the next search in cluster state {cluster}: what v{tried.version} measured, "
                             f"{fit_summary(fit)}", {"iteration": self.policy.last_index, "phase": self.policy.phase})

    async def _roll_back(self, to_version: int) -> None:
        """Re-install ``to_version`` (0: no plan) under a new version; a refusal is a failed commit."""
        try:
            if to_version == 0:         # passthrough again: beside it, passthrough's bound
                plan = Plan(1, self.job.world_size, {0: None}, (),
                            bound_iteration_seconds=self.job.passthrough_bound_seconds)
            else:
                plan = Plan.parse((await self.host.plan(self.job.job_id, to_version))[1].plan_json)
            old = self.job.plans.get(to_version)
            # submit_plan reserves a version only once the coordinator would take the plan
            state, _ = await self.host.submit_plan(self.job.job_id, plan, origin=f"rollback to v{to_version}",
                                                   predicted_seconds=old.predicted_seconds if old else None)
            self._same_as[state.version] = to_version
        except Exception as error:
            self._feed(CommitFailed(to_version, str(error)))

    def timeline(self, version: int) -> tuple[dict, ...]:
        """The predicted timeline of plan ``version`` (a rollback's is the re-installed plan's); () if unknown."""
        return self.timelines.get(self._same_as.get(version, version), ())


class Replanner:
    """Every job's :class:`JobLoop`, sharing one search worker. A job's loop starts
    with the first event of the job; the reads (:meth:`policy`, :meth:`timeline`,
    :meth:`topology_error`) start none."""

    def __init__(self, config: ReplanConfig, host: ReplanHost, metrics: ServiceMetrics) -> None:
        self.config, self.host, self.metrics = config, host, metrics
        self.planner = Planner(config.nice)
        self._loops: dict[str, JobLoop] = {}

    def _loop(self, job: Job) -> JobLoop:
        loop = self._loops.get(job.job_id)
        if loop is None:
            loop = self._loops[job.job_id] = JobLoop(self.host, self.metrics, self.planner, self.config, job)
        return loop

    # ------------------------------------------------------------- what the service core saw
    def registered(self, job: Job, topology_changed: bool) -> None:
        """A rank of ``job`` registered; ``topology_changed``: with a topology other than the job's before."""
        loop = self._loop(job)
        if topology_changed:
            loop.topology_changed()

    def iteration(self, job: Job, it: JobIteration) -> None:
        """One completed iteration of the job, in index order."""
        self._loop(job).iteration(it)

    def decided(self, job: Job, version: int, decision: str, reason: str) -> None:
        """The coordinator decided plan ``version`` (called once its decision is durable)."""
        self._loop(job).decided(version, decision, reason)

    def tick(self, job: Job) -> None:
        self._loop(job).tick()

    def forget(self, job_id: str) -> None:
        """The job was deleted: its loop stops (a search under way is cancelled)."""
        loop = self._loops.pop(job_id, None)
        if loop is not None:
            loop.close()

    # ------------------------------------------------------------- operators
    def pause(self, job: Job, paused: bool, reason: str = "") -> dict:
        """An operator paused (or resumed) the job's replanning; the policy's state after it."""
        loop = self._loop(job)
        loop.pause(paused, reason)
        return loop.policy.to_dict()

    def replan_now(self, job: Job, reason: str = "") -> dict:
        """An operator asked for a search now; the policy's state after it."""
        loop = self._loop(job)
        loop.replan_now(reason)
        return loop.policy.to_dict()

    # ------------------------------------------------------------- reads
    def policy(self, job_id: str) -> Policy | None:
        """The job's replanning policy now (None before the job's first event)."""
        loop = self._loops.get(job_id)
        return None if loop is None else loop.policy

    def topology_error(self, job_id: str) -> str:
        """Why the job's topology cannot be read ("" when it can, or is not read yet)."""
        loop = self._loops.get(job_id)
        return "" if loop is None else loop.topology_error

    def topology_yaml(self, job: Job) -> str:
        """The job's topology as YAML ('' until it was read, or when it cannot be)."""
        return self._loop(job).topology_yaml

    def timeline(self, job_id: str, version: int) -> tuple[dict, ...]:
        """The search's predicted timeline of the job's plan ``version``; () if unknown."""
        loop = self._loops.get(job_id)
        return () if loop is None else loop.timeline(version)

    def close(self) -> None:
        for loop in self._loops.values():
            loop.close()
        self.planner.close()
