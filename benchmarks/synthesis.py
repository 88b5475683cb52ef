"""Synthesis benchmark: every configuration of P²'s Table 4 and Appendix A,
plus 1024-device hierarchies with three axes.

For each configuration and algorithm (ring, tree) it runs the whole planner
cold (fresh caches): all placements, all programs, lowering and simulation;
records the median wall time over ``--repeat`` runs, the number of placements
and programs (next to the paper's count), and the best predicted speedup over
a flat AllReduce. Writes ``synthesis.json`` and ``synthesis.png`` under
``--out`` and prints a summary.

    .venv/bin/python benchmarks/synthesis.py [--out benchmarks/results] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from optimizer_service.catalog import load_topology
from optimizer_service.hardware.cost_model import Algorithm, ring_pattern
from optimizer_service.hardware.topology import Topology
from optimizer_service.p2 import semantics
from optimizer_service.p2.planner import Planner, SynthesisReport

# (preset, axes, reduce, total programs in the paper's Appendix A)
PAPER_CONFIGURATIONS = [
    ("gcp-a100-2n", (32,), (0,), 47), ("gcp-a100-2n", (2, 16), (0,), 6), ("gcp-a100-2n", (2, 16), (1,), 50),
    ("gcp-a100-2n", (4, 8), (0,), 50), ("gcp-a100-2n", (4, 8), (1,), 50), ("gcp-a100-2n", (8, 4), (0,), 50),
    ("gcp-a100-2n", (8, 4), (1,), 50), ("gcp-a100-2n", (16, 2), (0,), 50), ("gcp-a100-2n", (16, 2), (1,), 6),
    ("gcp-a100-4n", (64,), (0,), 47), ("gcp-a100-4n", (2, 32), (0,), 6), ("gcp-a100-4n", (2, 32), (1,), 94),
    ("gcp-a100-4n", (4, 16), (0,), 53), ("gcp-a100-4n", (4, 16), (1,), 97), ("gcp-a100-4n", (8, 8), (0,), 97),
    ("gcp-a100-4n", (8, 8), (1,), 97), ("gcp-a100-4n", (16, 4), (0,), 97), ("gcp-a100-4n", (16, 4), (1,), 53),
    ("gcp-a100-4n", (32, 2), (0,), 94), ("gcp-a100-4n", (32, 2), (1,), 6),
    ("gcp-a100-4n", (16, 2, 2), (0, 2), 188), ("gcp-a100-4n", (8, 2, 4), (0, 2), 235),
    ("gcp-a100-4n", (4, 2, 8), (0, 2), 235), ("gcp-a100-4n", (2, 2, 16), (0, 2), 188),
    ("gcp-v100-2n", (16,), (0,), 47), ("gcp-v100-2n", (2, 8), (0,), 6), ("gcp-v100-2n", (2, 8), (1,), 50),
    ("gcp-v100-2n", (4, 4), (0,), 50), ("gcp-v100-2n", (4, 4), (1,), 50), ("gcp-v100-2n", (8, 2), (0,), 50),
    ("gcp-v100-2n", (8, 2), (1,), 6),
    ("gcp-v100-4n", (32,), (0,), 47), ("gcp-v100-4n", (2, 16), (0,), 6), ("gcp-v100-4n", (2, 16), (1,), 94),
    ("gcp-v100-4n", (4, 8), (0,), 53), ("gcp-v100-4n", (4, 8), (1,), 97), ("gcp-v100-4n", (8, 4), (0,), 97),
    ("gcp-v100-4n", (8, 4), (1,), 53), ("gcp-v100-4n", (16, 2), (0,), 94), ("gcp-v100-4n", (16, 2), (1,), 6),
    ("gcp-v100-4n", (2, 2, 8), (0, 2), 188), ("gcp-v100-4n", (8, 2, 2), (0, 2), 188),
]

POD_1024 = Topology.from_yaml("""
name: pod-1024
description: 4 pods x 32 nodes x 8 GPUs; NVSwitch in a node, one 40 GB/s NIC per GPU, 4:1 oversubscribed pod uplinks
levels: [{name: pod, cardinality: 4}, {name: node, cardinality: 32}, {name: gpu, cardinality: 8}]
links:
  - {name: nvswitch, levels: [gpu], bandwidth: 405GB/s, latency: 2us}
  - {name: ib, levels: [node, pod], bandwidth: 40GB/s, latency: 5us}
  - {name: spine, levels: [pod], bandwidth: 2.56TB/s, latency: 5us, shared_by: 256}
""")

LARGE_CONFIGURATIONS = [
    (POD_1024, (16, 8, 8), (0, 2)), (POD_1024, (16, 8, 8), (0,)), (POD_1024, (8, 16, 8), (0, 1)),
    (POD_1024, (4, 16, 16), (0, 1, 2)), (POD_1024, (1024,), (0,)),
]

NBYTES = 2**28
GOAL_PAPER_SECONDS = 0.050
GOAL_LARGE_SECONDS = 10.0


def cold_run(topology: Topology, axes, reduce, algorithm: Algorithm) -> tuple[float, SynthesisReport]:
    semantics.clear_caches()
    ring_pattern.cache_clear()
    start = time.perf_counter()
    report = Planner().synthesize(topology, axes, reduce, NBYTES, algorithm)
    return time.perf_counter() - start, report


def summarize(topology: Topology, axes, reduce, algorithm: Algorithm, repeat: int, paper_programs=None) -> dict:
    times = []
    for _ in range(repeat):
        seconds, report = cold_run(topology, axes, reduce, algorithm)
        times.append(seconds)
    placements = [p for p in report.placements if p.best is not None]
    best_placement = max(placements, key=lambda p: p.speedup)
    reducing = [p.allreduce_seconds for p in placements]
    return {
        "topology": topology.name, "axes": list(axes), "reduce": list(reduce), "algorithm": algorithm.value,
        "devices": topology.device_count,
        "placements": len(report.placements),
        "programs": sum(len(p.programs) for p in report.placements),
        "paper_programs": paper_programs,
        "seconds": statistics.median(times), "seconds_all": times,
        "synthesis_seconds": report.synthesis_seconds, "simulation_seconds": report.simulation_seconds,
        "max_speedup": best_placement.speedup, "max_speedup_matrix": str(best_placement.matrix),
        "max_speedup_program": str(best_placement.best.program),
        "placement_speedups": [p.speedup for p in placements],
        "allreduce_spread": max(reducing) / min(reducing) if min(reducing) > 0 else None,
    }


def plot(rows: list[dict], large: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ring = [r for r in rows if r["algorithm"] == "ring"]
    tree = [r for r in rows if r["algorithm"] == "tree"]
    labels = [f"{r['topology'].replace('gcp-', '')} {r['axes']} r{r['reduce']}" for r in ring]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(16, 9), sharex=True)
    x = range(len(ring))
    top.bar([i - 0.2 for i in x], [r["seconds"] * 1e3 for r in ring], width=0.4, label="ring")
    top.bar([i + 0.2 for i in x], [r["seconds"] * 1e3 for r in tree], width=0.4, label="tree")
    top.axhline(GOAL_PAPER_SECONDS * 1e3, color="red", linestyle="--", label="goal 50 ms")
    top.set_ylabel("synthesis + simulation (ms)")
    top.set_title("P² configurations (Appendix A): all placements, all programs, cold, median")
    top.legend()
    bottom.bar([i - 0.2 for i in x], [r["max_speedup"] for r in ring], width=0.4, label="ring")
    bottom.bar([i + 0.2 for i in x], [r["max_speedup"] for r in tree], width=0.4, label="tree")
    bottom.axhline(1.0, color="gray", linewidth=0.8)
    bottom.set_ylabel("best predicted speedup\nover AllReduce")
    bottom.set_xticks(list(x))
    bottom.set_xticklabels(labels, rotation=75, fontsize=7)
    bottom.legend()
    entries = [f"{r['axes']} r{r['reduce']} {r['algorithm']}: {r['seconds']:.2f} s" for r in large]
    half = (len(entries) + 1) // 2
    caption = (f"1024 devices ({POD_1024.name}), all placements and programs: " + ", ".join(entries[:half])
               + "\n" + ", ".join(entries[half:]))
    fig.text(0.01, 0.005, caption, fontsize=7)
    fig.tight_layout(rect=(0, 0.035, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results", help="folder for synthesis.json and synthesis.png")
    parser.add_argument("--repeat", type=int, default=3, help="cold runs per configuration (median reported)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    rows = []
    total = len(PAPER_CONFIGURATIONS) * 2
    for n, (preset, axes, reduce, paper) in enumerate(PAPER_CONFIGURATIONS):
        for algorithm in (Algorithm.RING, Algorithm.TREE):
            rows.append(summarize(load_topology(preset), axes, reduce, algorithm, args.repeat, paper))
        if sys.stderr.isatty():
            print(f"\r[{2 * (n + 1)}/{total}] paper configurations", end="", file=sys.stderr, flush=True)
    print(f"{total} paper configuration runs done", file=sys.stderr)
    large = []
    for topology, axes, reduce in LARGE_CONFIGURATIONS:
        for algorithm in (Algorithm.RING, Algorithm.TREE):
            large.append(summarize(topology, axes, reduce, algorithm, 1))
            print(f"  {topology.name} {list(axes)} r{list(reduce)} {algorithm}: {large[-1]['seconds']:.2f} s",
                  file=sys.stderr)

    print(f"{'configuration':<34} {'place':>5} {'programs':>9} {'paper':>6}  {'ring ms':>8} {'tree ms':>8}  "
          f"{'ring x':>6} {'tree x':>6}")
    for ring, tree in zip(rows[0::2], rows[1::2]):
        name = f"{ring['topology']} {ring['axes']} r{ring['reduce']}"
        mark = "" if ring["programs"] == ring["paper_programs"] else "  (differs)"
        print(f"{name:<34} {ring['placements']:>5} {ring['programs']:>9} {ring['paper_programs']:>6}  "
              f"{ring['seconds'] * 1e3:8.1f} {tree['seconds'] * 1e3:8.1f}  {ring['max_speedup']:6.2f} "
              f"{tree['max_speedup']:6.2f}{mark}")
    for row in large:
        print(f"{row['topology']} {row['axes']} r{row['reduce']} {row['algorithm']:<4}: {row['placements']} "
              f"placements, {row['programs']} programs, {row['seconds']:.2f} s")

    slowest = max(rows, key=lambda r: r["seconds"])
    matches = sum(r["programs"] == r["paper_programs"] for r in rows[0::2])
    ring_speedups = [s for r in rows if r["algorithm"] == "ring" for s in r["placement_speedups"]]
    improved = [s for s in ring_speedups if s > 1.01]
    summary = {
        "paper_configurations": len(PAPER_CONFIGURATIONS),
        "program_counts_matching_paper": matches,
        "max_paper_seconds": slowest["seconds"],
        "max_paper_configuration": f"{slowest['topology']} {slowest['axes']} r{slowest['reduce']} "
                                   f"{slowest['algorithm']}",
        "paper_goal_met": slowest["seconds"] <= GOAL_PAPER_SECONDS,
        "max_large_seconds": max(r["seconds"] for r in large),
        "large_goal_met": max(r["seconds"] for r in large) <= GOAL_LARGE_SECONDS,
        "ring_placements_improved_fraction": len(improved) / len(ring_speedups),
        "ring_improved_mean_speedup": statistics.mean(improved) if improved else 1.0,
        "ring_max_speedup": max(ring_speedups),
    }
    print()
    print(f"program counts equal to the paper's: {matches}/{len(PAPER_CONFIGURATIONS)}")
    print(f"slowest paper configuration: {summary['max_paper_configuration']} "
          f"{slowest['seconds'] * 1e3:.1f} ms (goal <= 50 ms: {'met' if summary['paper_goal_met'] else 'MISSED'})")
    print(f"slowest 1024-device configuration: {summary['max_large_seconds']:.2f} s "
          f"(goal <= 10 s: {'met' if summary['large_goal_met'] else 'MISSED'})")
    print(f"ring: synthesized programs beat AllReduce on {summary['ring_placements_improved_fraction']:.0%} of "
          f"placements, by {summary['ring_improved_mean_speedup']:.2f}x on average, {summary['ring_max_speedup']:.2f}x "
          f"at most (P²: 69%, 1.27x, 2.04x measured)")

    result = {"machine": {"python": platform.python_version(), "processor": platform.processor(),
                          "cpus": __import__("os").cpu_count()},
              "bytes": NBYTES, "repeat": args.repeat, "summary": summary, "paper": rows, "large": large}
    (out / "synthesis.json").write_text(json.dumps(result, indent=1))
    plot(rows, large, out / "synthesis.png")
    print(f"wrote {out / 'synthesis.json'} and {out / 'synthesis.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
