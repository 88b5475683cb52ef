"""Jobs and plans from the service as JSON (stable field names) and as text tables."""

from __future__ import annotations

import json
import time

from optimizer_service.plan.proto_codec import plan_from_proto
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
                       "last_seen_unix": r.last_seen_unix} for r in job.ranks]}


def plan_dict(record: api.PlanRecord, with_plan: bool = True) -> dict:
    data = {"job_id": record.job_id, "version": record.version, "state": _PLAN_STATES.get(record.state, "unknown"),
            "reason": record.reason, "switch_iteration": record.switch_iteration, "epoch": record.epoch,
            "submitted_unix": record.submitted_unix, "decided_unix": record.decided_unix or None,
            "ranks": [{"rank": r.rank, "state": r.state, "reason": r.reason} for r in record.ranks]}
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


def job_text(job: dict) -> str:
    lines = [f"job {job['job_id']}: {job['state']}, {job['world_size']} ranks, committed plan "
             f"{job['committed_version'] or 'none'}, switches every {job['switch_every']} iterations, "
             f"epoch {job['epoch']}",
             f"  {'RANK':>4} {'HOST':<20} {'LOCAL':>5} {'BACKEND':<14} {'CONN':<4} {'PLAN':>4} {'ITER':>7}  SEEN"]
    for r in job["ranks"]:
        lines.append(f"  {r['rank']:>4} {r['host'][:20]:<20} {r['local_rank']:>5} {r['backend'][:14]:<14} "
                     f"{'yes' if r['connected'] else 'no':<4} {r['running_version'] or '-':>4} {r['iteration']:>7}  "
                     f"{_ago(r['last_seen_unix'])}")
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
