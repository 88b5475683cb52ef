"""Plans enforced on the emulated 2×4 cluster: all-to-all splining and two-channel overlap.

Creates a cluster of 2 nodes × 4 ranks with two NICs per node (channel 0 on
``nic0``, channel 1 on ``nic1``), runs every rank with ``backend="p2enforcer"``
and, per case, installs a plan and times ``--iterations`` iterations (after
one warm-up; an iteration's time is the slowest rank's, from a common
barrier; the median is reported):

* ``a2a`` — an all_to_all_single of ``--mib`` MiB per rank as one motif, and
  splined into N/n motifs of n destinations (Syndicate §4.2.1), n = 4 and 2;
* ``ar`` — an all_reduce of the same size, ring-splined, alone on channel 0;
  ``a2a@1`` the unsplined all-to-all alone on channel 1;
* ``both, one channel`` — both ops, one after the other on channel 0;
* ``both, two channels`` — both ops with the same sequence numbers, all-reduce
  on channel 0 and all-to-all on channel 1, so they run at once;
* ``program`` — P²'s hierarchical all-reduce (``--program-mib`` MiB) run by the
  bare executor and, as a plan (:mod:`optimizer_service.syndicate.program_motifs`), through the
  enforcer, interleaved.

The cluster's fabric is ``--fabric`` (lossless, the default, or lossy); the
JSON and the summary give it and the NICs' queue drops per iteration (every
iteration of every case, warm-up included).

Writes ``enforcer_cluster.json`` and ``.png`` under ``--out`` and prints a
summary. Needs CAP_NET_ADMIN (root).

    .venv/bin/python benchmarks/enforcer_cluster.py [--mib 4] [--iterations 5] [--fabric lossy]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
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

NAME = "enforcer-bench"


# ----------------------------------------------------------------- rank side
def _plans(world: int, elements: int) -> dict[str, str]:
    from optimizer_service.plan.collective import Collective
    from optimizer_service.plan.motif import comm_op, on_channel
    from optimizer_service.plan.op_plan import OpKey, OpPlan
    from optimizer_service.plan.plan import Plan
    from optimizer_service.syndicate.transforms import spline_all_to_all, spline_ring

    group = tuple(range(world))
    a2a_key = OpKey(0, "all_to_all", elements * 4, group)
    whole = comm_op(Collective.ALL_TO_ALL, range(world), elements // world)
    ring = spline_ring(comm_op(Collective.ALL_REDUCE, range(world), elements))
    channels = {0: None, 1: "nic1"}

    def plan(*ops: OpPlan) -> str:
        return Plan(version=1, world_size=world, channels=channels, ops=ops).to_json()

    ar_first = OpPlan.of(OpKey(0, "all_reduce", elements * 4, group), ring)
    a2a_second = OpPlan.of(OpKey(1, "all_to_all", elements * 4, group), whole, base=max(ar_first.order) + 1)
    a2a_parallel = OpPlan.of(OpKey(1, "all_to_all", elements * 4, group), on_channel(whole, 1))
    return {
        "a2a": plan(OpPlan.of(a2a_key, whole)),
        "a2a splined n=4": plan(OpPlan.of(a2a_key, spline_all_to_all(whole, 4))),
        "a2a splined n=2": plan(OpPlan.of(a2a_key, spline_all_to_all(whole, 2))),
        "ar": plan(ar_first),
        "a2a@1": plan(OpPlan.of(a2a_key, on_channel(whole, 1))),
        "both, one channel": plan(ar_first, a2a_second),
        "both, two channels": plan(ar_first, a2a_parallel),
    }


def rank_side(out: Path, mib: float, iterations: int, program_mib: float) -> None:
    import torch
    import torch.distributed as dist

    import enforcer

    if os.environ.get("P2_BENCH_STACKS"):       # debugging a hang: every thread's stack after N s
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["P2_BENCH_STACKS"]), exit=True)
    dist.init_process_group("p2enforcer")
    world, rank = dist.get_world_size(), dist.get_rank()
    elements = int(mib * 2**20 / 4) // world * world
    plain = dist.new_group(backend="gloo")
    results = {}
    for case, text in _plans(world, elements).items():
        enforcer.install_plan(text)
        ops = [op["kind"] for op in json.loads(text)["ops"]]
        times = []
        for iteration in range(iterations + 1):
            ar = torch.ones(elements)
            a2a_in, a2a_out = torch.full((elements,), float(rank)), torch.empty(elements)
            dist.barrier(group=plain)
            start = time.perf_counter()
            works = []
            for kind in ops:
                if kind == "all_reduce":
                    works.append(dist.all_reduce(ar, async_op=True))
                else:
                    works.append(dist.all_to_all_single(a2a_out, a2a_in, async_op=True))
            for work in works:
                work.wait()
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            enforcer.step()
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=plain)
            if iteration:
                times.append(elapsed.item())
            if "all_reduce" in ops:
                assert torch.all(ar == world), f"{case}: wrong all_reduce result"
            if "all_to_all" in ops:
                block = elements // world
                expected = torch.arange(world, dtype=torch.float32).repeat_interleave(block)
                assert torch.equal(a2a_out, expected), f"{case}: wrong all_to_all result"
        enforcer.remove_plan()
        results[case] = times
        if rank == 0:
            print(f"{case:>20}: {statistics.median(times) * 1e3:8.1f} ms", flush=True)
    results.update(_program_cases(world, int(program_mib * 2**20 / 4) // world * world, iterations, plain))
    if rank == 0:
        out.write_text(json.dumps({"world": world, "bytes_per_op": elements * 4, "times": results}, indent=1))
    dist.destroy_process_group()


#: P²'s hierarchical AllReduce for 2 nodes x 4 ranks (the fastest program of
#: benchmarks/reduce.py for [8] on 2x4): ReduceScatter in the node, AllReduce of
#: a quarter across the nodes, AllGather in the node.
PROGRAM = ("ReduceScatter 1 {0,1,2,3} {4,5,6,7}; AllReduce 1/4 {0,4} {1,5} {2,6} {3,7}; "
           "AllGather 1/4 {0,1,2,3} {4,5,6,7}")


def _program_cases(world: int, elements: int, iterations: int, plain) -> dict[str, list[float]]:
    """The P² program run by the bare executor and as an enforced all_reduce plan, interleaved."""
    import torch
    import torch.distributed as dist

    import enforcer
    from enforcer.comm.subgroups import GroupCache
    from enforcer.programs.executor import ProgramExecutor
    from optimizer_service.plan.lowered import LoweredProgram
    from optimizer_service.plan.op_plan import OpKey, OpPlan
    from optimizer_service.plan.plan import Plan
    from optimizer_service.syndicate.program_motifs import program_motifs

    program = LoweredProgram.parse(PROGRAM)
    executor = ProgramExecutor(GroupCache(backend="gloo"))
    executor.prepare([program])
    op = OpPlan.of(OpKey(0, "all_reduce", elements * 4, tuple(range(world))),
                   program_motifs(program, world, elements))
    enforcer.install_plan(Plan(version=1, world_size=world, channels={0: None}, ops=(op,)).to_json())
    times: dict[str, list[float]] = {"program, bare executor": [], "program, through the enforcer": []}
    for iteration in range(iterations + 1):
        for case in times:
            tensor = torch.ones(elements)
            dist.barrier(group=plain)
            start = time.perf_counter()
            if case.endswith("executor"):
                executor.run(program, tensor)
            else:
                dist.all_reduce(tensor)
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            if not case.endswith("executor"):
                enforcer.step()
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=plain)
            assert torch.all(tensor == world), f"{case}: wrong result"
            if iteration:
                times[case].append(elapsed.item())
    enforcer.remove_plan()
    if dist.get_rank() == 0:
        for case, values in times.items():
            print(f"{case:>20}: {statistics.median(values) * 1e3:8.1f} ms", flush=True)
    return times


# --------------------------------------------------------------- orchestrator
def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(summary["median_seconds"])
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.bar(range(len(cases)), [summary["median_seconds"][c] * 1e3 for c in cases],
           color=["C0", "C0", "C0", "C1", "C1", "C2", "C3"][:len(cases)])
    ax.set_xticks(range(len(cases)), cases, rotation=20, ha="right")
    ax.set_ylabel("iteration, median ms (slowest rank)")
    ax.set_title(f"p2enforcer plans on the emulated 2×4 cluster ({summary['fabric']} fabric, "
                 f"{summary['nic_drops']['per_iteration']:.1f} drops/it), {summary['bytes_per_op'] / 2**20:.0f} MiB per op")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=4.0, help="MiB per op per rank")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--program-mib", type=float, default=16.0, help="MiB of the P² program's all_reduce")
    parser.add_argument("--nic", default="200Mbit/s")
    parser.add_argument("--fabric", default=DEFAULT_FABRIC, help=FABRIC_HELP)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--rank-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank_side:
        rank_side(args.rank_side, args.mib, args.iterations, args.program_mib)
        return 0
    if args.mib <= 0 or args.iterations < 1:
        print("enforcer_cluster: --mib must be > 0 and --iterations >= 1", file=sys.stderr)
        return 2
    if problem := fabric_problem("enforcer_cluster", args.fabric):
        print(problem, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "times.json"
        with emulated_cluster(NAME, args.nic, args.fabric):
            before = nic_drop_total(NAME)
            p2("cluster", "run", "--name", NAME, "--timeout", "1500", "--", sys.executable, __file__,
               "--rank-side", str(raw), "--mib", str(args.mib), "--iterations", str(args.iterations),
               "--program-mib", str(args.program_mib))
            drops = nic_drop_total(NAME) - before
        measured = json.loads(raw.read_text())
    medians = {case: statistics.median(times) for case, times in measured["times"].items()}
    # Every case ran a warm-up iteration and the timed ones.
    iterations = len(measured["times"]) * (args.iterations + 1)
    summary = {
        "benchmark": "enforcer_cluster", "cluster": "2x4", "nic": args.nic, "fabric": args.fabric,
        "nic_drops": drop_record(drops, iterations), "iterations": args.iterations,
        "bytes_per_op": measured["bytes_per_op"], "median_seconds": medians, "times": measured["times"],
        "splining_speedup": {n: medians["a2a"] / medians[f"a2a splined n={n}"] for n in (4, 2)},
        "program_enforcer_over_executor": medians["program, through the enforcer"]
        / medians["program, bare executor"],
        "overlap": {
            "sum_alone_seconds": medians["ar"] + medians["a2a@1"],
            "two_channels_seconds": medians["both, two channels"],
            "one_channel_seconds": medians["both, one channel"],
            "two_channels_over_sum": medians["both, two channels"] / (medians["ar"] + medians["a2a@1"]),
        },
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "enforcer_cluster.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, args.out / "enforcer_cluster.png")
    print(f"\n{summary['bytes_per_op'] / 2**20:.1f} MiB per op, NIC {args.nic}, {args.fabric} fabric, "
          f"median of {args.iterations}; NIC queue drops {drops} ({summary['nic_drops']['per_iteration']:.2f} per "
          f"iteration)")
    for case, seconds in medians.items():
        print(f"  {case:>20}: {seconds * 1e3:8.1f} ms")
    print(f"  all-to-all splining speedup: n=4 {summary['splining_speedup'][4]:.2f}x, "
          f"n=2 {summary['splining_speedup'][2]:.2f}x")
    print(f"  P² program through the enforcer / bare executor: {summary['program_enforcer_over_executor']:.3f}")
    overlap = summary["overlap"]
    print(f"  two channels: {overlap['two_channels_seconds'] * 1e3:.1f} ms vs {overlap['sum_alone_seconds'] * 1e3:.1f} ms"
          f" for the two alone ({overlap['two_channels_over_sum']:.2f} of the sum); one channel "
          f"{overlap['one_channel_seconds'] * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
