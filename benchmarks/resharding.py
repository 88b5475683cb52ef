"""Cross-mesh resharding and pipeline schedules, measured (Zhuang et al., MLSys 2023, §5).

Three parts, one JSON + PNG under ``--out`` and a printed summary:

* **Table 2** (§5.1.2, Figures 6 and 8): the nine multi-to-multi cases, the
  paper's (1024, 1024, 512) tensor divided by ``--shape-divisor`` per
  dimension, on one emulated cluster of 5 nodes × 4 ranks (every case's meshes
  fit: one host per mesh row, sources first; 200 Mbit/s NICs). Per case five
  systems, each a program made by the planner on the cluster's topology and run
  by the enforcer (:mod:`enforcer.measure.reshard`): send/recv and the
  all-gather-based strategy (Alpa's) with greedy load balance (the paper's
  baselines), and broadcast with the naive order, with load balance only, and
  with the ensemble of DFS and randomized greedy (AlpaComm). Measured against
  the NIC lower bound; predicted against measured (MAPE).
* **Pipeline, simulated** (§4, §5.3.2): 1F1B, eager-1F1B and eager-1F1B with
  backward weight delaying on a GPT-like and a U-Transformer-like stage profile
  whose cross-mesh communication costs come from the resharding planner.
* **Pipeline, real** (§5.2): ``examples/train_pipeline.py`` on an emulated
  4 × 2 cluster, every stage-boundary activation and gradient resharded by the
  enforcer, 1F1B against eager-1F1B.

The measured parts' clusters are built on ``--fabric`` (lossless, the default,
or lossy); the JSON and the summary give it and the NICs' queue drops per run
(per program run in Table 2, warm-up included; per training step in the real
pipeline).

Needs CAP_NET_ADMIN (root) for the measured parts; ``--simulate-only`` runs
the simulated part alone.

    .venv/bin/python benchmarks/resharding.py [--shape-divisor 4] [--repeat 3] [--cases case1,case3] [--fabric lossy]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.p2_command import FABRIC_HELP, drop_record, fabric_problem, nic_drop_total, p2  # noqa: E402
from deploy.emulated import DEFAULT_FABRIC, can_manage_namespaces, load_cluster  # noqa: E402
from optimizer_service.catalog import load_topology  # noqa: E402
from optimizer_service.cli.measure_job import run_measurement  # noqa: E402
from optimizer_service.hardware.topology import Topology  # noqa: E402
from optimizer_service.plan.resharding import Strategy  # noqa: E402
from optimizer_service.resharding.cases import TABLE2_CASES, ReshardCase, scaled_shape  # noqa: E402
from optimizer_service.resharding.planner import ReshardPlan, plan_request  # noqa: E402
from optimizer_service.settings import Settings  # noqa: E402

CLUSTER = "reshard-bench"
#: (label, strategy, load-balance algorithm), weakest first: the paper's
#: baselines (§5.1.2: "the baselines do load balancing with a greedy approach")
#: and Figure 8's three load-balance variants of the broadcast.
SYSTEMS = (
    ("send/recv", Strategy.SEND_RECV, "lb"),
    ("all-gather", Strategy.LOCAL_ALLGATHER, "lb"),
    ("broadcast, naive", Strategy.BROADCAST, "naive"),
    ("broadcast, load balance", Strategy.BROADCAST, "lb"),
    ("broadcast, ensemble", Strategy.BROADCAST, "ensemble"),
)
ENSEMBLE = SYSTEMS[-1][0]
SEND_RECV = SYSTEMS[0][0]
#: §5.1.2: "In case 3, 4, and 9, AlpaComm is 3x to 10x faster".
SPEEDUP_CASES = ("case3", "case4", "case9")
GOAL_RATIO_TO_BOUND = 1.2
GOAL_SPEEDUP = 3.0


# ------------------------------------------------------------------ Table 2
def plan_cases(cases: list[ReshardCase], topology: Topology, shape: tuple[int, ...], element_bytes: int,
               budget: float) -> dict[str, dict[str, ReshardPlan]]:
    """Every system's plan for every case (planned once, on the cluster's topology)."""
    plans: dict[str, dict[str, ReshardPlan]] = {}
    for case in cases:
        plans[case.name] = {}
        for label, strategy, algorithm in SYSTEMS:
            request = case.request(shape, topology, element_bytes=element_bytes, strategy=strategy)
            (plan,) = plan_request(request, topology, (algorithm,), budget_seconds=budget, clock=time.perf_counter)
            plans[case.name][label] = plan
    return plans


def measure_cases(plans: dict[str, dict[str, ReshardPlan]], warmup: int,
                  repeat: int) -> tuple[dict[str, list[float]], dict]:
    """Every run's seconds, and the NICs' queue drops per program run (warm-up included)."""
    info = load_cluster(CLUSTER, Settings().cluster_dir)
    runs = [{"id": f"{case}/{label}", "program": str(plan.program)}
            for case, systems in plans.items() for label, plan in systems.items()]
    spec = {"warmup": warmup, "repeat": repeat, "backend": "p2enforcer", "runs": runs}
    before = nic_drop_total(CLUSTER)
    measured = run_measurement(info, "enforcer.measure.reshard", spec, timeout=3000)
    drops = drop_record(nic_drop_total(CLUSTER) - before, len(runs) * (max(1, warmup) + repeat))
    return {run_id: list(m.seconds) for run_id, m in measured.items()}, drops


def case_rows(cases: list[ReshardCase], plans: dict[str, dict[str, ReshardPlan]],
              seconds: dict[str, list[float]]) -> list[dict]:
    rows = []
    for case in cases:
        systems = []
        bound = next(iter(plans[case.name].values())).lower_bound_seconds
        for label, strategy, algorithm in SYSTEMS:
            plan = plans[case.name][label]
            values = seconds[f"{case.name}/{label}"]
            measured = statistics.median(values)
            systems.append({
                "name": label, "strategy": str(strategy), "algorithm": algorithm,
                "predicted_seconds": plan.predicted_seconds, "measured_seconds": measured,
                "measured_all_seconds": values,
                "ratio_to_lower_bound": measured / bound if bound else None,
                "predicted_ratio_to_lower_bound": plan.ratio_to_lower_bound,
                "senders": list(plan.senders), "order": list(plan.order),
            })
        rows.append({"name": case.name, "src": case.src, "dst": case.dst, "note": case.note,
                     "unit_tasks": len(plans[case.name][ENSEMBLE].unit_tasks),
                     "lower_bound_seconds": bound, "systems": systems})
    return rows


def table2_findings(rows: list[dict]) -> dict:
    """The issue's goals and Figure 8's ordering, from the measured rows."""
    def measured(row: dict, label: str) -> float:
        return next(s["measured_seconds"] for s in row["systems"] if s["name"] == label)

    within = {row["name"]: measured(row, ENSEMBLE) / row["lower_bound_seconds"]
              for row in rows if row["lower_bound_seconds"]}
    speedup = {row["name"]: measured(row, SEND_RECV) / measured(row, ENSEMBLE)
               for row in rows if row["name"] in SPEEDUP_CASES}
    # Figure 8: naive >= load balance only >= ensemble (ties within 5 % count as kept).
    broadcast = [label for label, strategy, _ in SYSTEMS if strategy is Strategy.BROADCAST]
    ordering = {row["name"]: all(measured(row, a) >= measured(row, b) * 0.95
                                 for a, b in zip(broadcast, broadcast[1:])) for row in rows}
    errors: dict[str, list[float]] = {}
    for row in rows:
        for system in row["systems"]:
            errors.setdefault(system["name"], []).append(
                abs(system["predicted_seconds"] - system["measured_seconds"]) / system["measured_seconds"])
    every = [e for values in errors.values() for e in values]
    return {
        "ensemble_ratio_to_lower_bound": within,
        "ensemble_within_goal": {name: ratio <= GOAL_RATIO_TO_BOUND for name, ratio in within.items()},
        "speedup_over_send_recv": speedup,
        "speedup_goal_met": {name: value >= GOAL_SPEEDUP for name, value in speedup.items()},
        "figure8_ordering_kept": ordering,
        "mape": {name: statistics.fmean(values) for name, values in errors.items()},
        "mape_all": statistics.fmean(every) if every else None,
    }


def run_table2(args: argparse.Namespace) -> dict:
    cases = [c for c in TABLE2_CASES if not args.cases or c.name in args.cases]
    nodes = max(c.hosts for c in cases)
    per_node = max(c.devices_per_host for c in cases)
    shape = scaled_shape(args.shape_divisor)
    p2("cluster", "up", "--name", CLUSTER, "--nodes", str(nodes), "--per-node", str(per_node), "--nic", args.nic,
       "--fabric", args.fabric)
    try:
        info = load_cluster(CLUSTER, Settings().cluster_dir)
        topology = load_topology(str(info.topology_path))
        began = time.perf_counter()
        plans = plan_cases(cases, topology, shape, args.element_bytes, args.budget)
        planning = time.perf_counter() - began
        print(f"resharding: planned {len(cases)} cases x {len(SYSTEMS)} systems in {planning:.1f} s; measuring "
              f"on {nodes} x {per_node} ranks", flush=True)
        seconds, drops = measure_cases(plans, args.warmup, args.repeat)
    finally:
        p2("cluster", "down", "--name", CLUSTER)
    rows = case_rows(cases, plans, seconds)
    return {"cluster": {"nodes": nodes, "per_node": per_node, "nic": args.nic, "fabric": args.fabric,
                        "topology": topology.to_yaml()}, "nic_drops": drops,
            "shape": list(shape), "element_bytes": args.element_bytes,
            "tensor_bytes": args.element_bytes * math.prod(shape),
            "planning_seconds": planning, "cases": rows, "findings": table2_findings(rows)}


# ------------------------------------------------------------ pipeline, simulated
#: The schedules compared; the stage profiles are p2 optimize's pipeline
#: workloads (optimizer_service/cli/pipeline_workload.py): four stages, each a
#: (1, 4) mesh on a host of the emulated 4 x 4 cluster, every boundary's
#: activation and gradient planned by the resharding planner.
PIPELINE_SCHEDULES = ("1f1b", "eager-1f1b", "eager-1f1b-wd")
PIPELINE_PROFILES = {"gpt": "pipeline-gpt", "u-transformer": "pipeline-u-transformer"}


def run_pipeline_simulated(args: argparse.Namespace) -> dict:
    from optimizer_service.cli import pipeline_workload as workload
    from optimizer_service.resharding.pipeline_schedules import build_schedule
    from optimizer_service.resharding.pipeline_sim import simulate

    topology = workload.default_topology()
    profiles, planned = {}, {}
    for profile, name in PIPELINE_PROFILES.items():
        profiles[profile], planned[profile] = workload.workload_costs(name, topology)
    stages, chain = workload.STAGES, workload.CHAIN
    result: dict = {"stages": stages, "microbatches": args.microbatches, "mesh": list(workload.MESH),
                    "activation_shape": list(workload.ACTIVATION), "skip_shape": list(workload.SKIP_SHAPE),
                    "forward_seconds": workload.FORWARD_SECONDS, "backward_seconds": workload.BACKWARD_SECONDS,
                    "boundary_seconds": [planned["gpt"][edge][0].predicted_seconds for edge in chain],
                    "backward_boundary_seconds": [planned["gpt"][(b, a)][0].predicted_seconds for a, b in chain],
                    "skip_seconds": [planned["u-transformer"][edge][-1].predicted_seconds
                                     for edge in workload.skip_edges(PIPELINE_PROFILES["u-transformer"])],
                    "profiles": {}}
    for name, costs in profiles.items():
        rows: dict = {}
        for schedule_name in PIPELINE_SCHEDULES:
            schedule = build_schedule(schedule_name, stages, args.microbatches, costs)
            timeline = simulate(schedule, costs)
            shared = build_schedule(schedule_name, stages, args.microbatches, costs, links="host")
            rows[schedule_name] = {"iteration_seconds": timeline.iteration_seconds,
                                   "bubble_fraction": timeline.bubble_fraction,
                                   "peak_activation_bytes_per_stage": list(timeline.peak_activation_bytes),
                                   "iteration_seconds_shared_nic": simulate(shared, costs,
                                                                            links="host").iteration_seconds}
        one_f_one_b = build_schedule("1f1b", stages, args.microbatches)
        rows["1f1b, no overlap"] = {"iteration_seconds": simulate(one_f_one_b, costs, overlap=False).iteration_seconds}
        silent = costs.with_comm_scaled(0.0)
        rows["signal send/recv"] = {"iteration_seconds": simulate(one_f_one_b, silent).iteration_seconds}
        base = rows["1f1b"]["iteration_seconds"]
        for row in rows.values():
            row["ratio_to_1f1b"] = row["iteration_seconds"] / base
        result["profiles"][name] = {"schedules": rows}
    return result


def print_pipeline_simulated(sim: dict) -> None:
    mesh = "x".join(map(str, sim["mesh"]))
    print(f"\npipeline, simulated: {sim['stages']} stages of {mesh} meshes, {sim['microbatches']} micro-batches, "
          f"F {sim['forward_seconds'] * 1e3:.0f} ms, B {sim['backward_seconds'] * 1e3:.0f} ms; boundary resharding "
          f"{sim['boundary_seconds'][0] * 1e3:.0f} ms, skip "
          + ", ".join(f"{s * 1e3:.0f} ms" for s in sim["skip_seconds"]) + " (the planner's predictions)")
    for profile, data in sim["profiles"].items():
        cells = ", ".join(f"{name} {row['iteration_seconds'] * 1e3:.0f} ms ({row['ratio_to_1f1b']:.3f})"
                          for name, row in data["schedules"].items())
        print(f"  {profile:14} {cells}")
        shared = {name: row["iteration_seconds_shared_nic"] for name, row in data["schedules"].items()
                  if "iteration_seconds_shared_nic" in row}
        print(f"  {'':14} a stage's NIC shared by all its transfers (links=host): "
              + ", ".join(f"{name} {seconds * 1e3:.0f} ms ({seconds / shared['1f1b']:.3f})"
                          for name, seconds in shared.items()))


# ------------------------------------------------------------ pipeline, real
#: (stages, ranks per stage): the paper's end-to-end runs are 2-stage pipelines
#: (Table 3, pipeline degree 2); 4 stages put a middle node's activations and
#: gradients on one NIC.
PIPELINE_REAL_CONFIGS = ((2, 2), (4, 2))


def lower_quartile(values: list[float]) -> float:
    """The steps without the emulated NICs' intermittent stalls (tens of ms on a
    50 ms step, in some steps of both schedules alike): their lower quartile."""
    return statistics.quantiles(values, n=4)[0] if len(values) > 1 else values[0]


def run_pipeline_real(args: argparse.Namespace) -> dict:
    """examples/train_pipeline.py with 1F1B and eager-1F1B interleaved step by
    step in one launch, on an emulated cluster of one node per stage."""
    import tempfile

    configs = {}
    for stages, per_node in PIPELINE_REAL_CONFIGS:
        name = f"pipe-bench-{stages}"
        p2("cluster", "up", "--name", name, "--nodes", str(stages), "--per-node", str(per_node), "--nic", args.nic,
           "--fabric", args.fabric)
        try:
            with tempfile.TemporaryDirectory() as folder:
                out = Path(folder) / "pipeline.json"
                Path(folder).chmod(0o777)
                before = nic_drop_total(name)
                p2("cluster", "run", "--name", name, "--timeout", "1200", "--", sys.executable,
                   str(ROOT / "examples" / "train_pipeline.py"), "--schedule", "1f1b,eager-1f1b",
                   "--stages", str(stages), "--per-node", str(per_node), "--steps", str(args.pipeline_steps),
                   "--json", str(out))
                drops = nic_drop_total(name) - before
                data = json.loads(out.read_text())
        finally:
            p2("cluster", "down", "--name", name)
        schedules = {run["schedule"]: {"median_step_seconds": run["median_seconds"],
                                       "lower_quartile_step_seconds": lower_quartile(run["step_seconds"][1:]),
                                       "simulated_seconds": run.get("simulated_seconds"),
                                       "nic_floor_seconds": run.get("nic_floor_seconds"),
                                       "cores_busy": run.get("cores_busy"),
                                       "step_seconds": run["step_seconds"]} for run in data["runs"]}
        configs[f"{stages} stages"] = {
            "stages": stages, "per_node": per_node, "microbatches": data["runs"][0]["microbatches"],
            "activation_bytes": data["runs"][0]["activation_bytes"], "schedules": schedules,
            "nic_drops": drop_record(drops, sum(len(run["step_seconds"]) for run in data["runs"])),
            "speedup_eager_over_1f1b": schedules["1f1b"]["median_step_seconds"]
            / schedules["eager-1f1b"]["median_step_seconds"],
            "speedup_eager_over_1f1b_lower_quartile": schedules["1f1b"]["lower_quartile_step_seconds"]
            / schedules["eager-1f1b"]["lower_quartile_step_seconds"],
        }
    return {"fabric": args.fabric, "configs": configs}


def print_pipeline_real(real: dict) -> None:
    print(f"\npipeline on the emulated cluster ({real['fabric']} fabric; examples/train_pipeline.py, 1F1B and "
          "eager-1F1B interleaved; median step)")
    for name, config in real["configs"].items():
        cells = ", ".join(f"{schedule} {row['median_step_seconds'] * 1e3:.1f} ms "
                          f"(lower quartile {row['lower_quartile_step_seconds'] * 1e3:.1f}"
                          + (f", simulated {row['simulated_seconds'] * 1e3:.1f})" if row["simulated_seconds"] else ")")
                          for schedule, row in config["schedules"].items())
        floor = next(iter(config["schedules"].values()))["nic_floor_seconds"]
        print(f"  {name}: {cells}; eager-1F1B speed-up {config['speedup_eager_over_1f1b']:.2f}x median, "
              f"{config['speedup_eager_over_1f1b_lower_quartile']:.2f}x lower quartile"
              + (f"; NIC floor {floor * 1e3:.1f} ms" if floor else "")
              + f"; NIC queue drops {config['nic_drops']['per_iteration']:.2f} per step")


# ------------------------------------------------------------------ output
def grouped_bars(ax, groups: list[str], series: dict[str, list[float]]) -> None:
    """One bar per series in every group, side by side."""
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series.items()):
        ax.bar([i + (k - len(series) / 2 + 0.5) * width for i in range(len(groups))], values, width, label=label)
    ax.set_xticks(range(len(groups)), groups)
    ax.legend(fontsize=7)


def plot(result: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [key for key in ("table2", "pipeline_simulated", "pipeline_real") if key in result]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.2), squeeze=False,
                             gridspec_kw={"width_ratios": [2.2 if p == "table2" else 1 for p in panels]})
    for ax, panel in zip(axes[0], panels):
        if panel == "table2":
            rows = result["table2"]["cases"]
            grouped_bars(ax, [r["name"] for r in rows],
                         {label: [next(s["ratio_to_lower_bound"] or 0 for s in r["systems"] if s["name"] == label)
                                  for r in rows] for label, *_ in SYSTEMS})
            ax.axhline(1.0, color="k", lw=0.8)
            ax.axhline(GOAL_RATIO_TO_BOUND, color="k", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_ylabel("measured / NIC lower bound")
            shape = "×".join(map(str, result["table2"]["shape"]))
            ax.set_title(f"Table 2 cases, {shape} tensor, {result['table2']['cluster']['nic']} NIC")
        elif panel == "pipeline_simulated":
            profiles = result["pipeline_simulated"]["profiles"]
            names = list(next(iter(profiles.values()))["schedules"])
            grouped_bars(ax, list(profiles), {name: [p["schedules"][name]["iteration_seconds"] * 1e3
                                                     for p in profiles.values()] for name in names})
            ax.set_ylabel("simulated iteration, ms")
            ax.set_title("pipeline schedules, simulated")
        else:
            configs = result["pipeline_real"]["configs"]
            grouped_bars(ax, list(configs), {schedule: [c["schedules"][schedule]["lower_quartile_step_seconds"] * 1e3
                                                        for c in configs.values()]
                                             for schedule in ("1f1b", "eager-1f1b")})
            ax.set_ylabel("measured step, lower quartile ms")
            ax.set_title("pipeline on the emulated cluster (stall-free steps)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def print_table2(table2: dict) -> None:
    shape = "x".join(map(str, table2["shape"]))
    print(f"\nTable 2 cases: {shape} x {table2['element_bytes']} B ({table2['tensor_bytes'] / 2**20:.0f} MiB), "
          f"{table2['cluster']['nodes']} x {table2['cluster']['per_node']} cluster, NIC {table2['cluster']['nic']}, "
          f"{table2['cluster']['fabric']} fabric ({table2['nic_drops']['per_iteration']:.2f} NIC queue drops per "
          "program run); measured median ms (ratio to the NIC lower bound)")
    labels = [label for label, *_ in SYSTEMS]
    print(f"{'case':6} {'tasks':>5} {'bound':>8}  " + "  ".join(f"{label:>24}" for label in labels))
    for row in table2["cases"]:
        cells = []
        for system in row["systems"]:
            ratio = system["ratio_to_lower_bound"]
            cells.append(f"{system['measured_seconds'] * 1e3:10.1f} ({ratio:5.2f}x) "
                         f"p{system['predicted_seconds'] * 1e3:6.0f}" if ratio else
                         f"{system['measured_seconds'] * 1e3:24.1f}")
        print(f"{row['name']:6} {row['unit_tasks']:5d} {row['lower_bound_seconds'] * 1e3:8.1f}  " + "  ".join(cells))
    findings = table2["findings"]
    within = findings["ensemble_ratio_to_lower_bound"]
    print(f"ensemble / lower bound: " + ", ".join(f"{k} {v:.2f}x" for k, v in within.items())
          + f"  (goal <= {GOAL_RATIO_TO_BOUND}: {sum(findings['ensemble_within_goal'].values())}/{len(within)})")
    print("ensemble speed-up over send/recv: "
          + ", ".join(f"{k} {v:.2f}x" for k, v in findings["speedup_over_send_recv"].items())
          + f"  (goal >= {GOAL_SPEEDUP})")
    kept = findings["figure8_ordering_kept"]
    print(f"Figure 8 ordering (naive >= load balance >= ensemble, 5 % slack) kept on {sum(kept.values())}/{len(kept)}"
          f" cases; prediction MAPE {findings['mape_all'] * 100:.0f} % ("
          + ", ".join(f"{k} {v * 100:.0f} %" for k, v in findings["mape"].items()) + ")")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape-divisor", type=int, default=4, help="divide (1024, 1024, 512) by this per dim")
    parser.add_argument("--element-bytes", type=int, default=4, choices=(2, 4, 8))
    parser.add_argument("--cases", type=lambda text: [c.strip() for c in text.split(",") if c.strip()],
                        default=[], help="comma-separated Table 2 cases (default: all nine)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of DFS per plan")
    parser.add_argument("--nic", default="200Mbit/s")
    parser.add_argument("--fabric", default=DEFAULT_FABRIC, help=FABRIC_HELP)
    parser.add_argument("--microbatches", type=int, default=16, help="micro-batches of the simulated pipeline")
    parser.add_argument("--pipeline-steps", type=int, default=21, help="steps of each real pipeline run")
    parser.add_argument("--simulate-only", action="store_true", help="only the simulated pipeline part")
    parser.add_argument("--skip", type=lambda text: [c.strip() for c in text.split(",") if c.strip()], default=[],
                        help="parts to skip: table2, pipeline_simulated, pipeline_real")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.shape_divisor < 1 or args.repeat < 1:
        print("resharding: --shape-divisor and --repeat must be >= 1", file=sys.stderr)
        return 2
    if problem := fabric_problem("resharding", args.fabric):
        print(problem, file=sys.stderr)
        return 2
    unknown = [c for c in args.cases if c not in {case.name for case in TABLE2_CASES}]
    if unknown:
        print(f"resharding: unknown case {unknown[0]!r}; use case1..case9", file=sys.stderr)
        return 2
    measured_parts = not args.simulate_only
    if measured_parts and not can_manage_namespaces():
        print("resharding: the measured parts need CAP_NET_ADMIN (run as root) for the emulated cluster; "
              "--simulate-only runs the rest", file=sys.stderr)
        return 2
    result: dict = {"benchmark": "resharding"}
    if measured_parts and "table2" not in args.skip:
        result["table2"] = run_table2(args)
        print_table2(result["table2"])
    if "pipeline_simulated" not in args.skip:
        result["pipeline_simulated"] = run_pipeline_simulated(args)
        print_pipeline_simulated(result["pipeline_simulated"])
    if measured_parts and "pipeline_real" not in args.skip:
        result["pipeline_real"] = run_pipeline_real(args)
        print_pipeline_real(result["pipeline_real"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "resharding.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, args.out / "resharding.png")
    print(f"\nwrote {args.out / 'resharding.json'} and {args.out / 'resharding.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
