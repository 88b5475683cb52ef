"""The live loop, measured: ``p2 demo`` on the emulated 2 x 4 cluster (two NICs).

Each run (per job: the DLRM-like job, a DDP job): passthrough, the service's
first plan (searched from the live job's trace windows and committed with
two-phase commit), the second NIC slowed ``--throttle`` times, and whatever
the service replans. From each run's JSON:

* speed-up of the first committed plan over passthrough (goal >= 1.5x on the
  DLRM-like job), median of steady-state iterations of each phase;
* the first plan's predicted vs measured iteration time (goal within 15 %),
  and the replanned plan's;
* after the change: iterations until a replanned plan was committed (goal
  within 30);
* the replanned plan against the best plan of an offline search told the new
  rate (goal within 10 %): both model figures (the demo's
  ``ratio_to_offline_best``) and, measured here, both plans run head to head
  on a cluster built with the slowed NIC (``P2_PLAN_FILE``, alternating, each
  ``--h2h-steps`` steps, medians after warm-up; a ratio inside one run);
* time from the first search's request to the committed plan (search + trace
  window + two-phase commit);
* the NICs' tbf drops per iteration in each phase (what the cost model misses).

Needs root (the emulated cluster); otherwise the demo runs on loopback and the
figures say so.

    .venv/bin/python benchmarks/loop.py [--runs 1] [--jobs dlrm,ddp] [--steps 200] [--out benchmarks/results]

Writes ``loop.json`` and ``loop.png`` under ``--out`` and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.emulated import can_manage_namespaces, create_cluster, destroy_cluster, run_ranks
from optimizer_service.cli.demo_report import OFFLINE_PLAN, prediction_error
from optimizer_service.cli.demo_run import JOBS
from optimizer_service.service.store.sqlite_store import SqlitePlanStore

ROOT = Path(__file__).resolve().parents[1]

H2H_CLUSTER = "p2loop"
H2H_WARMUP = 8


def one_run(job: str, steps: int, throttle: float, extra: list[str], work: Path) -> dict:
    out = work / "demo.json"
    command = [sys.executable, "-m", "optimizer_service.cli", "demo", "--job", job, "--steps", str(steps),
               "--throttle", f"{throttle:g}", "--name", "p2loopdemo", "--work-dir", str(work), "--json", str(out),
               *extra]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"p2 demo failed ({done.returncode}): {done.stderr[-2000:]}")
    (work / "demo.log").write_text(done.stderr)
    return json.loads(out.read_text())


def head_to_head(report: dict, work: Path, steps: int, rounds: int) -> dict:
    """The replanned plan and the offline search's best, run alternately on a cluster whose
    second NIC is slowed as in the demo; medians of each plan's steps after warm-up."""
    phases = {phase["name"]: phase for phase in report["phases"]}
    version = phases["replanned"]["plan_version"]
    if not report["cluster"]["emulated"] or version is None or not (work / OFFLINE_PLAN).is_file():
        return {"skipped": "no replanned plan or no offline plan (or a loopback run)"}
    job = report["job"]["id"]
    store = SqlitePlanStore.open(work / "service.db")
    try:
        stored = store.get_plan(job, version)
    finally:
        store.close()
    plans = {"replanned": stored.plan_json, "offline": (work / OFFLINE_PLAN).read_text()}
    cluster = report["cluster"]
    info = create_cluster(H2H_CLUSTER, cluster["nodes"], cluster["per_node"], cluster["nic_bytes_per_second"],
                          cluster["nic2_bytes_per_second"] / cluster["throttle"])
    paths = {name: work / f"h2h-{name}.json" for name in plans}
    for name, path in paths.items():
        path.write_text(plans[name])
    seconds: dict[str, list[float]] = {name: [] for name in plans}
    try:
        for round_ in range(rounds):
            for name, path in paths.items():
                out = work / f"h2h-{name}-{round_}.out.json"
                command = [sys.executable, str(ROOT / "examples" / JOBS[job]), "--backend", "p2enforcer", "--steps",
                           str(steps), "--json", str(out)]
                with (work / "h2h.log").open("a") as log:
                    code = run_ranks(info, command, env={"P2_PLAN_FILE": str(path)}, out=log, err=log, timeout=900)
                if code != 0:
                    raise SystemExit(f"the head-to-head run of the {name} plan failed ({code}); see {work / 'h2h.log'}")
                seconds[name] += json.loads(out.read_text())["step_seconds"][H2H_WARMUP:]
    finally:
        destroy_cluster(H2H_CLUSTER)
    replanned, offline = statistics.median(seconds["replanned"]), statistics.median(seconds["offline"])
    return {"replanned_seconds": replanned, "offline_seconds": offline, "ratio": replanned / offline,
            "steps_each": len(seconds["replanned"]), "rounds": rounds}


def figures(report: dict, h2h: dict) -> dict:
    phases = {phase["name"]: phase for phase in report["phases"]}

    return {"job": report["job"]["id"], "emulated": report["cluster"]["emulated"], "speedup": report["speedup"],
            "first_plan_prediction_error": prediction_error(phases["first-plan"]),
            "replanned_prediction_error": prediction_error(phases["replanned"]),
            "passthrough_model_error": prediction_error(phases["passthrough"], "model_iteration_seconds"),
            "first_plan_model_error": prediction_error(phases["first-plan"], "model_iteration_seconds"),
            "replanned_model_error": prediction_error(phases["replanned"], "model_iteration_seconds"),
            "passthrough_seconds": phases["passthrough"]["measured_iteration_seconds"],
            "first_plan_seconds": phases["first-plan"]["measured_iteration_seconds"],
            "first_plan_predicted_seconds": phases["first-plan"]["predicted_iteration_seconds"],
            "changed_seconds": phases["changed"]["measured_iteration_seconds"],
            "replanned_seconds": phases["replanned"]["measured_iteration_seconds"],
            "iterations_to_commit": report["replan"]["iterations_to_commit"],
            "ratio_to_offline_best": report["replan"]["ratio_to_offline_best"],
            "measured_ratio_to_offline_best": h2h.get("ratio"),
            "seconds_to_first_commit": report["first_plan"]["seconds_to_commit"],
            "nic_drops_per_iteration": {name: phase.get("nic_drops_per_iteration") for name, phase in phases.items()}}


def plot(path: Path, reports: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 4.5))
    for index, report in enumerate(reports):
        seconds = report["step_seconds"]
        axis.plot(range(1, len(seconds) + 1), [s * 1e3 for s in seconds], lw=0.8,
                  label=f"{report['job']['id']} run {index + 1}")
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
    axis.set_title("Jobs under the live loop (green: plan switches, red: second NIC slowed)", fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def fmt(value, spec: str = ".3f", none: str = "-") -> str:
    return none if value is None else format(value, spec)


def drops_text(rates: dict | None) -> str:
    return "-" if not rates else "+".join(f"{rate:.0f}" for rate in rates.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="demo runs per job")
    parser.add_argument("--jobs", default="dlrm,ddp", help="comma-separated: " + ", ".join(JOBS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--throttle", type=float, default=4.0)
    parser.add_argument("--h2h-steps", type=int, default=30, help="steps of each head-to-head run")
    parser.add_argument("--h2h-rounds", type=int, default=2, help="alternations of the two plans")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("demo_args", nargs="*", help="more p2 demo options (after --)")
    args = parser.parse_args(argv)
    jobs = [job for job in args.jobs.split(",") if job]
    unknown = [job for job in jobs if job not in JOBS]
    if unknown:
        parser.error(f"unknown job {unknown[0]!r}; choose from {', '.join(JOBS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    reports, rows = [], []
    for job in jobs:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="p2-loop-") as folder:
                work = Path(folder)
                print(f"{job} run {run + 1}/{args.runs}: p2 demo --job {job} --steps {args.steps} ...", flush=True)
                report = one_run(job, args.steps, args.throttle, args.demo_args, work)
                h2h = head_to_head(report, work, args.h2h_steps, args.h2h_rounds) if can_manage_namespaces() else {}
                report["head_to_head"] = h2h
                reports.append(report)
                rows.append(figures(report, h2h))
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "steps": args.steps, "throttle": args.throttle, "runs": rows,
              "goals": {"speedup": 1.5, "prediction_error": 0.15, "iterations_to_commit": 30,
                        "ratio_to_offline_best": 1.10},
              "reports": reports}
    (args.out / "loop.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(args.out / "loop.png", reports)
    print(f"{'job':<5} {'passthrough':>11} {'first plan':>10} {'predicted':>9} {'error':>6} {'speed-up':>8} "
          f"{'changed':>8} {'replanned':>9} {'error':>6} {'iters':>5} {'model/off':>9} {'meas/off':>8} "
          f"{'to commit':>9}  drops/it (pass, first, changed, replanned)")
    for row in rows:
        drops = row["nic_drops_per_iteration"]
        print(f"{row['job']:<5} {fmt(row['passthrough_seconds']):>11} {fmt(row['first_plan_seconds']):>10} "
              f"{fmt(row['first_plan_predicted_seconds']):>9} {fmt(row['first_plan_prediction_error'], '+.0%'):>6} "
              f"{fmt(row['speedup'], '.2f'):>7}x {fmt(row['changed_seconds']):>8} {fmt(row['replanned_seconds']):>9} "
              f"{fmt(row['replanned_prediction_error'], '+.0%'):>6} {fmt(row['iterations_to_commit'], 'd'):>5} "
              f"{fmt(row['ratio_to_offline_best'], '.2f'):>9} {fmt(row['measured_ratio_to_offline_best'], '.2f'):>8} "
              f"{fmt(row['seconds_to_first_commit'], '.1f'):>8}s  "
              + ", ".join(drops_text(drops.get(name)) for name in ("passthrough", "first-plan", "changed", "replanned")))
    errors = [f"{row['job']}: " + ", ".join(f"{name} {fmt(row[key + '_model_error'], '+.0%')}" for name, key in
                                            (("passthrough", "passthrough"), ("first plan", "first_plan"),
                                             ("replanned", "replanned")))
              for row in rows]
    print("model error (the model's own time over the measured one, minus 1): " + "; ".join(errors))
    if not all(row["emulated"] for row in rows):
        print("loopback runs (not root): no NICs, so these figures say nothing about speed-ups")
    print(f"wrote {args.out / 'loop.json'} and {args.out / 'loop.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
