"""UCC against gloo on the emulated 2×4 cluster: collectives, and a plan with one channel on each.

Creates a cluster of 2 nodes × 4 ranks with two NICs per node (``--nic`` each)
and runs every rank with ``backend="p2enforcer"``. Two parts:

* **Collectives.** Beside the world, each rank makes two bare inner backends
  over all 8 ranks, both bound to ``nic0``: gloo, and our UCC backend
  (``cpp_ext/ucc/``, :mod:`enforcer.comm.ucc`). For all_reduce, all_gather
  (into a tensor), reduce_scatter (from a tensor) and all_to_all (single) at
  every ``--sizes`` (bytes per rank's buffer: the all_reduce tensor, the
  gathered output, the scattered input, the all-to-all input) it times
  ``--iterations`` ops on each, alternating the backend every iteration so
  drift hits both alike (after one warm-up each). An op's time is the slowest
  rank's, from a common barrier; the median is reported. Results are checked.
* **Two channels.** An all_reduce of ``--plan-mib`` MiB under a plan that cuts
  it in two halves, each ring-splined, half 0 on channel 0 (``nic0``) and half 1
  on channel 1 (``nic1``), run at once — once with both channels on gloo and
  once with channel 1 on UCC (``P2_CHANNEL_BACKENDS=gloo,ucc``); and the whole
  all_reduce passed through to gloo, for scale. Each in its own cluster run
  (the channel backends are a per-process setting).

The cluster's fabric is ``--fabric`` (lossless, the default, or lossy); the
JSON and the summary give it and, per part, the NICs' queue drops per op
(every op the part ran, warm-up included).

Writes ``ucc_cluster.json`` and ``.png`` under ``--out`` and prints a
summary. Needs CAP_NET_ADMIN (root) and the built UCC extension.

    .venv/bin/python benchmarks/ucc_cluster.py [--sizes 65536 1048576 16777216 67108864] [--iterations 5]
        [--fabric lossy]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.p2_command import (  # noqa: E402
    FABRIC_HELP,
    drop_record,
    emulated_cluster,
    fabric_problem,
    nic_drop_total,
    p2,
)
from deploy.emulated import DEFAULT_FABRIC  # noqa: E402

NAME = "ucc-bench"
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
SIZES = (64 * 2**10, 2**20, 16 * 2**20, 64 * 2**20)


# ----------------------------------------------------------------- rank side
def _run_op(backend, op: str, elements: int, world: int, rank: int):
    """One op of ``elements`` 4-byte elements per rank's buffer; returns a check of its result."""
    import torch
    from torch._C import _distributed_c10d as c10d

    if op == "all_reduce":
        tensor = torch.full((elements,), float(rank + 1))
        backend.allreduce([tensor]).wait()
        return bool(torch.all(tensor == world * (world + 1) / 2))
    if op == "all_gather":
        part = elements // world
        output = torch.empty(part * world)
        backend._allgather_base(output, torch.full((part,), float(rank)), c10d.AllgatherOptions()).wait()
        return bool(torch.equal(output, torch.arange(world, dtype=torch.float32).repeat_interleave(part)))
    if op == "reduce_scatter":
        part = elements // world
        output = torch.empty(part)
        backend._reduce_scatter_base(output, torch.ones(part * world), c10d.ReduceScatterOptions()).wait()
        return bool(torch.all(output == world))
    block = elements // world
    output = torch.empty(block * world)
    backend.alltoall_base(output, torch.full((block * world,), float(rank)), [], [], c10d.AllToAllOptions()).wait()
    return bool(torch.equal(output, torch.arange(world, dtype=torch.float32).repeat_interleave(block)))


def _collectives(sizes: list[int], iterations: int, plain) -> dict:
    import torch
    import torch.distributed as dist

    from enforcer.comm import inner

    world, rank = dist.get_world_size(), dist.get_rank()
    store = dist.distributed_c10d._get_default_store()
    timeout = timedelta(minutes=5)
    backends = {name: inner.create(name, dist.PrefixStore(f"bench/{name}/", store), rank, world, timeout,
                                   interface="nic0") for name in ("gloo", "ucc")}
    times: dict = {}
    for op in OPS:
        for nbytes in sizes:
            elements = max(world, nbytes // 4 // world * world)
            samples = {name: [] for name in backends}
            for iteration in range(iterations + 1):
                order = list(backends) if iteration % 2 == 0 else list(reversed(backends))
                for name in order:
                    dist.barrier(group=plain)
                    start = time.perf_counter()
                    ok = _run_op(backends[name], op, elements, world, rank)
                    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
                    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=plain)
                    if not ok:
                        raise AssertionError(f"{name} {op} of {nbytes} bytes: wrong result on rank {rank}")
                    if iteration:
                        samples[name].append(elapsed.item())
            times[f"{op}/{nbytes}"] = samples
            if rank == 0:
                print(f"{op:>15} {nbytes / 2**20:8.3f} MiB: gloo {statistics.median(samples['gloo']) * 1e3:8.2f} ms, "
                      f"ucc {statistics.median(samples['ucc']) * 1e3:8.2f} ms", flush=True)
    for backend in backends.values():
        backend.shutdown()
    return times


def _two_channel_plan(world: int, elements: int) -> str:
    from optimizer_service.plan.collective import Collective
    from optimizer_service.plan.motif import Par, comm_op, on_channel
    from optimizer_service.plan.op_plan import OpKey, OpPlan
    from optimizer_service.plan.plan import Plan
    from optimizer_service.syndicate.transforms import segment, spline_ring

    halves = segment(comm_op(Collective.ALL_REDUCE, range(world), elements), -(-elements // 2)).parts
    plan = Par(tuple(on_channel(spline_ring(half), channel) for channel, half in enumerate(halves)))
    op = OpPlan.of(OpKey(0, "all_reduce", elements * 4, tuple(range(world))), plan)
    return Plan(version=1, world_size=world, channels={0: None, 1: None}, ops=(op,)).to_json()


def _planned(plan_mib: float, iterations: int, plain) -> dict:
    import torch
    import torch.distributed as dist

    import enforcer

    world, rank = dist.get_world_size(), dist.get_rank()
    elements = int(plan_mib * 2**20 / 4) // world * world
    times = {}
    for case in ("passthrough", "plan"):
        if case == "plan":
            enforcer.install_plan(_two_channel_plan(world, elements))
        samples = []
        for iteration in range(iterations + 1):
            tensor = torch.full((elements,), float(rank + 1))
            dist.barrier(group=plain)
            start = time.perf_counter()
            dist.all_reduce(tensor)
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            enforcer.step()
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=plain)
            if not torch.all(tensor == world * (world + 1) / 2):
                raise AssertionError(f"{case}: wrong all_reduce result on rank {rank}")
            if iteration:
                samples.append(elapsed.item())
        times[case] = samples
    enforcer.remove_plan()
    return times


def rank_side(out: Path, part: str, sizes: list[int], iterations: int, plan_mib: float) -> None:
    import torch.distributed as dist

    dist.init_process_group("p2enforcer")
    plain = dist.new_group(backend="gloo")
    if part == "collectives":
        result = _collectives(sizes, iterations, plain)
    else:
        result = _planned(plan_mib, iterations, plain)
    if dist.get_rank() == 0:
        out.write_text(json.dumps(result))
    dist.destroy_process_group()


# ------------------------------------------------------------------- driver
def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(OPS) + 1, figsize=(4 * (len(OPS) + 1), 3.6))
    for ax, op in zip(axes, OPS):
        rows = [r for r in summary["collectives"] if r["op"] == op]
        for name in ("gloo", "ucc"):
            ax.plot([r["bytes"] for r in rows], [r[f"{name}_seconds"] * 1e3 for r in rows], "o-", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("median ms (slowest rank)")
        ax.set_title(op)
        ax.legend()
    ax = axes[-1]
    cases = summary["two_channels"]["median_seconds"]
    ax.bar(range(len(cases)), [v * 1e3 for v in cases.values()], color=["C7", "C0", "C1"][:len(cases)])
    ax.set_xticks(range(len(cases)), list(cases), rotation=15, ha="right")
    ax.set_ylabel("all_reduce, median ms")
    ax.set_title(f"two-channel plan, {summary['two_channels']['mib']:g} MiB")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _cluster_run(raw: Path, args, part: str, env: dict[str, str]) -> tuple[dict, int]:
    """One part's times, and the packets the NICs' queues dropped while it ran."""
    os.environ.update(env)
    before = nic_drop_total(NAME)
    try:
        p2("cluster", "run", "--name", NAME, "--timeout", "1500", "--", sys.executable, __file__,
           "--rank-side", str(raw), "--part", part, "--sizes", *map(str, args.sizes),
           "--iterations", str(args.iterations), "--plan-mib", str(args.plan_mib))
    finally:
        for key in env:
            os.environ.pop(key, None)
    return json.loads(raw.read_text()), nic_drop_total(NAME) - before


def _ops(times: dict) -> int:
    """Ops a part ran: each sample list is the timed ones of one case, after one warm-up."""
    return sum(len(samples) + 1 for case in times.values()
               for samples in (case.values() if isinstance(case, dict) else [case]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="bytes per rank's buffer")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--plan-mib", type=float, default=32.0, help="MiB of the two-channel plan's all_reduce")
    parser.add_argument("--nic", default="1Gbit/s", help="rate of each NIC (tc tbf)")
    parser.add_argument("--fabric", default=DEFAULT_FABRIC, help=FABRIC_HELP)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--rank-side", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=("collectives", "plan"), default="collectives", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_side:
        rank_side(args.rank_side, args.part, args.sizes, args.iterations, args.plan_mib)
        return 0
    if args.iterations < 1 or args.plan_mib <= 0 or any(size < 64 for size in args.sizes):
        print("ucc_cluster: --iterations must be >= 1, --plan-mib > 0 and every size >= 64 bytes", file=sys.stderr)
        return 2
    if problem := fabric_problem("ucc_cluster", args.fabric):
        print(problem, file=sys.stderr)
        return 2
    from enforcer.comm import ucc
    if not ucc.available():
        print(f"ucc_cluster: {ucc.why_unavailable()}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "times.json"
        with emulated_cluster(NAME, args.nic, args.fabric):
            collectives, collective_drops = _cluster_run(raw, args, "collectives", {})
            both_gloo, gloo_drops = _cluster_run(raw, args, "plan", {"P2_CHANNEL_BACKENDS": "gloo,gloo"})
            with_ucc, ucc_drops = _cluster_run(raw, args, "plan", {"P2_CHANNEL_BACKENDS": "gloo,ucc"})
    drops = {"collectives": drop_record(collective_drops, _ops(collectives)),
             "plan, gloo + gloo": drop_record(gloo_drops, _ops(both_gloo)),
             "plan, gloo + ucc": drop_record(ucc_drops, _ops(with_ucc))}
    rows = []
    for key, samples in collectives.items():
        op, nbytes = key.split("/")
        gloo, ucc_ = statistics.median(samples["gloo"]), statistics.median(samples["ucc"])
        rows.append({"op": op, "bytes": int(nbytes), "gloo_seconds": gloo, "ucc_seconds": ucc_,
                     "gloo_over_ucc": gloo / ucc_})
    medians = {"gloo passthrough": statistics.median(both_gloo["passthrough"] + with_ucc["passthrough"]),
               "plan, gloo + gloo": statistics.median(both_gloo["plan"]),
               "plan, gloo + ucc": statistics.median(with_ucc["plan"])}
    summary = {"benchmark": "ucc_cluster", "cluster": "2x4", "nic": args.nic, "fabric": args.fabric,
               "nic_drops": drops, "iterations": args.iterations, "collectives": rows,
               "two_channels": {"mib": args.plan_mib, "median_seconds": medians,
                                "times": {"gloo,gloo": both_gloo, "gloo,ucc": with_ucc},
                                "gloo_gloo_over_gloo_ucc": medians["plan, gloo + gloo"] / medians["plan, gloo + ucc"]}}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ucc_cluster.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, args.out / "ucc_cluster.png")
    print(f"\nNIC {args.nic}, {args.fabric} fabric, median of {args.iterations} (slowest rank); NIC queue drops "
          + ", ".join(f"{part} {d['total']} ({d['per_iteration']:.2f} per op)" for part, d in drops.items()))
    print(f"{'op':>15} {'bytes':>10} {'gloo':>10} {'ucc':>10} {'gloo/ucc':>9}")
    for r in rows:
        print(f"{r['op']:>15} {r['bytes']:>10} {r['gloo_seconds'] * 1e3:>8.2f}ms {r['ucc_seconds'] * 1e3:>8.2f}ms "
              f"{r['gloo_over_ucc']:>9.2f}")
    for case, seconds in medians.items():
        print(f"  {case:>18}: {seconds * 1e3:8.1f} ms")
    print(f"  two-channel plan, gloo+gloo / gloo+ucc: {summary['two_channels']['gloo_gloo_over_gloo_ucc']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
