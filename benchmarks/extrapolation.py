"""Where a first plan's prediction goes wrong: a plan priced on the window before it ran, line by
line against the window it ran in (issue 32, item 3).

A cluster state's first search sees only passthrough's window: every op whole, on channel 0, so
the fit has no sample of the other channels or of the motifs inside a node (the host), and those
lines keep their calibrated values (:mod:`optimizer_service.syndicate.telemetry_fit`). Its plan
then runs, and a later search reads the plan's own window. Given the first search's record and a
later one of the same cluster state whose window ran a plan, this prices that plan on the *first*
window's DAG and load (as the first search priced its plan:
:func:`optimizer_service.syndicate.live_search.live_search`, at the load the plan puts on the
host's cores) with:

* the first window's fit;
* the middle of the first window's two readings, the excess beyond the fitted rate all per motif
  and all per round (:data:`optimizer_service.syndicate.live_search.BRACKET`): how a first search
  predicts its plan (for the first search's own plan, its prediction);
* the same with the lines the window has no sample of at their calibrated time per round, as
  the service priced them until they took the fitted lines' (``Line.round_shared``);
* each line (channel 0, 1, …, host) taken from the later window's fit, one at a time;
* every line the first window had no sample of, from the later window's fit;
* the later window's fit whole.

With ``--demo`` (``p2 demo``'s JSON, kept by ``benchmarks/loop.py`` beside the records) each
row's error against what the job measured under the plan, on the cluster state it was
committed for.

    .venv/bin/python benchmarks/extrapolation.py FIRST.json LATER.json [--demo demo.json]
        [--out benchmarks/results/extrapolation]

Writes ``extrapolation.json`` and ``extrapolation.png`` under ``--out`` and prints a summary. Bad
input: one line, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.replay import demo_plans
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan import Plan
from optimizer_service.service import search_record
from optimizer_service.syndicate.host_contention import Contention, contended_seconds
from optimizer_service.syndicate.host_load import host_loads
from optimizer_service.syndicate.live_search import first_window_readings, middle, plan_measured
from optimizer_service.syndicate.plan_import import running_choice
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.refit import refit
from optimizer_service.syndicate.scheduler import Policy
from optimizer_service.syndicate.telemetry_fit import TelemetryFit, fit_telemetry
from optimizer_service.syndicate.trace_window import window_dag

#: The row of a first window's prediction (module docstring).
MIDDLE = "the middle of the first window's two readings"


def _read(path: Path) -> search_record.SearchRecord:
    if not path.is_file():
        raise InvalidInputError(f"{path} is not a search record (no such file)")
    return search_record.read(path)


def _fit(topology: Topology, record: search_record.SearchRecord) -> TelemetryFit:
    """The fit the record's search made of its window (with its running plan and prior fit), as
    :func:`~optimizer_service.syndicate.live_search.live_search` makes it."""
    running = Plan.parse(record.running_plan_json) if record.running_plan_json else None
    prior = TelemetryFit.from_dict(record.prior_fit) if record.prior_fit else None
    return fit_telemetry(topology, record.traces, plan_measured(running, topology), prior)


def variants(first: TelemetryFit, later: TelemetryFit) -> list[tuple[str, TelemetryFit]]:
    """The fits the plan is priced with (module docstring), named."""
    rows = [("the first window's fit", first), ("the same, unsampled rounds as calibrated", _calibrated_rounds(first))]
    for channel in sorted(first.channels):
        if channel in later.channels:
            rows.append((f"channel {channel} from the later window",
                         replace(first, channels={**first.channels, channel: later.channels[channel]})))
    rows.append(("host from the later window", replace(first, host=later.host)))
    unsampled = [c for c, line in first.channels.items() if line.samples == 0 and c in later.channels]
    rows.append(("unsampled lines from the later window", replace(
        first, channels={**first.channels, **{c: later.channels[c] for c in unsampled}},
        host=later.host if first.host.samples == 0 else first.host)))
    rows.append(("the later window's fit", later))
    return rows


def _calibrated_rounds(fit: TelemetryFit) -> TelemetryFit:
    """``fit`` with the rounds its unsampled lines took from the fitted ones at their calibrated latency
    (``Line.round_shared``; how the service priced them before commit ``14fafda``)."""
    def calibrated(line):
        return replace(line, latency_scale=1.0, round_shared=False) if line.round_shared else line

    return replace(fit, channels={c: calibrated(line) for c, line in fit.channels.items()}, host=calibrated(fit.host))


def extrapolate(first_path: Path, later_path: Path, demo: dict[int, dict] | None = None) -> dict:
    first, later = _read(first_path), _read(later_path)
    if first.job_id != later.job_id or first.cluster != later.cluster:
        raise InvalidInputError(f"{first_path.name} ({first.job_id}, state {first.cluster}) and {later_path.name} "
                                f"({later.job_id}, state {later.cluster}) are not of one job and cluster state")
    plan = Plan.parse(later.running_plan_json) if later.running_plan_json else None
    if plan is None or not plan.ops:
        raise InvalidInputError(f"{later_path.name}'s window ran no plan (passthrough): nothing to price")
    topology = Topology.from_yaml(first.topology_yaml, source=f"{first_path.name}'s topology")
    first_fit, later_fit = _fit(topology, first), _fit(topology, later)
    dag, measured, _ = window_dag(first.traces, name="live")
    hosts = host_loads(first.traces)
    fitted = refit(topology, first_fit)
    problem = Problem(dag, first_fit.motif_cost(fitted))
    choice = running_choice(problem, plan)
    if choice is None:
        raise InvalidInputError(f"{later_path.name}'s running plan v{plan.version} cannot be read on "
                                f"{first_path.name}'s window (another job's ops?)")
    contention = Contention.of(hosts, measured)

    def price(fit: TelemetryFit) -> float:
        fitted = refit(topology, fit)
        return contended_seconds(lambda k: problem.steady_seconds_priced(fit.contended(k).motif_cost(fitted), choice,
                                                                        Policy.CRITICAL_PATH), contention)[0]

    row = (demo or {}).get(plan.version) or {}
    truth = row.get("measured_iteration_seconds")
    priced = [(name, price(fit)) for name, fit in variants(first_fit, later_fit)]
    if not first.running_plan_json and not first.prior_fit:      # a cluster state's first window: whole ops only
        _, _, bracket = first_window_readings(first.traces, topology)
        priced.insert(1, (MIDDLE, middle([price(reading) for reading in bracket])))
    rows = [{"fit": name, "seconds": seconds, "error": None if not truth else seconds / truth - 1}
            for name, seconds in priced]
    return {"first": str(first_path), "later": str(later_path), "job_id": first.job_id, "cluster": first.cluster,
            "plan_version": plan.version, "first_window_seconds": measured,
            "first_recorded_predicted_seconds": first.outcome.get("predicted_seconds"),
            "first_plan_is_priced": first.plan_json is not None and Plan.parse(first.plan_json).ops == plan.ops,
            "measured_seconds": truth, "measured_cluster": row.get("cluster"),
            "lines": {"first": first_fit.to_dict(topology), "later": later_fit.to_dict(topology)}, "rows": rows}


def summary(report: dict) -> list[str]:
    lines = [f"v{report['plan_version']} of {report['job_id']} priced on the window of "
             f"{Path(report['first']).name} (passthrough measured {report['first_window_seconds'] * 1e3:.1f} ms)"
             + (f"; measured under it {report['measured_seconds'] * 1e3:.1f} ms" if report["measured_seconds"] else "")]
    for row in report["rows"]:
        error = "" if row["error"] is None else f"  {row['error'] * 100:+.0f} %"
        lines.append(f"  {row['fit']:<48} {row['seconds'] * 1e3:8.1f} ms{error}")
    return lines


def plot(path: Path, report: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    figure, axis = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.5))
    axis.barh(range(len(rows)), [row["seconds"] * 1e3 for row in rows], color="tab:blue")
    if report["measured_seconds"]:
        axis.axvline(report["measured_seconds"] * 1e3, color="tab:red", ls="--", label="measured")
        axis.legend(fontsize=7)
    axis.set_yticks(range(len(rows)), [row["fit"] for row in rows], fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel("ms per iteration")
    axis.set_title(f"v{report['plan_version']} priced on the first window", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="the search record of a cluster state's first search")
    parser.add_argument("later", type=Path, help="a later search record of that state whose window ran a plan")
    parser.add_argument("--demo", type=Path, help="the run's p2 demo JSON: what the plan measured")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "extrapolation")
    args = parser.parse_args(argv)
    try:
        report = extrapolate(args.first, args.later, None if args.demo is None else demo_plans(args.demo))
    except InvalidInputError as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "extrapolation.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(args.out / "extrapolation.png", report)
    print("\n".join(summary(report)))
    print(f"wrote {args.out / 'extrapolation.json'} and {args.out / 'extrapolation.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
