"""Every metric the project exposes, in one place, in the Prometheus format.

Names are ``p2_``-prefixed and carry their unit (``_seconds``, ``_bytes``,
``_total``, ``_ratio``); a training job is the label ``job_id`` (``job`` is
Prometheus' own target label: a series carrying it would be renamed
``exported_job`` on scrape); label sets are fixed and small, and their values are
bounded (:class:`Bounded`: at most so many jobs, ranks, channels and op kinds
get a series of their own, the rest share ``"_other"``). Built with
``prometheus-client``: nothing writes exposition text by hand.

* The **service's** metrics (:class:`ServiceMetrics`, served on ``/metrics``
  of the service's HTTP port): iteration times, dispatcher waits, plan
  versions, commits, replans, prediction error and the enforcers' op counts,
  all aggregated from the ranks' telemetry — Prometheus scrapes one service,
  not every rank — and the service's own request latency and errors, and
  whether it leads (a standby serves only these, without the jobs' series).
* A **rank's** own counters (:func:`enforcer_exposition`,
  ``enforcer.metrics_text()``), ``p2_rank_*``, for a look at one process.

This module is the one piece of the shell the enforcer may import: it imports
nothing of the optimizer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric

#: The exposition's content type (what ``/metrics`` answers with).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OTHER = "_other"


@dataclass(frozen=True)
class MetricSpec:
    """A metric's name (without the ``_total`` Prometheus adds to counters),
    its type, its help text and its labels."""

    name: str
    kind: str               # "counter" | "gauge" | "histogram"
    help: str
    labels: tuple[str, ...]

    @property
    def exposed(self) -> tuple[str, ...]:
        """The sample names Prometheus stores for it."""
        if self.kind == "counter":
            return (self.name + "_total",)
        if self.kind == "histogram":
            return tuple(self.name + suffix for suffix in ("_bucket", "_sum", "_count"))
        return (self.name,)

    def family(self, samples: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
        if self.kind != "counter":
            raise ValueError(f"{self.name}: only counters are built from snapshots")
        family = CounterMetricFamily(self.name, self.help, labels=self.labels)
        for values, value in samples:
            family.add_metric(list(values), value)
        return family


# ------------------------------------------------------------ the service's
ITERATION = MetricSpec("p2_iteration_seconds", "histogram",
                       "Training iteration time of a job (the mean over its ranks of each rank's iteration).",
                       ("job_id",))
DISPATCH_WAIT = MetricSpec("p2_dispatch_wait_seconds", "counter",
                           "Time the enforcers' dispatchers waited for the next motif in plan order "
                           "(Syndicate Pseudocode 2), by job, rank and channel.", ("job_id", "rank", "channel"))
PLAN_VERSION = MetricSpec("p2_plan_version", "gauge", "The job's committed plan version (0: passthrough).",
                          ("job_id",))
RUNNING_VERSION = MetricSpec("p2_running_plan_version", "gauge",
                             "The plan version most of the job's ranks ran in their last iteration.", ("job_id",))
COMMITS = MetricSpec("p2_commits", "counter", "Two-phase commits decided, by outcome (commit, abort).",
                     ("job_id", "outcome"))
REPLANS = MetricSpec("p2_replans", "counter",
                     "Searches the replanning loop started, by trigger (first, slow, waits, cluster, bound, operator).",
                     ("job_id", "reason"))
PREDICTION_ERROR = MetricSpec("p2_prediction_error_ratio", "gauge",
                              "Measured / predicted iteration time - 1 of the running plan (measured: the median "
                              "over the replanning policy's window, the dashboard's measured time).", ("job_id",))
ENFORCER_OPS = MetricSpec("p2_enforcer_ops", "counter",
                          "Comm-ops the jobs' enforcers ran, by kind and whether a plan ran them.",
                          ("job_id", "kind", "planned"))
RANKS_CONNECTED = MetricSpec("p2_ranks_connected", "gauge", "Ranks of the job with an open stream.", ("job_id",))
REQUEST_LATENCY = MetricSpec("p2_service_request_seconds", "histogram",
                             "Time the service took to answer a request, by transport and method or route.",
                             ("transport", "method"))
REQUEST_ERRORS = MetricSpec("p2_service_request_errors", "counter",
                            "Requests the service answered with an error, by transport, method and code.",
                            ("transport", "method", "code"))
LEADER = MetricSpec("p2_service_leader", "gauge",
                    "1 while this service leads (decides, serves the API and the jobs' series), 0 on a standby.", ())

# ------------------------------------------------------------ a rank's own
RANK_OPS = MetricSpec("p2_rank_ops", "counter", "Comm-ops that entered this rank's p2enforcer backend, by kind.",
                      ("rank", "kind"))
RANK_BYPASSED = MetricSpec("p2_rank_bypassed", "counter",
                           "Comm-ops that reached an enforcer group's inner backend without the enforcer, by op.",
                           ("rank", "op"))
RANK_DISPATCH_WAIT = MetricSpec("p2_rank_dispatch_wait_seconds", "counter",
                                "Time this rank's dispatcher waited for the next motif in plan order.", ("rank",))

SERVICE: tuple[MetricSpec, ...] = (ITERATION, DISPATCH_WAIT, PLAN_VERSION, RUNNING_VERSION, COMMITS, REPLANS,
                                   PREDICTION_ERROR, ENFORCER_OPS, RANKS_CONNECTED, REQUEST_LATENCY, REQUEST_ERRORS,
                                   LEADER)
#: Every metric this module defines (the names a dashboard or an alert may use).
ALL: tuple[MetricSpec, ...] = SERVICE + (RANK_OPS, RANK_BYPASSED, RANK_DISPATCH_WAIT)

#: Iteration times from 1 ms to ~2 min; request latencies from 0.1 ms to ~30 s.
ITERATION_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 120.0)
LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0)


class Bounded:
    """A label's values, at most ``limit`` of them: the first ``limit`` seen keep
    their own series, later ones share :data:`OTHER` (a job with 10 000 ranks
    or a rank that sends odd op kinds cannot blow up Prometheus)."""

    def __init__(self, limit: int, allowed: Iterable[str] | None = None) -> None:
        self.limit = limit
        self.allowed = frozenset(allowed) if allowed is not None else None
        self._seen: set[str] = set()

    def __call__(self, value: object) -> str:
        text = str(value)
        if self.allowed is not None:
            return text if text in self.allowed else OTHER
        if text in self._seen:
            return text
        if len(self._seen) < self.limit:
            self._seen.add(text)
            return text
        return OTHER


#: Op kinds a rank reports that get their own series (torch.distributed's calls).
OP_KINDS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
            "all_gather", "reduce_scatter", "all_to_all", "reduce", "gather", "scatter", "barrier", "send", "recv",
            "allreduce_coalesced", "allgather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced")


class ServiceMetrics:
    """The service's registry: every :data:`SERVICE` metric, with bounded labels.

    The service core calls the ``on_*`` methods as things happen; the HTTP app
    serves :meth:`exposition`."""

    def __init__(self, *, max_jobs: int = 64, max_ranks: int = 256, max_channels: int = 16) -> None:
        # No ``*_created`` series: they doubled /metrics (one per rank and channel) and no panel reads them.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        self.job = Bounded(max_jobs)
        self._ranks: dict[str, Bounded] = {}
        self._max_ranks = max_ranks
        self.channel = Bounded(max_channels)
        self.kind = Bounded(0, OP_KINDS)
        self.method = Bounded(128)
        r = self.registry
        self.iteration = Histogram(ITERATION.name, ITERATION.help, ITERATION.labels, registry=r,
                                   buckets=ITERATION_BUCKETS)
        self.dispatch_wait = Counter(DISPATCH_WAIT.name, DISPATCH_WAIT.help, DISPATCH_WAIT.labels, registry=r)
        self.plan_version = Gauge(PLAN_VERSION.name, PLAN_VERSION.help, PLAN_VERSION.labels, registry=r)
        self.running_version = Gauge(RUNNING_VERSION.name, RUNNING_VERSION.help, RUNNING_VERSION.labels, registry=r)
        self.commits = Counter(COMMITS.name, COMMITS.help, COMMITS.labels, registry=r)
        self.replans = Counter(REPLANS.name, REPLANS.help, REPLANS.labels, registry=r)
        self.prediction_error = Gauge(PREDICTION_ERROR.name, PREDICTION_ERROR.help, PREDICTION_ERROR.labels,
                                      registry=r)
        self.enforcer_ops = Counter(ENFORCER_OPS.name, ENFORCER_OPS.help, ENFORCER_OPS.labels, registry=r)
        self.ranks_connected = Gauge(RANKS_CONNECTED.name, RANKS_CONNECTED.help, RANKS_CONNECTED.labels, registry=r)
        self.request_latency = Histogram(REQUEST_LATENCY.name, REQUEST_LATENCY.help, REQUEST_LATENCY.labels,
                                         registry=r, buckets=LATENCY_BUCKETS)
        self.request_errors = Counter(REQUEST_ERRORS.name, REQUEST_ERRORS.help, REQUEST_ERRORS.labels, registry=r)
        self.leader = Gauge(LEADER.name, LEADER.help, LEADER.labels, registry=r)     # 0 until it leads

    def _rank(self, job: str, rank: int) -> str:
        bound = self._ranks.get(job)
        if bound is None:
            bound = self._ranks[job] = Bounded(self._max_ranks)
        return bound(rank)

    # ------------------------------------------------------------- events
    def on_iteration(self, job_id: str, seconds: float) -> None:
        self.iteration.labels(self.job(job_id)).observe(seconds)

    def on_telemetry(self, job_id: str, rank: int, waits: Mapping[int, float],
                     ops: Mapping[tuple[str, bool], int]) -> None:
        """One rank's iteration: its dispatcher waits per channel and its ops by (kind, planned)."""
        job = self.job(job_id)
        for channel, seconds in waits.items():
            if seconds > 0:
                self.dispatch_wait.labels(job, self._rank(job_id, rank), self.channel(channel)).inc(seconds)
        for (kind, planned), count in ops.items():
            self.enforcer_ops.labels(job, self.kind(kind), "true" if planned else "false").inc(count)

    def on_running(self, job_id: str, version: int, prediction_error: float | None) -> None:
        job = self.job(job_id)
        self.running_version.labels(job).set(version)
        if prediction_error is not None:
            self.prediction_error.labels(job).set(prediction_error)
            return
        try:
            self.prediction_error.remove(job)     # no prediction for the running plan: no sample
        except KeyError:
            pass

    def on_decision(self, job_id: str, decision: str, committed_version: int) -> None:
        job = self.job(job_id)
        self.commits.labels(job, decision if decision in ("commit", "abort") else OTHER).inc()
        self.plan_version.labels(job).set(committed_version)

    def on_plan_version(self, job_id: str, committed_version: int) -> None:
        self.plan_version.labels(self.job(job_id)).set(committed_version)

    def on_replan(self, job_id: str, trigger: str) -> None:
        self.replans.labels(self.job(job_id), trigger).inc()

    def on_connected(self, job_id: str, ranks: int) -> None:
        self.ranks_connected.labels(self.job(job_id)).set(ranks)

    def on_request(self, transport: str, method: str, seconds: float, code: str | None = None) -> None:
        """A request answered in ``seconds``; ``code`` is its error code (None: it succeeded)."""
        method = self.method(method)
        self.request_latency.labels(transport, method).observe(seconds)
        if code is not None:
            self.request_errors.labels(transport, method, code).inc()

    def on_leading(self, leading: bool) -> None:
        """The service started or stopped leading: the one series that tells the replicas apart."""
        self.leader.set(1 if leading else 0)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class Stopwatch:
    """``with Stopwatch() as watch: ...; watch.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.started


class _Snapshot:
    """A collector of families computed once (a rank's counters at one moment)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def exposition(families: list[Metric]) -> str:
    """``families`` in the Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry).decode()


def enforcer_exposition(rank: int, ops: Mapping[str, int], bypassed: Mapping[str, int],
                        wait_seconds: float) -> str:
    """One rank's own counters: ops by kind, bypasses by op, dispatcher waits."""
    label = str(rank)
    return exposition([
        RANK_OPS.family(((label, kind), count) for kind, count in sorted(ops.items())),
        RANK_BYPASSED.family(((label, op), count) for op, count in sorted(bypassed.items())),
        RANK_DISPATCH_WAIT.family([((label,), wait_seconds)]),
    ])
