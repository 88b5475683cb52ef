"""Jobs and plans from the service as JSON (stable field names) and as text tables.

Every plan record carries its iteration times: ``predicted_seconds``,
``measured_seconds`` and ``bound_iteration_seconds`` (the lower bound on the
job's iteration time on the cluster state the plan was searched for,
:mod:`optimizer_service.syndicate.bound`), with ``ratio_to_bound`` (measured /
bound) and ``predicted_ratio_to_bound`` (predicted / bound); None where one is
not known. A job's ``passthrough`` has the same fields for version 0 (no plan):
its measured time while it ran, and as its bound the first search's (the
search made on the cluster state passthrough ran in).

``p2 jobs show`` adds the job's latest search (GetJob's ``latest_search``):
``fit``, ``bound`` and ``search_version``
(:mod:`optimizer_service.service.search_view`).
"""

from __future__ import annotations

import json
import time

from optimizer_service.plan.proto_codec import plan_from_proto
from optimizer_service.service import search_view
from optimizer_service.service.jobs import ratio_to_bound
from optimizer_service.syndicate.host_load import HostLoad
from optimizer_service.units import human_seconds
from p2.v1 import optimizer_pb2 as api

_JOB_STATES = {api.REGISTERING: "registering", api.LIVE: "live", api.DEGRADED: "degraded"}
_PLAN_STATES = {api.PREPARING: "preparing", api.COMMITTED: "committed", api.ABORTED: "aborted"}


def job_dict(job: api.Job) -> dict:
    return {"job_id": job.job_id, "world_size": job.world_size, "state": _JOB_STATES.get(job.state, "unknown"),
            "committed_version": job.committed_version, "epoch": job.epoch, "switch_every": job.switch_every,
            "created_unix": job.created_unix,
            "ranks": [{"rank": r.rank, "host": r.host, "local_rank": r.local_rank, "backend": r.backend,
                       "torch_version": r.torch_version, "enforcer_version": r.enforcer_version,
                       "connected": r.connected, "running_version": r.running_version, "iteration": r.iteration,
                       "last_seen_unix": r.last_seen_unix} for r in job.ranks],
            "passthrough": _times(None, _optional(job, "passthrough_measured_seconds"),
                                  _optional(job, "passthrough_bound_seconds"))}


def latest_search(job: api.Job) -> dict:
    """The job's latest search: ``fit``, ``bound`` and ``search_version`` (:func:`search_view.latest_search`)."""
    return search_view.latest_search(json.loads(job.latest_search) if job.latest_search else None)


def _optional(message, name: str) -> float | None:
    return getattr(message, name) if message.HasField(name) else None


def _times(predicted: float | None, measured: float | None, bound: float | None) -> dict:
    return {"predicted_seconds": predicted, "measured_seconds": measured, "bound_iteration_seconds": bound,
            "ratio_to_bound": ratio_to_bound(measured, bound),
            "predicted_ratio_to_bound": ratio_to_bound(predicted, bound)}


def plan_dict(record: api.PlanRecord, with_plan: bool = True) -> dict:
    data = {"job_id": record.job_id, "version": record.version, "state": _PLAN_STATES.get(record.state, "unknown"),
            "reason": record.reason, "switch_iteration": record.switch_iteration, "epoch": record.epoch,
            "submitted_unix": record.submitted_unix, "decided_unix": record.decided_unix or None,
            "ranks": [{"rank": r.rank, "state": r.state, "reason": r.reason} for r in record.ranks],
            **_times(_optional(record, "predicted_seconds"), _optional(record, "measured_seconds"),
                     _optional(record, "bound_iteration_seconds"))}
    if with_plan and record.HasField("plan"):
        data["plan"] = json.loads(plan_from_proto(record.plan).to_json())
    return data


def _ago(unix: float) -> str:
    if not unix:
        return "-"
    seconds = max(0.0, time.time() - unix)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def jobs_table(jobs: list[dict]) -> str:
    if not jobs:
        return "no jobs (ranks register when they start with P2_SERVICE set)"
    lines = [f"{'JOB':<28} {'STATE':<12} {'RANKS':>7} {'PLAN':>5} {'ITERATION':>9}"]
    for job in jobs:
        connected = sum(r["connected"] for r in job["ranks"])
        iteration = max((r["iteration"] for r in job["ranks"]), default=0)
        lines.append(f"{job['job_id']:<28} {job['state']:<12} {connected:>3}/{job['world_size']:<3} "
                     f"{job['committed_version'] or '-':>5} {iteration:>9}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else human_seconds(value)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def times_table(job: dict) -> list[str]:
    """``p2 jobs show``'s iteration times: passthrough, then every plan, each beside the bound."""
    lines = ["  iteration times beside the lower bound (no plan is faster on the cluster state it was searched "
             "for; passthrough's: the first search's)",
             f"  {'PLAN':<11} {'STATE':<10} {'PREDICTED':>9} {'MEASURED':>9} {'BOUND':>9} {'PRED/BOUND':>10} "
             f"{'MEAS/BOUND':>10}"]
    rows = [("passthrough", "-", job["passthrough"])] + [(f"v{p['version']}", p["state"], p) for p in job["plans"]]
    for name, state, times in rows:
        lines.append(f"  {name:<11} {state:<10} {_seconds(times['predicted_seconds']):>9} "
                     f"{_seconds(times['measured_seconds']):>9} {_seconds(times['bound_iteration_seconds']):>9} "
                     f"{_ratio(times['predicted_ratio_to_bound']):>10} {_ratio(times['ratio_to_bound']):>10}")
    return lines


def _figure(value: float | None, scale: float) -> str:
    """``value * scale`` to three significant digits, whole from 100 on; ``-`` for none."""
    if value is None:
        return "-"
    scaled = value * scale
    return f"{scaled:.0f}" if abs(scaled) >= 100 else f"{scaled:.3g}"


def fit_table(job: dict) -> list[str]:
    """``p2 jobs show``'s fitted model of the latest search: per channel and for the host the
    fixed cost per motif, the latency of a round and the rate (each beside its calibrated value),
    the samples and how each was set; each host's CPU per iteration (the bound's host term);
    then each fitted parameter's effect on the prediction and, on a first search, the second
    readings it chose by (:func:`search_view.other_readings`)."""
    fit = job.get("fit")
    if not fit:
        return ["  no fitted model yet (the first search fits one to the job's telemetry)"]
    calibrated = fit.get("calibrated_motif_seconds")
    bound = job.get("bound")
    lines = [f"  the model the latest search (v{job['search_version']}) fitted to the job's telemetry "
             f"(calibrated: {_figure(calibrated, 1e3)} ms per motif)"
             + ("" if not bound else f"; its bound {_seconds(bound['seconds'])}, bound by {bound['binding']}"),
             f"  {'WHERE':<11} {'MS/MOTIF':>8} {'MS/ROUND (CALIBRATED)':>22} {'MB/S (CALIBRATED)':>19} "
             f"{'SAMPLES':>7}  HOW"]
    for where, entry in search_view.fit_rows(fit):
        round_ = f"{_figure(entry.get('round_seconds'), 1e3)} ({_figure(entry.get('calibrated_round_seconds'), 1e3)})"
        rate = (f"{_figure(entry.get('rate_bytes_per_s'), 1e-6)} "
                f"({_figure(entry.get('calibrated_rate_bytes_per_s'), 1e-6)})")
        lines.append(f"  {where:<11} {_figure(entry['motif_seconds'], 1e3):>8} {round_:>22} {rate:>19} "
                     f"{entry['samples']:>7}  {entry['how']}")
    predicted = fit.get("fit_predicted_seconds") or fit.get("predicted_seconds")
    for host in (bound or {}).get("hosts", []):
        lines.append(f"  {HostLoad.from_dict(host)}")
    between = fit.get("predicted_between")
    if between:
        lines.append(f"  predicted {_figure(fit['predicted_seconds'], 1e3)} ms: the middle of the window read with all "
                     f"its excess per motif ({_figure(between[0], 1e3)} ms) and all of it per round "
                     f"({_figure(between[-1], 1e3)} ms); by this fit {_figure(predicted, 1e3)} ms")
    for effect in fit.get("effects", []):
        lines.append(f"  prediction without {effect['parameter']}: {effect['predicted_seconds_without'] * 1e3:.1f} ms "
                     f"(with all: {predicted * 1e3:.1f} ms)")
    other = search_view.other_readings(fit)
    if other is not None:
        readings, chosen = other

        def values(rows: list[tuple[str, float]], unit: str) -> str:
            return ", ".join(f"{where} {_figure(seconds, 1e3)} ms" for where, seconds in rows) + f" {unit}"

        lines.append("  chosen by the worst of this fit and the window read with "
                     + "; and with ".join(f"{how} ({values(rows, unit)})" for how, rows, unit in readings)
                     + ("" if chosen is None else f"; the chosen plan at the worst reading {_figure(chosen, 1e3)} ms"))
    return lines


def job_text(job: dict) -> str:
    lines = [f"job {job['job_id']}: {job['state']}, {job['world_size']} ranks, committed plan "
             f"{job['committed_version'] or 'none'}, switches every {job['switch_every']} iterations, "
             f"epoch {job['epoch']}",
             f"  {'RANK':>4} {'HOST':<20} {'LOCAL':>5} {'BACKEND':<14} {'CONN':<4} {'PLAN':>4} {'ITER':>7}  SEEN"]
    for r in job["ranks"]:
        lines.append(f"  {r['rank']:>4} {r['host'][:20]:<20} {r['local_rank']:>5} {r['backend'][:14]:<14} "
                     f"{'yes' if r['connected'] else 'no':<4} {r['running_version'] or '-':>4} {r['iteration']:>7}  "
                     f"{_ago(r['last_seen_unix'])}")
    if "plans" in job:
        lines += times_table(job)
    if "fit" in job:
        lines += fit_table(job)
    return "\n".join(lines)


def plans_table(plans: list[dict]) -> str:
    if not plans:
        return "no plans (submit one with p2 plan submit --job JOB plan.json)"
    lines = [f"{'VERSION':>7} {'STATE':<10} {'SWITCH AT':>9} {'SUBMITTED':>10}  RANKS / REASON"]
    for plan in plans:
        counts: dict[str, int] = {}
        for rank in plan["ranks"]:
            counts[rank["state"]] = counts.get(rank["state"], 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        if plan["reason"]:
            summary += f"; {plan['reason']}"
        lines.append(f"{plan['version']:>7} {plan['state']:<10} {plan['switch_iteration']:>9} "
                     f"{_ago(plan['submitted_unix']):>10}  {summary}")
    return "\n".join(lines)


def plan_text(plan: dict) -> str:
    lines = [f"plan {plan['version']} of job {plan['job_id']}: {plan['state']}"
             + (f" ({plan['reason']})" if plan["reason"] else "")
             + f", switch at iteration {plan['switch_iteration']}, epoch {plan['epoch']}"]
    for rank in plan["ranks"]:
        lines.append(f"  rank {rank['rank']}: {rank['state']}" + (f" ({rank['reason']})" if rank["reason"] else ""))
    lines.append(f"  iteration: predicted {_seconds(plan['predicted_seconds'])}, measured "
                 f"{_seconds(plan['measured_seconds'])}, bound {_seconds(plan['bound_iteration_seconds'])} "
                 f"(measured/bound {_ratio(plan['ratio_to_bound'])}, predicted/bound "
                 f"{_ratio(plan['predicted_ratio_to_bound'])})")
    if "plan" in plan:
        body = plan["plan"]
        lines.append(f"  {len(body['ops'])} planned op(s), channels {', '.join(body['channels']) or '0'}"
                     + (f", predicted {body['predicted_iteration_seconds']:.4g} s/iteration"
                        if body.get("predicted_iteration_seconds") is not None else ""))
    return "\n".join(lines)


def decisions_text(job_id: str, decisions) -> str:
    """``p2 jobs events``: one line a decision (``p2.v1.Decision``), oldest first."""
    if not decisions:
        return f"job {job_id}: no replanning decisions yet (replanning off, or before its first plan)"
    lines = []
    for decision in decisions:
        when = time.strftime("%H:%M:%S", time.localtime(decision.unix))
        step = f"step {decision.iteration + 1}" if decision.iteration >= 0 else "-"
        version = f"v{decision.version}" if decision.version else ""
        lines.append(f"{when} {step:>10} {decision.kind:<13} {version:>4}  {decision.reason}")
    return "\n".join(lines)
