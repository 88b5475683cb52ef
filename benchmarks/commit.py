"""Commit latency and telemetry ingestion of the optimizer service.

A real ``p2 serve`` process (SQLite, or a real ``redis-server`` started here)
and N ranks that speak the real protocol in this process
(tests/support/participants.py: real gRPC streams, the real participant
decisions, plans "built" at once). For each (store, N): plans are submitted one
after another; a commit's latency is from the submit call's start (the service
then persists the prepare record and sends every Prepare) to the moment the
last rank acknowledged its Commit — so it includes every durable write and
both rounds of messages. Then 64 ranks send telemetry as fast as they can; the
ingestion rate is the messages the service had applied (every rank's reported
iteration visible through ``GetJob``) per second.

Goal (issue 15): p99 <= 100 ms at 64 ranks and <= 1 s at 1024.

    .venv/bin/python benchmarks/commit.py [--ranks 64 256 1024] [--commits 20] [--stores sqlite redis]

Writes ``commit.json`` and ``commit.png`` under ``--out`` (benchmarks/results)
and prints a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from optimizer_service.plan import Plan  # noqa: E402
from optimizer_service.plan.proto_codec import plan_to_proto  # noqa: E402
from p2.v1 import enforcer_link_pb2 as link  # noqa: E402
from p2.v1 import optimizer_pb2 as api  # noqa: E402
from p2.v1 import optimizer_pb2_grpc  # noqa: E402
from tests.support.participants import SimRank, run_rank  # noqa: E402
from tests.support.redis_server import redis_server_path, start_redis  # noqa: E402


def start_service(folder: Path, store: str) -> tuple[subprocess.Popen, str]:
    port_file = folder / "port"
    process = subprocess.Popen([sys.executable, "-m", "optimizer_service.cli", "serve", "--listen", "127.0.0.1:0",
                                "--port-file", str(port_file), "--store", store], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=dict(os.environ, P2_LOG_LEVEL="WARNING"))
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"p2 serve did not start (store {store})")
        time.sleep(0.05)
    return process, f"127.0.0.1:{int(port_file.read_text())}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def commits(address: str, world: int, count: int) -> dict:
    job = f"bench-{world}"
    stop = asyncio.Event()
    options = [("grpc.max_receive_message_length", 64 * 2**20)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        ranks = [SimRank(job, r, world) for r in range(world)]
        tasks = [asyncio.ensure_future(run_rank(sim, channel, None, stop)) for sim in ranks]
        await asyncio.wait_for(asyncio.gather(*(sim.registered.wait() for sim in ranks)), 120)
        admin = optimizer_pb2_grpc.OptimizerStub(channel)
        while (await admin.GetJob(api.GetJobRequest(job_id=job))).state != api.LIVE:
            await asyncio.sleep(0.01)
        plan = plan_to_proto(Plan(1, world, {0: None}, ()))
        latencies = []
        for _ in range(count + 1):                  # the first is a warm-up
            start = time.perf_counter()
            record = await admin.SubmitPlan(api.SubmitPlanRequest(job_id=job, plan=plan), timeout=60)
            while not all(record.version in sim.acked for sim in ranks):
                await asyncio.sleep(0.0005)
            latencies.append(max(sim.acked[record.version] for sim in ranks) - start)
            # Untimed: the service has applied every ack (else it refuses the next plan).
            request = api.GetPlanRequest(job_id=job, version=record.version)
            while any(r.state != "acked_commit" for r in (await admin.GetPlan(request)).ranks):
                await asyncio.sleep(0.002)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    latencies = latencies[1:]
    return {"ranks": world, "commits": len(latencies), "p50_seconds": statistics.median(latencies),
            "p99_seconds": percentile(latencies, 0.99), "max_seconds": max(latencies), "seconds": latencies}


async def telemetry(address: str, world: int, per_rank: int) -> dict:
    job = f"telemetry-{world}"
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(address) as channel:
        ranks = [SimRank(job, r, world) for r in range(world)]
        tasks = [asyncio.ensure_future(run_rank(sim, channel, None, stop)) for sim in ranks]
        await asyncio.wait_for(asyncio.gather(*(sim.registered.wait() for sim in ranks)), 60)
        admin = optimizer_pb2_grpc.OptimizerStub(channel)
        ops = [link.OpTiming(seq=s, kind="all_reduce", bytes=4 << 20, group=list(range(min(world, 8))),
                             issue_seconds=0.01 * s, complete_seconds=0.01 * s + 0.005) for s in range(16)]
        start = time.perf_counter()
        for iteration in range(1, per_rank + 1):
            for sim in ranks:
                sim.send(link.RankMessage(telemetry=link.Telemetry(
                    job_id=job, iteration=iteration, duration_seconds=0.1, running_version=0, ops=ops)))
            if iteration % 50 == 0:
                await asyncio.sleep(0)
        while True:
            shown = await admin.GetJob(api.GetJobRequest(job_id=job))
            if all(r.iteration >= per_rank for r in shown.ranks):
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - start
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"ranks": world, "messages": world * per_rank, "seconds": elapsed,
            "messages_per_second": world * per_rank / elapsed, "ops_per_message": len(ops)}


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(7, 4))
    for store, rows in results["commit"].items():
        worlds = [row["ranks"] for row in rows]
        axis.plot(worlds, [row["p50_seconds"] * 1e3 for row in rows], "o-", label=f"{store} p50")
        axis.plot(worlds, [row["p99_seconds"] * 1e3 for row in rows], "s--", label=f"{store} p99")
    axis.axhline(100, color="grey", lw=0.8, ls=":")
    axis.axhline(1000, color="grey", lw=0.8, ls=":")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("ranks")
    axis.set_ylabel("commit latency (ms)")
    axis.set_title("two-phase commit through p2 serve: submit -> every rank acked Commit", fontsize=9)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--commits", type=int, default=20, help="timed commits per (store, ranks)")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "redis"], choices=["sqlite", "redis"])
    parser.add_argument("--telemetry-ranks", type=int, default=64)
    parser.add_argument("--telemetry-iterations", type=int, default=200)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                     "commit": {}, "telemetry": {}}
    for store_kind in args.stores:
        if store_kind == "redis" and redis_server_path() is None:
            print("redis: skipped (redis-server is not installed)", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory(prefix="p2-bench-commit-") as folder:
            redis = start_redis(Path(folder)) if store_kind == "redis" else None
            url = redis.url if redis else f"sqlite:///{folder}/service.db"
            process, address = start_service(Path(folder), url)
            try:
                rows = []
                for world in args.ranks:
                    count = args.commits if world <= 256 else max(5, args.commits // 4)
                    row = asyncio.run(commits(address, world, count))
                    rows.append(row)
                    print(f"{store_kind:>6} {world:>5} ranks: p50 {row['p50_seconds'] * 1e3:7.1f} ms  "
                          f"p99 {row['p99_seconds'] * 1e3:7.1f} ms  ({row['commits']} commits)", file=sys.stderr)
                results["commit"][store_kind] = rows
                rate = asyncio.run(telemetry(address, args.telemetry_ranks, args.telemetry_iterations))
                results["telemetry"][store_kind] = rate
                print(f"{store_kind:>6} telemetry from {rate['ranks']} ranks: {rate['messages_per_second']:,.0f} "
                      f"messages/s ({rate['messages']} messages in {rate['seconds']:.2f} s)", file=sys.stderr)
            finally:
                process.send_signal(signal.SIGTERM)
                process.wait(30)
                if redis:
                    redis.stop()
    (args.out / "commit.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, args.out / "commit.png")
    print("\nsummary (goal: p99 <= 100 ms at 64 ranks, <= 1 s at 1024)")
    for store_kind, rows in results["commit"].items():
        for row in rows:
            goal = 0.1 if row["ranks"] <= 64 else 1.0 if row["ranks"] >= 1024 else None
            verdict = "" if goal is None else ("  meets goal" if row["p99_seconds"] <= goal else "  MISSES goal")
            print(f"  {store_kind:>6} {row['ranks']:>5} ranks  p50 {row['p50_seconds'] * 1e3:7.1f} ms  "
                  f"p99 {row['p99_seconds'] * 1e3:7.1f} ms{verdict}")
    for store_kind, rate in results["telemetry"].items():
        print(f"  {store_kind:>6} telemetry: {rate['messages_per_second']:,.0f} messages/s from {rate['ranks']} ranks")
    print(f"written: {args.out / 'commit.json'}, {args.out / 'commit.png'}")


if __name__ == "__main__":
    main()
