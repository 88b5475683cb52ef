"""Live searches searched again, off the job: is a search reproducible, and how much does its seed
move what it finds (issue 32, items 3 and 4)?

Input: search records (``p2 serve --record-searches DIR``; ``p2 demo`` and ``benchmarks/loop.py``
keep them: ``--out/runs/JOB-FABRIC-RUN/searches/``). Each record holds one live search's inputs
(every rank's trace window, the topology, the seed, the running plan, the cluster state's prior
fit) and what it found. Per record this runs the same search in this process
(:func:`optimizer_service.service.planning.search`):

* with the recorded seed: the same plan and prediction (``reproduced``) — a search stops by its
  evaluations, never by the clock, so a window gives one plan;
* with ``--seeds`` more seeds: each one's predicted iteration time and whether it chose another
  plan, so the spread the seed alone puts on a first plan is measured on the windows a real run
  saw, apart from what differs from one run's windows to the next.

Each record's plan is shown with what the job then measured under it and the policy's
prediction of it (the model's ratio applied to the running plan's measured time), so a model
change can be judged on the windows that misled it: with ``--demo`` (``p2 demo``'s JSON, kept by
``benchmarks/loop.py`` beside the records) its ``plans`` rows, measured on the cluster state each
plan was committed for; else with ``--store`` (the service's ``service.db``) the plan's stored
median, over every iteration it ran (across a cluster change too).

    .venv/bin/python benchmarks/replay.py RECORD|FOLDER ... [--seeds 4]
        [--demo demo.json | --store service.db] [--out benchmarks/results/replay]

Writes ``replay.json`` and ``replay.png`` under ``--out`` and prints a summary. Bad input: one
line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from optimizer_service.errors import InvalidInputError
from optimizer_service.service import search_record
from optimizer_service.service.planning import search
from optimizer_service.service.store.sqlite_store import SqlitePlanStore

ROOT = Path(__file__).resolve().parents[1]
MAX_SEEDS = 64


def record_paths(names: list[str]) -> list[Path]:
    """Every record named: a file as it is, a folder's ``*.json`` by job and version."""
    paths: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.glob("*.json"), key=search_record.file_order)
            if not found:
                raise InvalidInputError(f"folder {path} holds no search record (*.json)")
            paths += found
        elif path.is_file():
            paths.append(path)
        else:
            raise InvalidInputError(f"{path} is neither a search record nor a folder of them")
    return paths


def _ops(plan_json: str) -> list:
    return json.loads(plan_json).get("ops", [])


def run_search(record: search_record.SearchRecord, seed: int) -> dict:
    started = time.perf_counter()
    outcome = search(record.traces, record.topology_yaml, seed, record.running_plan_json, record.evaluations,
                     record.prior_fit)
    return {"seed": seed, "predicted_seconds": outcome.predicted_seconds,
            "same_plan": _ops(outcome.plan_json) == _ops(record.plan_json), "evaluations": outcome.evaluations,
            "stopped_by": outcome.stopped_by, "seconds": time.perf_counter() - started}


def demo_plans(path: Path) -> dict[int, dict]:
    """Plan version -> ``p2 demo``'s row of it (its JSON's ``plans``)."""
    try:
        report = json.loads(path.read_text())
        rows = {int(row["plan_version"]): row for row in report["plans"]}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise InvalidInputError(f"--demo {path} is not p2 demo's JSON with its 'plans' ({error})") from None
    return rows


def measured(store: SqlitePlanStore | None, record: search_record.SearchRecord,
             demo: dict[int, dict] | None = None) -> dict:
    """What the job measured under the record's plan, and the policy's prediction of it: the demo's
    row (on the plan's own cluster state), else the store's plan state."""
    if demo is not None:
        row = demo.get(record.version) or {}
        return {"measured_seconds": row.get("measured_iteration_seconds"),
                "policy_predicted_seconds": row.get("predicted_iteration_seconds"),
                "measured_iterations": row.get("steps", 0), "measured_cluster": row.get("cluster")}
    state = None if store is None else store.get_plan_state(record.job_id, record.version)
    if not state:
        return {"measured_seconds": None, "policy_predicted_seconds": None, "measured_iterations": 0}
    return {"measured_seconds": state.get("measured_seconds"),
            "policy_predicted_seconds": state.get("predicted_seconds"),
            "measured_iterations": state.get("measured_iterations", 0)}


def replay(path: Path, seeds: int, store: SqlitePlanStore | None, demo: dict[int, dict] | None = None) -> dict:
    record = search_record.read(path)
    recorded = record.outcome.get("predicted_seconds")
    again = run_search(record, record.seed)
    others = [run_search(record, record.seed + k) for k in range(1, seeds + 1)]
    row = {"file": str(path), "job_id": record.job_id, "version": record.version, "cluster": record.cluster,
           "first_in_state": record.running_plan_json is None and record.prior_fit is None,
           "recorded_predicted_seconds": recorded, "replayed": again,
           "reproduced": again["same_plan"] and recorded is not None
           and abs(again["predicted_seconds"] - recorded) <= 1e-9 * max(1.0, recorded),
           "seeds": others, **measured(store, record, demo)}
    predictions = [again["predicted_seconds"]] + [other["predicted_seconds"] for other in others]
    row["seed_spread"] = max(predictions) / min(predictions) - 1 if min(predictions) > 0 else None
    row["plans_differ"] = sum(not other["same_plan"] for other in others)
    model = row["policy_predicted_seconds"]
    row["prediction_error"] = (model / row["measured_seconds"] - 1
                               if model and row["measured_seconds"] else None)
    return row


def summary(rows: list[dict]) -> list[str]:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.1f}"

    lines = [f"{'record':<28} {'first':>5} {'pred':>7} {'again':>7} {'same':>4} {'seeds min/med/max':>21} "
             f"{'other plans':>11} {'meas':>7} {'err':>6}"]
    for row in rows:
        seeds = [row["replayed"]["predicted_seconds"]] + [s["predicted_seconds"] for s in row["seeds"]]
        spread = f"{ms(min(seeds))}/{ms(statistics.median(seeds))}/{ms(max(seeds))}"
        error = "-" if row["prediction_error"] is None else f"{row['prediction_error']:+.0%}"
        lines.append(f"{Path(row['file']).name[:28]:<28} {'yes' if row['first_in_state'] else 'no':>5} "
                     f"{ms(row['recorded_predicted_seconds']):>7} {ms(row['replayed']['predicted_seconds']):>7} "
                     f"{'yes' if row['reproduced'] else 'NO':>4} {spread:>21} "
                     f"{row['plans_differ']:>5} of {len(row['seeds']):<3} "
                     f"{ms(row['measured_seconds']):>7} {error:>6}")
    lines.append("(milliseconds per iteration, the model's own predictions; 'same': the recorded seed gave the "
                 "recorded plan and prediction; 'meas' and 'err': what the job measured under the plan and the "
                 "policy's prediction against it, from --demo or --store)")
    return lines


def plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2), 4))
    for k, row in enumerate(rows):
        seeds = [s["predicted_seconds"] * 1e3 for s in row["seeds"]]
        axis.scatter([k] * len(seeds), seeds, s=12, color="tab:blue", label="other seeds" if k == 0 else None)
        axis.scatter([k], [row["replayed"]["predicted_seconds"] * 1e3], marker="x", color="black",
                     label="recorded seed" if k == 0 else None)
        if row["measured_seconds"]:
            axis.scatter([k], [row["measured_seconds"] * 1e3], marker="*", s=60, color="tab:red",
                         label="measured" if k == 0 else None)
    axis.set_xticks(range(len(rows)), [f"{row['job_id'][:10]} v{row['version']}" for row in rows],
                    rotation=45, ha="right", fontsize=7)
    axis.set_ylabel("ms per iteration")
    axis.set_title("live searches searched again: the model's prediction per seed")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", help="search records, or folders of them")
    parser.add_argument("--seeds", type=int, default=4, help=f"more seeds per record (0 to {MAX_SEEDS})")
    parser.add_argument("--demo", type=Path, help="the run's p2 demo JSON: what each plan measured on its "
                        "cluster state")
    parser.add_argument("--store", type=Path, help="the run's service.db: each plan's stored median (without --demo)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replay")
    args = parser.parse_args(argv)
    if not 0 <= args.seeds <= MAX_SEEDS:
        parser.error(f"--seeds {args.seeds} must be 0 to {MAX_SEEDS}")
    store = None
    try:
        paths = record_paths(args.records)
        demo = None if args.demo is None else demo_plans(args.demo)
        if args.store is not None:
            if not args.store.is_file():
                raise InvalidInputError(f"--store {args.store} is not a file (the run's service.db)")
            store = SqlitePlanStore.open(args.store)
        rows = []
        for number, path in enumerate(paths, 1):
            print(f"[{number}/{len(paths)}] {path.name}: searching again with {1 + args.seeds} seed(s)", flush=True)
            rows.append(replay(path, args.seeds, store, demo))
    except InvalidInputError as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    finally:
        if store is not None:
            store.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replay.json").write_text(json.dumps({"records": rows}, indent=1) + "\n")
    plot(args.out / "replay.png", rows)
    print("\n".join(summary(rows)))
    print(f"wrote {args.out / 'replay.json'} and {args.out / 'replay.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
