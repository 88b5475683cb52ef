"""Measured reductions on the emulated cluster: synthesized programs vs the flat
AllReduce, placement spread, and the simulator's accuracy after calibration.

For each cluster shape (default: 2 nodes x 4 ranks and 4 nodes x 2 ranks, NIC
200 Mbit/s) it creates the cluster, runs ``p2 calibrate``, then
``p2 bench reduce`` for every (axes, reduce, bytes) configuration, and removes
the cluster. Accuracy is pooled over every measured candidate of every
configuration. The clusters' fabric is ``--fabric`` (lossless, the default, or
lossy); the JSON and the summary give it and each configuration's NIC queue
drops per measured run (``p2 bench reduce``'s ``nic_drops``). Writes
``reduce.json`` and ``reduce.png`` under ``--out`` and prints a summary. Needs
CAP_NET_ADMIN (root).

    .venv/bin/python benchmarks/reduce.py [--out benchmarks/results] [--top 0] [--repeat 3] [--fabric lossy]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.p2_command import FABRIC_HELP, fabric_problem  # noqa: E402
from deploy.emulated import DEFAULT_FABRIC  # noqa: E402
from optimizer_service.cli.bench import measured_candidates  # noqa: E402
from optimizer_service.hardware.accuracy import evaluate  # noqa: E402

MiB = 2**20

# (nodes, ranks per node) -> [(axes, reduce, bytes per rank, programs per placement or None for --top)].
# At 16 MiB every synthesized program is measured by default (--top 0), so the simulator's
# top-k agreement is judged against candidates it ranked low too, not only its own favourites.
CONFIGURATIONS = {
    (2, 4): [((8,), (0,), 16 * MiB, None), ((8,), (0,), 64 * MiB, 8),
             ((2, 4), (0,), 16 * MiB, None), ((2, 4), (1,), 16 * MiB, None)],
    (4, 2): [((8,), (0,), 16 * MiB, None), ((2, 4), (0,), 16 * MiB, None), ((2, 4), (1,), 16 * MiB, None)],
}


def p2(*args: str, env: dict[str, str]) -> None:
    command = [sys.executable, "-m", "optimizer_service.cli", *args]
    print("$ p2 " + " ".join(args), flush=True)
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stderr[-4000:])
        raise SystemExit(f"p2 {' '.join(args)} failed with exit code {result.returncode}")
    if result.stdout.strip():
        print(result.stdout.rstrip(), flush=True)


def run_cluster(shape: tuple[int, int], configs, args, state: Path, env: dict[str, str]) -> dict:
    nodes, per_node = shape
    name = f"bench{nodes}x{per_node}"
    work = Path(tempfile.mkdtemp(prefix=f"p2-{name}-"))
    p2("cluster", "down", "--name", name, env=env)
    p2("cluster", "up", "--name", name, "--nodes", str(nodes), "--per-node", str(per_node), "--nic", args.nic,
       "--fabric", args.fabric, env=env)
    try:
        probe = ["--probe-bytes", args.probe_bytes] if args.probe_bytes else []
        p2("calibrate", "--cluster", name, "--repeat", str(args.repeat), "--json", str(work / "calibrate.json"),
           *probe, env=env)
        benches = []
        for axes, reduce, nbytes, top in configs:
            out = work / f"bench-{len(benches)}.json"
            p2("bench", "reduce", "--cluster", name, "--axes", ",".join(map(str, axes)),
               "--reduce", ",".join(map(str, reduce)), "--bytes", str(nbytes),
               "--top", str(args.top if top is None else top),
               "--repeat", str(args.repeat), "--json", str(out), env=env)
            benches.append(json.loads(out.read_text()))
        calibration = json.loads((work / "calibrate.json").read_text())
    finally:
        p2("cluster", "down", "--name", name, env=env)
    return {"nodes": nodes, "per_node": per_node, "nic": args.nic, "fabric": args.fabric,
            "calibration": {"links": calibration["links"]}, "benches": benches}


def pooled_accuracy(clusters: list[dict]):
    candidates, first = [], 0
    for cluster in clusters:
        for bench in cluster["benches"]:
            candidates += measured_candidates(bench["placements"], first)
            first += len(bench["placements"])
    return evaluate(candidates)


def summarize(clusters: list[dict]) -> dict:
    rows = []
    for cluster in clusters:
        for bench in cluster["benches"]:
            s = bench["summary"]
            rows.append({"cluster": f"{cluster['nodes']}x{cluster['per_node']}", "axes": bench["axes"],
                         "reduce": bench["reduce"], "bytes": bench["bytes"],
                         "best_speedup_crossing": s["best_speedup_crossing"],
                         "mean_best_speedup_crossing": s["mean_best_speedup_crossing"],
                         "flat_spread": s["flat_spread"], "best_spread": s["best_spread"],
                         "candidates": bench["accuracy"]["candidates"],
                         "nic_drops_per_run": bench["nic_drops"]["per_run"],
                         "mape": bench["accuracy"]["mape"], "top1": bench["accuracy"]["top1"],
                         "top5": bench["accuracy"]["top5"]})
    crossing = [max(p["speedup"] for p in e["programs"]) for c in clusters for b in c["benches"]
                for e in b["placements"] if e["crosses"] and e["programs"]]
    drops = [bench["nic_drops"] for cluster in clusters for bench in cluster["benches"]]
    dropped, runs = sum(d["total"] for d in drops), sum(d["runs"] for d in drops)
    return {"rows": rows, "best_speedup_crossing": max(crossing, default=None),
            "nic_drops": {"total": dropped, "runs": runs, "per_run": dropped / runs if runs else 0.0},
            "mean_best_speedup_crossing": sum(crossing) / len(crossing) if crossing else None,
            "crossing_placements": len(crossing), "accuracy": pooled_accuracy(clusters).to_dict()}


def plot(clusters: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    values = []
    for number, cluster in enumerate(clusters):
        for bench in cluster["benches"]:
            label = f"{cluster['nodes']}x{cluster['per_node']} {bench['axes']} r{bench['reduce']} {bench['bytes'] // MiB}MiB"
            pred = [p["predicted_seconds"] for e in bench["placements"] for p in e["programs"]]
            meas = [p["measured_seconds"] for e in bench["placements"] for p in e["programs"]]
            pred += [e["flat"]["predicted_seconds"] for e in bench["placements"]]
            meas += [e["flat"]["measured_seconds"] for e in bench["placements"]]
            left.scatter(pred, meas, s=14, label=label)
            values += pred + meas
    low, high = min(values) / 1.2, max(values) * 1.2
    left.plot([low, high], [low, high], "k--", linewidth=0.8)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("predicted seconds (calibrated simulator)")
    left.set_ylabel("measured seconds (median)")
    left.legend(fontsize=6)
    left.set_title("simulator vs measurement, every candidate")
    labels, speedups = [], []
    for cluster in clusters:
        for bench in cluster["benches"]:
            for entry in bench["placements"]:
                if entry["crosses"] and entry["programs"]:
                    labels.append(f"{cluster['nodes']}x{cluster['per_node']} {bench['axes']} r{bench['reduce']}\n"
                                  f"{bench['bytes'] // MiB}MiB {entry['matrix']}")
                    speedups.append(max(p["speedup"] for p in entry["programs"]))
    right.barh(range(len(speedups)), speedups, color="C2")
    right.axvline(1.0, color="k", linewidth=0.8)
    right.axvline(1.5, color="C3", linewidth=0.8, linestyle="--", label="goal 1.5x")
    right.set_yticks(range(len(labels)), labels, fontsize=6)
    right.set_xlabel("best program speedup over flat AllReduce (measured)")
    right.set_title("placements whose reduction crosses nodes")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--nic", default="200Mbit/s")
    parser.add_argument("--top", type=int, default=0,
                        help="programs per placement where the configuration does not fix it (0: all)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--shapes", default="2x4,4x2", help="cluster shapes to run, e.g. 2x4")
    parser.add_argument("--probe-bytes", default=None, help="large calibration probe size (default: p2's)")
    parser.add_argument("--fabric", default=DEFAULT_FABRIC, help=FABRIC_HELP)
    args = parser.parse_args(argv)
    if problem := fabric_problem("reduce", args.fabric):
        print(problem, file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    started = time.time()
    clusters = []
    with tempfile.TemporaryDirectory(prefix="p2-bench-state-") as state:
        env["P2_CLUSTER_DIR"] = state
        for shape_text in args.shapes.split(","):
            shape = tuple(int(x) for x in shape_text.split("x"))
            clusters.append(run_cluster(shape, CONFIGURATIONS[shape], args, Path(state), env))
    data = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
            "settings": {"nic": args.nic, "fabric": args.fabric, "top": args.top, "repeat": args.repeat},
            "seconds": time.time() - started, "clusters": clusters, "summary": summarize(clusters)}
    (out / "reduce.json").write_text(json.dumps(data, indent=1) + "\n")
    plot(clusters, out / "reduce.png")
    print_summary(data)
    return 0


def print_summary(data: dict) -> None:
    summary = data["summary"]
    print(f"\nmeasured reductions ({data['settings']['nic']} NIC, {data['settings']['fabric']} fabric, median of "
          f"{data['settings']['repeat']}, {data['seconds']:.0f} s in all)")
    print(f"{'cluster':<8} {'axes':<8} {'reduce':<7} {'MiB':>4} {'best speedup':>13} {'flat spread':>12} "
          f"{'cands':>6} {'MAPE':>6} {'top1':>5} {'top5':>5} {'drops/run':>9}")
    for r in summary["rows"]:
        best = f"{r['best_speedup_crossing']:.2f}x" if r["best_speedup_crossing"] is not None else "-"
        spread = f"{r['flat_spread']:.1f}x" if r["flat_spread"] is not None else "-"
        print(f"{r['cluster']:<8} {str(r['axes']):<8} {str(r['reduce']):<7} {r['bytes'] // MiB:>4} {best:>13} "
              f"{spread:>12} {r['candidates']:>6} {r['mape']:>6.1%} {r['top1']:>5.0%} {r['top5']:>5.0%} "
              f"{r['nic_drops_per_run']:>9.2f}")
    if summary["crossing_placements"]:
        print(f"best program vs flat AllReduce over the {summary['crossing_placements']} placements whose reduction "
              f"crosses nodes: {summary['mean_best_speedup_crossing']:.2f}x on average, "
              f"{summary['best_speedup_crossing']:.2f}x at most")
    drops = summary["nic_drops"]
    print(f"NIC queue drops: {drops['total']} in {drops['runs']} measured runs ({drops['per_run']:.2f} per run)")
    acc = summary["accuracy"]
    print(f"pooled over {acc['candidates']} candidates / {acc['placements']} placements: MAPE {acc['mape']:.1%}, "
          f"Spearman {acc['spearman']:.3f}, top-1 {acc['top1']:.0%}, top-5 {acc['top5']:.0%} "
          f"(within {acc['tolerance']:.0%}: top-1 {acc['top1_tolerant']:.0%}, top-5 {acc['top5_tolerant']:.0%})")


if __name__ == "__main__":
    sys.exit(main())
