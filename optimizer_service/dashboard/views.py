"""The dashboard's data: plain dicts built from the service core, shared by the
JSON API and the HTML pages (a page shows exactly what its ``/api/`` route
returns). Field names follow ``p2 jobs show --json`` where they overlap."""

from __future__ import annotations

import re
import time

from optimizer_service.dashboard import plan_reading
from optimizer_service.dashboard.offload import Offloader
from optimizer_service.service.core import ServiceCore
from optimizer_service.service import search_view
from optimizer_service.service.jobs import Job, PlanState, ratio_to_bound

SPARKLINE = 60              # iterations in a jobs-page sparkline
TELEMETRY_PAGE = 1_000      # iterations one telemetry answer carries at most
#: A job's topology is shown by name when it is one (a preset); a rank's YAML (up to 64 KiB) is not echoed.
PRESET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _policy(core: ServiceCore, job: Job):
    """The job's replanning policy (None: the service does not replan, or the job has had no event yet)."""
    return core.replanner.policy(job.job_id) if core.replanner is not None else None


def job_summary(core: ServiceCore, job: Job) -> dict:
    """One row of the jobs page. ``iteration_seconds`` and ``measured_seconds`` are the
    job's one measured iteration time (:meth:`ServiceCore.iteration_time`);
    ``bound_iteration_seconds`` the lower bound beside the running plan and
    ``ratio_to_bound`` measured / bound (:meth:`ServiceCore.prediction`)."""
    measured = core.iteration_time(job)
    expected = core.prediction(job, measured)
    history = list(job.live.history)
    policy = _policy(core, job)
    now = core.clock()
    connected = {rank for rank, info in job.ranks.items() if info.connected}
    return {"job_id": job.job_id, "state": job.state, "world_size": job.world_size,
            "ranks_registered": len(job.ranks), "ranks_connected": len(connected),
            "committed_version": job.coordinator.committed, "running_version": expected["running_version"],
            "iteration": max((info.iteration for info in job.ranks.values()), default=0),
            "iteration_seconds": measured.seconds,
            "predicted_seconds": expected["predicted_seconds"], "measured_seconds": expected["measured_seconds"],
            "prediction_error_ratio": expected["error_ratio"],
            "bound_iteration_seconds": expected["bound_iteration_seconds"],
            "ratio_to_bound": expected["ratio_to_bound"],
            "sparkline": [round(it.seconds, 6) for it in history[-SPARKLINE:]],
            "lagging": len(job.live.lagging(connected, now)),
            "replanning": None if policy is None else {"phase": policy.phase, "paused": policy.paused},
            "created_unix": job.created_unix}


def jobs_page(core: ServiceCore, limit: int, after: str) -> dict:
    """One page of the jobs by id (``next``: the cursor of the following page, "" after the last)."""
    page, following = core.jobs_page(after, limit)
    return {"jobs": [job_summary(core, job) for job in page], "next": following}


def job_detail(core: ServiceCore, job: Job) -> dict:
    """The job page: the summary, every rank, dispatcher waits, plans, passthrough's times
    (:func:`passthrough`), the policy, and the latest search's fitted model and bound
    (``fit``, ``bound``, ``search_version``: :func:`optimizer_service.service.search_view.latest_search`)."""
    now = core.clock()
    connected = {rank for rank, info in job.ranks.items() if info.connected}
    lagging = job.live.lagging(connected, now)
    ranks = []
    for rank in range(job.world_size):
        info = job.ranks.get(rank)
        live = job.live.ranks.get(rank)
        ranks.append({"rank": rank, "registered": info is not None,
                      "host": info.host if info else "", "backend": info.backend if info else "",
                      "connected": bool(info and info.connected),
                      "iteration": info.iteration if info else 0,
                      "running_version": info.running_version if info else 0,
                      "last_seen_unix": info.last_seen_unix if info else 0.0,
                      "last_iteration_seconds": live.seconds if live else None,
                      "last_wait_seconds": live.wait_seconds if live else None,
                      "lagging": rank in lagging})
    policy = _policy(core, job)
    return {**job_summary(core, job), "epoch": job.coordinator.epoch, "switch_every": job.switch_every,
            "topology": job.topology if PRESET_NAME.fullmatch(job.topology) else "(YAML from the ranks)",
            "ranks": ranks, "waits": job.live.wait_table()[:200],
            "plans": [plan_state(state) for state in sorted(job.plans.values(), key=lambda p: p.version)],
            "passthrough": passthrough(job),
            "policy": None if policy is None else policy.to_dict(),
            "topology_error": None if policy is None else core.replanner.topology_error(job.job_id) or None,
            **search_view.latest_search(job.latest_search), "now_unix": now}


def plan_state(state: PlanState) -> dict:
    """A plan's record: its two-phase commit (per rank), origin, predicted and measured time,
    the lower bound its search computed (``bound_iteration_seconds``), measured / bound
    (``ratio_to_bound``) and predicted / bound (``predicted_ratio_to_bound``)."""
    data = state.to_dict()
    data["state"] = state.state
    data["ranks"] = [{"rank": rank, "state": value[0], "reason": value[1]}
                     for rank, value in sorted(state.ranks.items())]
    data["ratio_to_bound"] = ratio_to_bound(state.measured_seconds, state.bound_seconds)
    data["predicted_ratio_to_bound"] = ratio_to_bound(state.predicted_seconds, state.bound_seconds)
    return data


def passthrough(job: Job) -> dict:
    """Passthrough's (version 0, no plan) times with the fields of a plan's: its measured median
    while it ran, no prediction, and as its bound the first search's (:attr:`Job.passthrough_bound_seconds`)."""
    measured, bound = job.passthrough_measured_seconds, job.passthrough_bound_seconds
    return {"version": 0, "predicted_seconds": None, "measured_seconds": measured, "bound_iteration_seconds": bound,
            "ratio_to_bound": ratio_to_bound(measured, bound), "predicted_ratio_to_bound": None}


def telemetry(core: ServiceCore, job: Job, since: int) -> dict:
    """Iterations after index ``since`` (at most :data:`TELEMETRY_PAGE`, the newest), and the
    plan switches among them, for the live chart."""
    rows = [it for it in job.live.history if it.index > since][-TELEMETRY_PAGE:]
    predicted = {v: s.predicted_seconds for v, s in job.plans.items()}
    switches, previous = [], None
    for it in rows:
        if previous is not None and it.version != previous:
            switches.append({"iteration": it.index, "version": it.version})
        previous = it.version
    return {"job_id": job.job_id, "iterations": [dict(it.to_dict(), predicted_seconds=predicted.get(it.version))
                                                 for it in rows],
            "switches": switches, "last": rows[-1].index if rows else since}


async def events(core: ServiceCore, job: Job, limit: int) -> dict:
    """The job's event log (this service's recent events, newest last) and its stored replanning decisions."""
    recent = [{"unix": e.unix, "kind": e.kind, "version": e.version, "rank": e.rank, "message": e.message}
              for e in core.events.recent(job.job_id, limit)]
    decisions = await core.decisions(job.job_id, limit)
    return {"job_id": job.job_id, "events": recent,
            "decisions": [{k: v for k, v in d.items() if k != "search"} for d in decisions]}


async def plan_detail(core: ServiceCore, job: Job, version: int, offloader: Offloader) -> dict:
    """The plan page's data. Parsing and pricing a stored plan (up to 64 MiB) run off the event loop,
    a large one in a child process (:mod:`.plan_reading`)."""
    state, stored = await core.plan(job.job_id, version)
    return await offloader.run_for(len(stored.plan_json), f"reading plan v{version}", plan_reading.plan_detail,
                                   job.job_id, plan_state(state), stored.plan_json, stored.submitted_unix,
                                   core.topology_yaml(job))


async def _stored_plan(core: ServiceCore, job: Job, version: int) -> str:
    return (await core.plan(job.job_id, version))[1].plan_json


def previous_version(job: Job, version: int) -> int:
    """The version committed before ``version`` (0: passthrough)."""
    return max((v for v, s in job.plans.items() if v < version and s.decision == "commit"), default=0)


async def diff(core: ServiceCore, job: Job, version: int, against: int | None, offloader: Offloader) -> dict:
    """What plan ``version`` changes against ``against`` (None: the plan committed before it; 0:
    passthrough); the plans are parsed off the event loop."""
    new = await _stored_plan(core, job, version)
    if against is None:
        against = previous_version(job, version)
    old = await _stored_plan(core, job, against) if against else None
    return await offloader.run_for(len(new) + len(old or ""), f"comparing plan v{version}", plan_reading.diff,
                                   old, new)


def gantt(core: ServiceCore, job: Job, version: int, rank: int) -> dict:
    """One iteration of plan ``version``: the search's predicted timeline and
    ``rank``'s last measured one (when that rank last ran this version)."""
    predicted = list(core.replanner.timeline(job.job_id, version)) if core.replanner is not None else []
    timeline = job.live.timelines.get(rank)
    measured = None
    if timeline is not None and timeline["version"] == version:
        measured = measured_lanes(timeline)
    return {"job_id": job.job_id, "version": version, "rank": rank, "predicted": predicted, "measured": measured,
            "measured_iteration": None if measured is None else timeline["iteration"],
            "measured_seconds": None if measured is None else timeline["seconds"]}


def measured_lanes(timeline: dict) -> list[dict]:
    """A rank's iteration as Gantt rows: motifs per channel, ops passed through on
    ``passthrough``, and compute between op issues (how the trace DAG reads compute)."""
    rows = [{"name": m["label"], "lane": f"ch{m['channel']}", "start": m["start"], "end": m["end"]}
            for m in timeline["motifs"]]
    rows += [{"name": op["label"], "lane": "passthrough", "start": op["start"], "end": op["end"]}
             for op in timeline["ops"] if not op["planned"]]
    issues = sorted(op["start"] for op in timeline["ops"])
    edges = [0.0, *issues, timeline["seconds"]]
    rows += [{"name": "compute", "lane": "compute", "start": a, "end": b} for a, b in zip(edges, edges[1:]) if b > a]
    return rows


def ago(unix: float, now: float | None = None) -> str:
    if not unix:
        return "never"
    seconds = max(0.0, (now or time.time()) - unix)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def duration(seconds: float | None) -> str:
    """``12.3 ms``, ``45 µs``, ``1.20 s``; ``–`` for none."""
    if seconds is None:
        return "–"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} µs"


def rate(bytes_per_second: float | None) -> str:
    """``16.7 MB/s``, ``1000 MB/s`` (three significant digits, whole from 100 on); ``–`` for none."""
    if bytes_per_second is None:
        return "–"
    mb = bytes_per_second / 1e6
    return f"{mb:.0f} MB/s" if mb >= 100 else f"{mb:.3g} MB/s"
