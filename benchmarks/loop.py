"""The live loop, measured: ``p2 demo`` runs on the emulated 2 x 4 cluster (two NICs).

Each run: passthrough, the service's first plan (searched from the live job's
trace windows and committed with two-phase commit), the second NIC slowed
``--throttle`` times, and whatever the service replans. From each run's JSON:

* speed-up of the first committed plan over passthrough (goal >= 1.5x on the
  DLRM-like job), median of steady-state iterations of each phase;
* the first plan's predicted vs measured iteration time (goal within 15 %);
* after the change: iterations until a replanned plan was committed (goal
  within 30) and its prediction against an offline search told the new rate
  (goal within 10 %);
* time from the first search's request to the committed plan (search + trace
  window + two-phase commit).

Needs root (the emulated cluster); otherwise the demo runs on loopback and the
figures say so.

    .venv/bin/python benchmarks/loop.py [--runs 1] [--steps 220] [--out benchmarks/results]

Writes ``loop.json`` and ``loop.png`` under ``--out`` and prints a summary
(where a goal is missed, the figure is shown with what bounds it).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(steps: int, throttle: float, extra: list[str], work: Path) -> dict:
    out = work / "demo.json"
    command = [sys.executable, "-m", "optimizer_service.cli", "demo", "--steps", str(steps), "--throttle",
               f"{throttle:g}", "--work-dir", str(work), "--json", str(out), *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"p2 demo failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(out.read_text())


def figures(report: dict) -> dict:
    phases = {phase["name"]: phase for phase in report["phases"]}
    first = phases["first-plan"]
    error = None
    if first["measured_iteration_seconds"] and first["predicted_iteration_seconds"]:
        error = first["predicted_iteration_seconds"] / first["measured_iteration_seconds"] - 1
    return {"emulated": report["cluster"]["emulated"], "speedup": report["speedup"],
            "first_plan_prediction_error": error,
            "passthrough_seconds": phases["passthrough"]["measured_iteration_seconds"],
            "first_plan_seconds": first["measured_iteration_seconds"],
            "first_plan_predicted_seconds": first["predicted_iteration_seconds"],
            "changed_seconds": phases["changed"]["measured_iteration_seconds"],
            "replanned_seconds": phases["replanned"]["measured_iteration_seconds"],
            "iterations_to_commit": report["replan"]["iterations_to_commit"],
            "ratio_to_offline_best": report["replan"]["ratio_to_offline_best"],
            "seconds_to_first_commit": report["first_plan"]["seconds_to_commit"]}


def plot(path: Path, reports: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 4.5))
    for index, report in enumerate(reports):
        seconds = report["step_seconds"]
        axis.plot(range(1, len(seconds) + 1), [s * 1e3 for s in seconds], lw=0.8, label=f"run {index + 1}")
        change = report["replan"]["change_step"]
        if change is not None:
            axis.axvline(change, color="tab:red", lw=1)
        versions = report["plan_versions"]
        for step in range(1, len(versions)):
            if versions[step] != versions[step - 1]:
                axis.axvline(step + 1, color="tab:green", ls="--", lw=0.8)
    axis.set_xlabel("step")
    axis.set_ylabel("iteration time (ms, rank 0)")
    axis.set_ylim(bottom=0)
    axis.set_title("DLRM-like job under the live loop (green: plan switches, red: second NIC slowed)", fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def fmt(value, spec: str = ".3f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=220)
    parser.add_argument("--throttle", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("demo_args", nargs="*", help="more p2 demo options (after --)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    reports = []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="p2-loop-") as work:
            print(f"run {run + 1}/{args.runs}: p2 demo --steps {args.steps} ...", flush=True)
            reports.append(one_run(args.steps, args.throttle, args.demo_args, Path(work)))
    rows = [figures(report) for report in reports]
    result = {"machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
              "steps": args.steps, "throttle": args.throttle, "runs": rows,
              "goals": {"speedup": 1.5, "prediction_error": 0.15, "iterations_to_commit": 30,
                        "ratio_to_offline_best": 1.10},
              "reports": reports}
    (args.out / "loop.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(args.out / "loop.png", reports)
    print(f"{'run':>3} {'passthrough':>12} {'first plan':>11} {'predicted':>10} {'error':>7} {'speed-up':>9} "
          f"{'changed':>9} {'replanned':>10} {'iters':>6} {'to commit':>10}")
    for index, row in enumerate(rows, 1):
        print(f"{index:>3} {fmt(row['passthrough_seconds']):>12} {fmt(row['first_plan_seconds']):>11} "
              f"{fmt(row['first_plan_predicted_seconds']):>10} {fmt(row['first_plan_prediction_error'], '+.0%'):>7} "
              f"{fmt(row['speedup'], '.2f'):>8}x {fmt(row['changed_seconds']):>9} {fmt(row['replanned_seconds']):>10} "
              f"{fmt(row['iterations_to_commit'], 'd'):>6} {fmt(row['seconds_to_first_commit'], '.1f'):>9}s")
    if not all(row["emulated"] for row in rows):
        print("loopback runs (not root): no NICs, so these figures say nothing about speed-ups")
    print(f"wrote {args.out / 'loop.json'} and {args.out / 'loop.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
