"""Commit latency and telemetry ingestion of the optimizer service.

A real ``p2 serve`` process (SQLite, or a real ``redis-server`` started here)
and two kinds of participants:

* **real ranks** (``--real-ranks``, 8 by default): a torch world of spawned
  processes training through ``dist.init_process_group("p2enforcer")`` with
  ``P2_SERVICE`` set — the real enforcer link, plans validated and *built*
  (their channels' gloo subgroups made) before the rank votes. Each plan is a
  ring all-reduce segmented over two channels. Latency: from the submit call's
  start to the service's ``acknowledged`` event (every rank acknowledged the
  Commit), on one clock.
* **in-process participants** at 64, 256 and 1024 ranks
  (tests/support/participants.py: real gRPC streams, the real participant
  decisions, plans "built" at once). Latency: from the submit call's start to
  the last rank's Commit acknowledgement.

Both include every durable write and both rounds of messages. Plans are
submitted one after another. Then 64 ranks send telemetry as fast as they
can; the ingestion rate is the messages the service had applied (every rank's
reported iteration visible through ``GetJob``) per second.

Goal (issue 15): p99 <= 100 ms at 64 ranks and <= 1 s at 1024.

    .venv/bin/python benchmarks/commit.py [--real-ranks 8] [--ranks 64 256 1024] [--commits 20]
        [--stores sqlite redis]

Writes ``commit.json`` and ``commit.png`` under ``--out`` (benchmarks/results)
and prints a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deploy.local_world import run_world  # noqa: E402
from optimizer_service.plan import Plan  # noqa: E402
from optimizer_service.plan.collective import Collective  # noqa: E402
from optimizer_service.plan.motif import comm_op, rewrite  # noqa: E402
from optimizer_service.plan.op_plan import OpKey, OpPlan  # noqa: E402
from optimizer_service.plan.proto_codec import plan_to_proto  # noqa: E402
from optimizer_service.syndicate.transforms import segment, spline_ring  # noqa: E402
from p2.v1 import enforcer_link_pb2 as link  # noqa: E402
from p2.v1 import optimizer_pb2 as api  # noqa: E402
from p2.v1 import optimizer_pb2_grpc  # noqa: E402
from tests.support.participants import SimRank, run_rank  # noqa: E402
from tests.support.redis_server import redis_server_path, start_redis  # noqa: E402

REAL_NUMEL = 16384          # the real ranks' all-reduce: 64 KiB of float32
REAL_SWITCH_EVERY = 4


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


def ring_plan(world: int) -> Plan:
    """A ring all-reduce of the real ranks' tensor in 8 segments, alternating over two channels."""
    ring = rewrite(segment(comm_op(Collective.ALL_REDUCE, range(world), REAL_NUMEL), REAL_NUMEL // 8), spline_ring)
    counter = iter(range(10**9))
    spread = rewrite(ring, lambda motif: dataclasses.replace(motif, channel=next(counter) % 2))
    op = OpPlan.of(OpKey(0, "all_reduce", REAL_NUMEL * 4, tuple(range(world)), 0), spread)
    return Plan(1, world, {0: None, 1: None}, (op,))


def real_rank(last_version: int, pause: float) -> dict:
    """One rank of the real job: an all-reduce through p2enforcer per iteration,
    until every rank runs ``last_version`` (decided by a MIN on a plain group)."""
    import torch
    import torch.distributed as dist

    import enforcer

    plain = dist.new_group(backend="gloo")
    link = enforcer.group_of().link
    data, iteration = torch.ones(REAL_NUMEL), 0
    while iteration < 100_000:
        dist.all_reduce(data)
        data.fill_(1.0)
        enforcer.step()
        iteration += 1
        time.sleep(pause)
        if iteration % REAL_SWITCH_EVERY == 1:
            done = torch.tensor([1 if link.session.running >= last_version else 0])
            dist.all_reduce(done, op=dist.ReduceOp.MIN, group=plain)
            if done.item():
                break
    return {"iterations": iteration, "switches": len(enforcer.trace()["switches"]), "running": link.session.running}


async def real_commits(address: str, world: int, count: int, pause: float) -> dict:
    job = f"bench-real-{world}"
    env = {"P2_SERVICE": address, "P2_JOB": job, "P2_SWITCH_EVERY": str(REAL_SWITCH_EVERY), "P2_LOG_LEVEL": "WARNING"}
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["ranks"] = run_world(world, real_rank, count + 1, pause, backend="p2enforcer", env=env,
                                         timeout=600)
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["error"] = error

    world_thread = threading.Thread(target=run, daemon=True)
    world_thread.start()
    async with grpc.aio.insecure_channel(address) as channel:
        admin = optimizer_pb2_grpc.OptimizerStub(channel)
        deadline = time.monotonic() + 300
        while True:
            try:
                if (await admin.GetJob(api.GetJobRequest(job_id=job))).state == api.LIVE:
                    break
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.NOT_FOUND:
                    raise
            if "error" in outcome or time.monotonic() > deadline:
                raise SystemExit(f"the real ranks did not register: {outcome.get('error', 'timeout')}")
            await asyncio.sleep(0.05)
        events = admin.Watch(api.WatchRequest(job_id=job))
        plan = plan_to_proto(ring_plan(world))
        latencies, phases = [], []
        for _ in range(count + 1):                  # the first is a warm-up
            start = time.time()
            record = await admin.SubmitPlan(api.SubmitPlanRequest(job_id=job, plan=plan), timeout=120)
            seen: dict[str, float] = {}
            async for event in events:
                if event.version != record.version:
                    continue
                seen[event.kind] = event.unix         # "voted": the last vote's time
                if event.kind == "abort":
                    raise SystemExit(f"plan v{record.version} aborted: {event.message}")
                if event.kind == "acknowledged":
                    latencies.append(event.unix - start)
                    phases.append({"prepare_persisted_and_sent": seen["prepared"] - start,
                                   "ranks_built_and_voted": seen["voted"] - seen["prepared"],
                                   "decision_persisted_and_sent": seen["commit"] - seen["voted"],
                                   "every_rank_acked": seen["acknowledged"] - seen["commit"]})
                    break
        events.cancel()
    await asyncio.get_running_loop().run_in_executor(None, world_thread.join, 600)
    if "error" in outcome:
        raise SystemExit(f"the real ranks failed: {outcome['error']}")
    switches = sorted({rank["switches"] for rank in outcome["ranks"]})
    latencies = latencies[1:]
    return {"ranks": world, "real": True, "commits": len(latencies), "p50_seconds": statistics.median(latencies),
            "p99_seconds": percentile(latencies, 0.99), "max_seconds": max(latencies), "seconds": latencies,
            "switches_per_rank": switches, "iterations": max(rank["iterations"] for rank in outcome["ranks"]),
            "phases_seconds": phases[1:]}


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
    for index, (store, all_rows) in enumerate(results["commit"].items()):
        colour = f"C{index}"
        rows = [row for row in all_rows if not row.get("real")]
        worlds = [row["ranks"] for row in rows]
        axis.plot(worlds, [row["p50_seconds"] * 1e3 for row in rows], "o-", color=colour, label=f"{store} p50")
        axis.plot(worlds, [row["p99_seconds"] * 1e3 for row in rows], "s--", color=colour, label=f"{store} p99")
        for row in all_rows:
            if row.get("real"):
                axis.plot([row["ranks"]] * 2, [row["p50_seconds"] * 1e3, row["p99_seconds"] * 1e3], "^:",
                          color=colour, ms=8, label=f"{store} real p2enforcer ranks (p50, p99)")
    axis.axhline(100, color="grey", lw=0.8, ls=":")
    axis.axhline(1000, color="grey", lw=0.8, ls=":")
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("ranks")
    axis.set_ylabel("commit latency (ms)")
    axis.set_title("two-phase commit through p2 serve: submit -> every rank acked Commit\n"
                   "(triangles: real torch ranks that build each plan's subgroups before voting)", fontsize=9)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--real-ranks", type=int, default=8, help="ranks of the real p2enforcer job (0: none)")
    parser.add_argument("--real-pause", type=float, default=0.005, help="seconds each real iteration sleeps")
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
                if args.real_ranks:
                    row = asyncio.run(real_commits(address, args.real_ranks, args.commits, args.real_pause))
                    rows.append(row)
                    print(f"{store_kind:>6} {row['ranks']:>5} real ranks: p50 {row['p50_seconds'] * 1e3:7.1f} ms  "
                          f"p99 {row['p99_seconds'] * 1e3:7.1f} ms  ({row['commits']} commits, every rank "
                          f"switched {row['switches_per_rank']} times)", file=sys.stderr)
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
            goal = None if row.get("real") else 0.1 if row["ranks"] <= 64 else 1.0 if row["ranks"] >= 1024 else None
            verdict = "" if goal is None else ("  meets goal" if row["p99_seconds"] <= goal else "  MISSES goal")
            kind = "real ranks" if row.get("real") else "ranks"
            print(f"  {store_kind:>6} {row['ranks']:>5} {kind:<10}  p50 {row['p50_seconds'] * 1e3:7.1f} ms  "
                  f"p99 {row['p99_seconds'] * 1e3:7.1f} ms{verdict}")
            if row.get("phases_seconds"):
                medians = {name: statistics.median(phase[name] for phase in row["phases_seconds"])
                           for name in row["phases_seconds"][0]}
                print("                       median phases: " + ", ".join(
                    f"{name.replace('_', ' ')} {seconds * 1e3:.1f} ms" for name, seconds in medians.items()))
    for store_kind, rate in results["telemetry"].items():
        print(f"  {store_kind:>6} telemetry: {rate['messages_per_second']:,.0f} messages/s from {rate['ranks']} ranks")
    print(f"written: {args.out / 'commit.json'}, {args.out / 'commit.png'}")


if __name__ == "__main__":
    main()
