"""Latency and CPU cost of the optimizer service's HTTP dashboard under live jobs.

A real ``p2 serve`` process (SQLite in a temporary folder, ``--no-replan``,
``--http 127.0.0.1:0``) and, in a second process, ``--jobs`` live jobs of
``--ranks`` simulated ranks each (tests/support/participants.py: real gRPC
streams, one per rank, all from that one process). Every rank sends one
Telemetry message per iteration, every ``--period`` seconds, with op and motif
timings (tests/support/telemetry.py); each job has a committed plan v1 (two
all-reduces, each in two halves on two channels) that its telemetry runs.

Once every job has ``--history`` iterations, this process measures:

* an **idle-dashboard window** (``--idle`` seconds, telemetry only): the
  service's CPU seconds per second (utime + stime from /proc/PID/stat);
* **sequential requests** (httpx, one connection kept alive): ``--requests``
  per page and per ``/api/`` route, job routes round-robin over the jobs,
  after a few warm-up requests; latency p50/p99/max from the request's start
  to its last body byte, the service's own mean time in the handler (its
  ``p2_service_request_seconds``, scraped before and after each batch), and
  its CPU over all the batches less the idle window's rate: CPU ms per request
  (per route in the JSON, rough);
* optionally ``--clients`` concurrent clients (asyncio, one connection each)
  cycling over the same routes but the explorer (one synthesis at a time:
  others get 429 by design): latency under concurrency and throughput.

Goal (issue 17): p99 <= 100 ms for every page and route.

    .venv/bin/python benchmarks/dashboard.py [--jobs 10] [--ranks 64] [--period 0.15] [--requests 200]
        [--history 200] [--idle 10] [--clients 4]

Writes ``dashboard.json`` and ``dashboard.png`` under ``--out``
(benchmarks/results) and prints a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import math
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_SECONDS = 0.100
ELEMENTS = 1 << 18                  # the simulated ranks' all-reduces: 1 MiB of float32 (iteration_message)
WARMUP = 5                          # untimed requests per route before its batch
BACKLOG_EVERY = 0.5                 # seconds between the ranks' process's reports of its unsent messages
EXPLORE = "topology=gcp-v100-2n&axes=2,8&reduce=1&max_size=4&placements=4&programs=3"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ processes
def _die_with_parent() -> None:
    """In a child: SIGTERM when the benchmark process dies, however it dies (Linux)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)      # PR_SET_PDEATHSIG


def start_service(folder: Path) -> tuple[subprocess.Popen, str, int]:
    """``p2 serve``; its gRPC address and dashboard port (the HTTP port file is written first)."""
    port_file, http_file = folder / "port", folder / "http-port"
    log = (folder / "service.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "optimizer_service.cli", "serve", "--listen", "127.0.0.1:0",
                                "--port-file", str(port_file), "--http", "127.0.0.1:0", "--http-port-file",
                                str(http_file), "--store", f"sqlite:///{folder / 'service.db'}", "--no-replan"],
                               cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                               env=dict(os.environ, P2_LOG_LEVEL="WARNING"), preexec_fn=_die_with_parent)
    log.close()
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            tail = (folder / "service.log").read_text().strip().splitlines()[-1:] or ["(no output)"]
            raise BenchmarkError(f"p2 serve did not start: {tail[0]}")
        time.sleep(0.05)
    return process, f"127.0.0.1:{int(port_file.read_text())}", int(http_file.read_text())


def stop_process(process: subprocess.Popen | None, grace: float = 15) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def machine_busy_seconds() -> float:
    """CPU seconds every CPU of the machine spent busy (not idle, not waiting for I/O) since boot."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (every thread), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class BenchmarkError(Exception):
    """The benchmark cannot go on: one line to print (exit 1)."""


# ------------------------------------------------------------------ the ranks (a process of their own)
def feed_plan(world: int, period: float):
    """Plan v1 of a job: its two all-reduces, each in two halves, one per channel
    (the motifs ``iteration_message`` reports timings of)."""
    from optimizer_service.plan import Plan
    from optimizer_service.plan.collective import Collective
    from optimizer_service.plan.motif import Par, comm_op, on_channel
    from optimizer_service.plan.op_plan import OpKey, OpPlan
    from optimizer_service.syndicate.transforms import segment

    ops = []
    for seq in range(2):
        halves = segment(comm_op(Collective.ALL_REDUCE, range(world), ELEMENTS), ELEMENTS // 2).parts
        ops.append(OpPlan.of(OpKey(seq, "all_reduce", ELEMENTS * 4, tuple(range(world))),
                             Par(tuple(on_channel(piece, channel) for channel, piece in enumerate(halves))),
                             base=2 * seq))
    return Plan(1, world, {0: None, 1: None}, tuple(ops), predicted_iteration_seconds=period * 0.95)


async def feed(address: str, jobs: int, world: int, period: float) -> dict:
    """Register ``jobs`` x ``world`` ranks, start their telemetry, commit plan v1
    in every job, say ``ready`` on stdout, and stream until told to stop."""
    import grpc

    from optimizer_service.plan.proto_codec import plan_to_proto
    from p2.v1 import optimizer_pb2 as api
    from p2.v1 import optimizer_pb2_grpc
    from tests.support.participants import SimRank, run_rank
    from tests.support.telemetry import iteration_message

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # The benchmark process holds our stdin: its end (however it ended) is ours.
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    names = [f"bench-{j:02d}" for j in range(jobs)]
    sent = {"messages": 0, "late_ticks": 0}
    options = [("grpc.max_receive_message_length", 64 * 2**20)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        ranks = {name: [SimRank(name, r, world) for r in range(world)] for name in names}
        streams = [asyncio.ensure_future(run_rank(sim, channel, None, stop)) for sims in ranks.values()
                   for sim in sims]
        everyone = [sim for sims in ranks.values() for sim in sims]
        await asyncio.wait_for(asyncio.gather(*(sim.registered.wait() for sim in everyone)), 180)
        admin = optimizer_pb2_grpc.OptimizerStub(channel)
        for name in names:
            while (await admin.GetJob(api.GetJobRequest(job_id=name))).state != api.LIVE:
                await asyncio.sleep(0.02)
        began = time.monotonic()

        async def telemetry(index: int, sims: list) -> None:
            """One message per rank every ``period``; the jobs out of phase with each other."""
            tick = began + period * index / jobs
            iteration = 0
            while not stop.is_set():
                for sim in sims:
                    if sim.outbox is None:
                        continue
                    version = max((sim.state.running, *sim.state.held()))
                    seconds = period * (1 + 0.04 * math.sin(iteration / 7 + sim.rank))
                    sim.send(iteration_message(sim.job, sim.rank, world, iteration, seconds, version,
                                               wait=0.002 if version else 0.0))
                    sent["messages"] += 1
                iteration += 1
                tick += period
                delay = tick - time.monotonic()
                if delay < -period:                  # more than a period behind: skip, do not burst
                    sent["late_ticks"] += 1
                    tick = time.monotonic()
                    delay = 0.0
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.0, delay))

        feeders = [asyncio.ensure_future(telemetry(j, ranks[name])) for j, name in enumerate(names)]
        for name in names:
            plan = plan_to_proto(feed_plan(world, period))
            record = await admin.SubmitPlan(api.SubmitPlanRequest(job_id=name, plan=plan), timeout=120)
            while not all(record.version in sim.acked for sim in ranks[name]):
                if stop.is_set():
                    break
                await asyncio.sleep(0.01)
        print(json.dumps({"event": "ready", "jobs": names, "plan_version": 1}), flush=True)

        def backlog() -> int:
            return sum(sim.outbox.qsize() for sim in everyone if sim.outbox is not None)

        while not stop.is_set():              # what gRPC has not taken yet (the service reads too slowly)
            print(json.dumps({"event": "backlog", "messages": backlog()}), flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), BACKLOG_EVERY)
        elapsed = time.monotonic() - began
        await asyncio.gather(*feeders, return_exceptions=True)
        left = backlog()
        for sim in everyone:                  # end the streams now, not once the backlog is written
            while sim.outbox is not None and not sim.outbox.empty():
                sim.outbox.get_nowait()
        await asyncio.gather(*streams, return_exceptions=True)
    return {"event": "stats", "messages": sent["messages"], "seconds": elapsed,
            "messages_per_second": sent["messages"] / elapsed, "late_ticks": sent["late_ticks"],
            "backlog_at_stop": left}


def feed_main(address: str, jobs: int, world: int, period: float) -> int:
    try:
        stats = asyncio.run(feed(address, jobs, world, period))
    except Exception as error:  # noqa: BLE001 - reported to the benchmark process
        print(json.dumps({"event": "error", "message": f"{type(error).__name__}: {error}"}), flush=True)
        return 1
    print(json.dumps(stats), flush=True)
    return 0


class Feed:
    """The ranks' process and the JSON lines it prints."""

    def __init__(self, address: str, jobs: int, world: int, period: float) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "benchmarks.dashboard", "--feed-address", address,
                                         "--jobs", str(jobs), "--ranks", str(world), "--period", str(period)],
                                        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        env=dict(os.environ, P2_LOG_LEVEL="WARNING"), preexec_fn=_die_with_parent)
        self.lines: queue.Queue = queue.Queue()
        self.backlog: list[tuple[float, int]] = []        # (time.perf_counter(), unsent messages)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if message.get("event") == "backlog":
                    self.backlog.append((time.perf_counter(), message["messages"]))
                else:
                    self.lines.put(message)
        self.lines.put({"event": "exit"})

    def max_backlog(self, start: float, end: float) -> int | None:
        seen = [count for when, count in list(self.backlog) if start <= when <= end]
        return max(seen) if seen else None

    def wait(self, event: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchmarkError(f"the ranks' process did not say {event!r} within {timeout:.0f} s") from None
            if line.get("event") == event:
                return line
            if line.get("event") in ("error", "exit"):
                raise BenchmarkError(f"the ranks' process failed: {line.get('message', 'it exited')}")

    def stop(self) -> dict | None:
        """SIGTERM; its stats (messages sent, rate)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            stats = self.wait("stats", 60)
        except BenchmarkError:
            stats = None
        stop_process(self.process, 5)
        with contextlib.suppress(Exception):
            self.process.stdin.close()
        return stats


# ------------------------------------------------------------------ the routes
def routes(explore: str) -> list[tuple[str, str, str, str]]:
    """(name, kind, URL template, the service's route): ``{job}`` round-robin over the jobs,
    ``{since}`` the last iteration this client saw of that job (the live chart's poll)."""
    return [("/", "page", "/", "/"),
            ("/jobs/{job}", "page", "/jobs/{job}", "/jobs/{job_id}"),
            ("/jobs/{job}/plans/{v}", "page", "/jobs/{job}/plans/1", "/jobs/{job_id}/plans/{version}"),
            ("/topology", "page", "/topology", "/topology"),
            ("/explore?...", "page", f"/explore?{explore}", "/explore"),
            ("/api/jobs", "api", "/api/jobs", "/api/jobs"),
            ("/api/jobs/{job}", "api", "/api/jobs/{job}", "/api/jobs/{job_id}"),
            ("/api/jobs/{job}/telemetry?since=-1", "api", "/api/jobs/{job}/telemetry?since=-1",
             "/api/jobs/{job_id}/telemetry"),
            ("/api/jobs/{job}/telemetry?since=N", "api", "/api/jobs/{job}/telemetry?since={since}",
             "/api/jobs/{job_id}/telemetry"),
            ("/api/jobs/{job}/events", "api", "/api/jobs/{job}/events", "/api/jobs/{job_id}/events"),
            ("/api/jobs/{job}/plans", "api", "/api/jobs/{job}/plans", "/api/jobs/{job_id}/plans"),
            ("/metrics", "api", "/metrics", "/metrics"),
            ("/healthz", "api", "/healthz", "/healthz")]


def server_seconds(client) -> dict[str, tuple[float, float]]:
    """The service's own account of its HTTP requests (``p2_service_request_seconds``, measured by
    the app's middleware around the handler): route -> (seconds in all, requests)."""
    from prometheus_client.parser import text_string_to_metric_families

    response = client.get("/metrics")
    check(response, "/metrics")
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(response.text):
        if family.name != "p2_service_request_seconds":
            continue
        for sample in family.samples:
            if sample.labels.get("transport") != "http" or not sample.labels.get("method", "").startswith("GET "):
                continue
            entry = totals.setdefault(sample.labels["method"][4:], [0.0, 0.0])
            if sample.name.endswith("_sum"):
                entry[0] = sample.value
            elif sample.name.endswith("_count"):
                entry[1] = sample.value
    return {route: (total, count) for route, (total, count) in totals.items()}


class Urls:
    """The URLs of one client: jobs round-robin, and the telemetry polls' ``since``."""

    def __init__(self, jobs: list[str], offset: int = 0) -> None:
        self.jobs, self.count = jobs, offset
        self.since: dict[str, int] = {}

    def next(self, template: str) -> tuple[str, str]:
        job = self.jobs[self.count % len(self.jobs)]
        self.count += 1
        return job, template.format(job=job, since=self.since.get(job, -1))

    def saw(self, template: str, job: str, response) -> None:
        if "{since}" in template or "since=-1" in template:
            self.since[job] = response.json()["last"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def latency_row(seconds: list[float]) -> dict:
    return {"n": len(seconds), "p50_ms": statistics.median(seconds) * 1e3, "p99_ms": percentile(seconds, 0.99) * 1e3,
            "max_ms": max(seconds) * 1e3, "mean_ms": statistics.fmean(seconds) * 1e3}


def check(response, url: str) -> None:
    if response.status_code != 200:
        raise BenchmarkError(f"GET {url} answered {response.status_code}: {response.text[:200]!r}")


def sequential(base: str, jobs: list[str], count: int, explore: str, pid: int, idle_rate: float) -> dict:
    """``count`` requests per route, one after another, on one kept-alive connection."""
    import httpx

    rows = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        urls = Urls(jobs)
        for name, kind, template, route in routes(explore):
            for _ in range(WARMUP):
                job, url = urls.next(template)
                response = client.get(url)
                check(response, url)
                urls.saw(template, job, response)
            seconds, sizes = [], []
            served0 = server_seconds(client).get(route, (0.0, 0.0))
            cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
            for _ in range(count):
                job, url = urls.next(template)
                start = time.perf_counter()
                response = client.get(url)
                seconds.append(time.perf_counter() - start)
                check(response, url)
                sizes.append(len(response.content))
                urls.saw(template, job, response)
            wall, cpu = time.perf_counter() - wall0, cpu_seconds(pid) - cpu0
            served1 = server_seconds(client).get(route, (0.0, 0.0))
            handled = served1[1] - served0[1]
            rows[name] = dict(latency_row(seconds), kind=kind, url=template, route=route,
                              server_mean_ms=(served1[0] - served0[0]) / handled * 1e3 if handled else None,
                              mean_bytes=round(statistics.fmean(sizes)), batch_seconds=wall,
                              service_cpu_seconds=cpu,
                              service_cpu_ms_per_request=(cpu - idle_rate * wall) / count * 1e3,
                              seconds=seconds)
    return rows


async def concurrent(base: str, jobs: list[str], clients: int, count: int, explore: str) -> dict:
    """``clients`` clients at once, each ``count`` requests cycling over the routes but the explorer."""
    import httpx

    templates = [(name, template) for name, _, template, _ in routes(explore) if not name.startswith("/explore")]
    seconds: list[float] = []
    per_route: dict[str, list[float]] = {name: [] for name, _ in templates}

    async def one(index: int) -> None:
        urls = Urls(jobs, offset=index)
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for k in range(count):
                name, template = templates[(k + index) % len(templates)]
                job, url = urls.next(template)
                start = time.perf_counter()
                response = await client.get(url)
                elapsed = time.perf_counter() - start
                check(response, url)
                urls.saw(template, job, response)
                seconds.append(elapsed)
                per_route[name].append(elapsed)

    start = time.perf_counter()
    await asyncio.gather(*(one(index) for index in range(clients)))
    wall = time.perf_counter() - start
    return dict(latency_row(seconds), clients=clients, wall_seconds=wall, requests_per_second=len(seconds) / wall,
                routes={name: latency_row(values) for name, values in per_route.items() if values})


def job_iterations(base: str) -> dict[str, int]:
    import httpx

    answer = httpx.get(f"{base}/api/jobs", timeout=30)
    check(answer, "/api/jobs")
    return {job["job_id"]: job["iteration"] for job in answer.json()["jobs"]}


class Window:
    """CPU seconds of the service, the ranks' process, this process and every other process
    (the machine's busy time less those) over a stretch of wall time."""

    def __init__(self, pids: dict[str, int], base: str, feed: Feed) -> None:
        self.pids, self.base, self.feed = pids, base, feed

    def __enter__(self) -> Window:
        self.iterations = job_iterations(self.base)
        self.cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.machine = machine_busy_seconds()
        self.start = time.perf_counter()
        return self

    def __exit__(self, kind, *exc) -> None:
        if kind is not None:
            return
        self.seconds = time.perf_counter() - self.start
        cpu = {name: cpu_seconds(pid) - self.cpu[name] for name, pid in self.pids.items()}
        cpu["others"] = max(0.0, machine_busy_seconds() - self.machine - sum(cpu.values()))
        after = job_iterations(self.base)
        rates = [(after[job] - self.iterations[job]) / self.seconds for job in self.iterations]
        self.result = {"seconds": self.seconds, "cpu_seconds": cpu,
                       "cpu_seconds_per_second": {name: value / self.seconds for name, value in cpu.items()},
                       "job_iterations_per_second": {"min": min(rates), "median": statistics.median(rates)},
                       "max_unsent_telemetry": self.feed.max_backlog(self.start, self.start + self.seconds),
                       "machine_busy_fraction": sum(cpu.values()) / (self.seconds * (os.cpu_count() or 1))}


# ------------------------------------------------------------------ reporting
def plot(document: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(document["routes"])
    rows = [document["routes"][name] for name in names]
    figure, axis = plt.subplots(figsize=(11, 5))
    positions = range(len(names))
    axis.bar([x - 0.2 for x in positions], [row["p50_ms"] for row in rows], 0.4, label="p50", color="C0")
    axis.bar([x + 0.2 for x in positions], [row["p99_ms"] for row in rows], 0.4, label="p99", color="C1")
    served = [(x, row["server_mean_ms"]) for x, row in zip(positions, rows) if row["server_mean_ms"]]
    axis.plot([x for x, _ in served], [ms for _, ms in served], "k_", ms=14, mew=2,
              label="mean time in the service's handler")
    axis.axhline(GOAL_SECONDS * 1e3, color="C3", lw=1, ls="--", label=f"goal: p99 <= {GOAL_SECONDS * 1e3:.0f} ms")
    axis.set_yscale("log")
    lowest = min([row["p50_ms"] for row in rows] + [ms for _, ms in served])
    axis.set_ylim(lowest / 3, max(row["max_ms"] for row in rows) * 4)      # room for the legend above
    axis.set_xticks(list(positions))
    axis.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
    axis.set_ylabel("latency (ms), sequential requests")
    config = document["config"]
    axis.set_title(f"p2 serve dashboard: {config['jobs']} live jobs x {config['ranks']} ranks, telemetry every "
                   f"{config['period']:g} s per rank, {config['requests']} requests per route\n"
                   f"({document['machine']['cpus']} CPUs shared by the service, the ranks' process and the "
                   "load generator)", fontsize=9)
    axis.legend(fontsize=8, loc="upper left", ncol=4)
    axis.grid(axis="y", which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def report(document: dict) -> None:
    config, cpu = document["config"], document["cpu"]
    feed = document["feed"]
    rate = "unknown" if feed is None else f"{feed['messages_per_second']:,.0f}"
    print(f"\nsummary: {config['jobs']} jobs x {config['ranks']} ranks, telemetry every {config['period']:g} s per "
          f"rank ({rate} messages/s sent), {config['requests']} sequential requests per route "
          f"(goal: p99 <= {GOAL_SECONDS * 1e3:.0f} ms)")
    print(f"  {'route':<38} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'server ms':>9} {'bytes':>7}")
    for name, row in document["routes"].items():
        verdict = "meets goal" if row["p99_ms"] <= GOAL_SECONDS * 1e3 else "MISSES goal"
        server = "-" if row["server_mean_ms"] is None else f"{row['server_mean_ms']:.1f}"
        print(f"  {name:<38} {row['n']:>5} {row['p50_ms']:>8.1f} {row['p99_ms']:>8.1f} {row['max_ms']:>8.1f} "
              f"{server:>9} {row['mean_bytes']:>7}  {verdict}")
    print("  (p50/p99/max: at the client, from the request's start to its last body byte; server ms: the mean time "
          "the service's middleware measured around the handler, p2_service_request_seconds)")
    if document.get("concurrent"):
        row = document["concurrent"]
        print(f"  {row['clients']} concurrent clients (every route but the explorer): p50 {row['p50_ms']:.1f} ms  "
              f"p99 {row['p99_ms']:.1f} ms  max {row['max_ms']:.1f} ms  {row['requests_per_second']:.0f} requests/s "
              f"({row['n']} requests)")
    idle, busy = cpu["idle"], cpu["requests"]
    print(f"  service CPU: {idle['cpu_seconds_per_second']['service']:.2f} s/s with the dashboard idle (telemetry "
          f"only, {idle['seconds']:.0f} s), {busy['cpu_seconds_per_second']['service']:.2f} s/s while serving "
          f"sequential requests ({busy['seconds']:.0f} s, {cpu['requests_served']} requests): "
          f"{cpu['service_cpu_ms_per_request']:.2f} CPU ms per request over the idle rate")
    print(f"  sharing the {document['machine']['cpus']} CPUs: the service (gRPC + HTTP on one event loop), the ranks' "
          f"process ({idle['cpu_seconds_per_second']['ranks']:.2f} s/s idle, "
          f"{busy['cpu_seconds_per_second']['ranks']:.2f} s/s busy) and this load generator "
          f"({busy['cpu_seconds_per_second']['load generator']:.2f} s/s busy)")
    print(f"  telemetry applied: job iterations/s (median job; {1 / config['period']:.1f} sent) "
          f"{idle['job_iterations_per_second']['median']:.1f} idle, "
          f"{busy['job_iterations_per_second']['median']:.1f} while serving requests; most messages not yet "
          f"taken by the service {idle['max_unsent_telemetry']} idle, {busy['max_unsent_telemetry']} while serving")
    print(f"  other processes on the machine (not this benchmark's): {idle['cpu_seconds_per_second']['others']:.2f} "
          f"CPU s/s in the idle window, {busy['cpu_seconds_per_second']['others']:.2f} in the request window; "
          f"the CPUs were {idle['machine_busy_fraction']:.0%} and {busy['machine_busy_fraction']:.0%} busy; load "
          f"average {document['machine']['load_average']['before']:.1f} before, "
          f"{document['machine']['load_average']['after']:.1f} after")
    if max(idle["machine_busy_fraction"], busy["machine_busy_fraction"]) > 0.9:
        print("  (the machine was CPU-bound: latencies include waits for a CPU, and the service's CPU per request "
              "is understated as it did less telemetry work)")
    slow = [name for name, row in document["routes"].items() if row["p99_ms"] > GOAL_SECONDS * 1e3]
    print(f"  goal: {'met by every route' if not slow else 'MISSED by ' + ', '.join(slow)}")


# ------------------------------------------------------------------ main
def run(args: argparse.Namespace) -> dict:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="p2-bench-dashboard-") as folder:
        service = feed_process = None
        try:
            service, address, http_port = start_service(Path(folder))
            base = f"http://127.0.0.1:{http_port}"
            print(f"p2 serve: gRPC {address}, dashboard {base}/ (pid {service.pid})", file=sys.stderr)
            started = time.perf_counter()
            feed_process = Feed(address, args.jobs, args.ranks, args.period)
            ready = feed_process.wait("ready", 300)
            jobs = ready["jobs"]
            print(f"{len(jobs)} jobs x {args.ranks} ranks registered and plan v1 committed in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
            deadline = time.monotonic() + args.history * args.period * 3 + 60
            while min(job_iterations(base).values()) < args.history:
                if time.monotonic() > deadline or service.poll() is not None:
                    raise BenchmarkError(f"the jobs did not reach {args.history} iterations")
                time.sleep(0.25)
            pids = {"service": service.pid, "ranks": feed_process.process.pid, "load generator": os.getpid()}
            print(f"every job has {args.history} iterations; idle window of {args.idle:g} s", file=sys.stderr)
            with Window(pids, base, feed_process) as idle:
                time.sleep(args.idle)
            idle_rate = idle.result["cpu_seconds_per_second"]["service"]
            print(f"sequential requests: {args.requests} per route", file=sys.stderr)
            with Window(pids, base, feed_process) as busy:
                rows = sequential(base, jobs, args.requests, args.explore, service.pid, idle_rate)
            served = sum(row["n"] for row in rows.values())
            concurrent_row = None
            if args.clients:
                print(f"{args.clients} concurrent clients", file=sys.stderr)
                concurrent_row = asyncio.run(concurrent(base, jobs, args.clients, args.requests, args.explore))
            stats = feed_process.stop()           # None: it did not say (reported as unknown)
        finally:
            if feed_process is not None and feed_process.process.poll() is None:
                feed_process.stop()
            stop_process(service)
    busy_cpu = busy.result["cpu_seconds"]["service"]
    load_after = os.getloadavg()[0]
    return {"benchmark": "dashboard", "goal_p99_ms": GOAL_SECONDS * 1e3,
            "config": {"jobs": args.jobs, "ranks": args.ranks, "period": args.period, "requests": args.requests,
                       "history": args.history, "idle_seconds": args.idle, "clients": args.clients,
                       "explore": args.explore, "warmup_per_route": WARMUP, "store": "sqlite", "replan": False},
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cpus": os.cpu_count(), "cpu": _cpu_model(),
                        "load_average": {"before": load_before, "after": load_after}},
            "feed": stats, "routes": rows, "concurrent": concurrent_row,
            "cpu": {"note": "routes[*].service_cpu_ms_per_request: the service's CPU in the route's batch less "
                            "the idle window's rate, per request; rough, as the telemetry work varies",
                    "idle": idle.result, "requests": busy.result, "requests_served": served,
                    "service_cpu_ms_per_request": (busy_cpu - idle_rate * busy.seconds) / served * 1e3}}


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """A bad argument: one line, exit 2."""
        print(f"dashboard: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10, help="live jobs")
    parser.add_argument("--ranks", type=int, default=64, help="simulated ranks per job (one gRPC stream each)")
    parser.add_argument("--period", type=float, default=0.15, help="seconds between a rank's telemetry messages")
    parser.add_argument("--requests", type=int, default=200, help="timed sequential requests per route")
    parser.add_argument("--history", type=int, default=200, help="iterations every job has before measuring")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle-dashboard CPU window")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients after the sequential run (0: none)")
    parser.add_argument("--explore", default=EXPLORE, help="the explorer page's query string")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--feed-address", help=argparse.SUPPRESS)         # internal: be the ranks' process
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:               # --help (0) or a bad argument (2)
        return int(done.code or 0)
    if not (1 <= args.jobs <= 1000 and 1 <= args.ranks <= 4096 and 0.01 <= args.period <= 10
            and 1 <= args.requests <= 100_000 and 1 <= args.history <= 1000 and 0.1 <= args.idle <= 600
            and 0 <= args.clients <= 64 and args.explore):
        print("dashboard: need 1 <= --jobs <= 1000, 1 <= --ranks <= 4096, 0.01 <= --period <= 10, "
              "1 <= --requests <= 100000, 1 <= --history <= 1000, 0.1 <= --idle <= 600, 0 <= --clients <= 64 "
              "and a non-empty --explore", file=sys.stderr)
        return 2
    if args.feed_address:
        return feed_main(args.feed_address, args.jobs, args.ranks, args.period)
    import httpx

    signals: list[int] = []

    def interrupt(number, frame) -> None:
        signals.append(number)
        raise KeyboardInterrupt

    main_thread = threading.current_thread() is threading.main_thread()
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    if main_thread:                          # Ctrl-C and SIGTERM: stop what was started, then exit 130
        for number in previous:
            signal.signal(number, interrupt)
    try:
        document = run(args)
    except BenchmarkError as error:
        print(f"dashboard: {error}", file=sys.stderr)
        return 130 if signals else 1
    except httpx.HTTPError as error:
        if signals:                          # Ctrl-C in a terminal stops the service too
            print("dashboard: interrupted; every process it started is stopped", file=sys.stderr)
            return 130
        print(f"dashboard: the dashboard stopped answering ({type(error).__name__}: {error})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dashboard: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    finally:
        if main_thread:
            for number, handler in previous.items():
                signal.signal(number, handler)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dashboard.json").write_text(json.dumps(document, indent=1) + "\n")
    plot(document, args.out / "dashboard.png")
    report(document)
    print(f"written: {args.out / 'dashboard.json'}, {args.out / 'dashboard.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
