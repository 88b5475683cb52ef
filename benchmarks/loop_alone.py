"""A loop run's plans run again alone, in turns on a fresh emulated cluster (``benchmarks/loop.py``).

``p2 demo`` measures every plan inside the loop: the service attached and
replanning, the peer's turns, the demo watching the NICs. What the same plan
takes without all of that separates the plan's quality from the loop's cost.
Each entry runs as its own job for ``steps`` steps, the entries alternating
for ``rounds`` rounds on one cluster built like the run's (same nodes, ranks,
NIC rates and fabric), each plan installed from the first step
(``P2_PLAN_FILE``, no service); an entry's figure is the median of its steps
after :data:`WARMUP`, over its rounds:

* :func:`first_plan_alone`: the first committed plan, the peer (plain gloo
  over every NIC) and passthrough (the inner backend on one NIC), on the
  cluster before the change;
* :func:`head_to_head`: the replanned plan and the offline search's best on a
  cluster built with the second NIC slowed as in the run.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from deploy.emulated import ClusterInfo, create_cluster, destroy_cluster, run_ranks
from optimizer_service.cli.demo_report import OFFLINE_PLAN
from optimizer_service.cli.demo_run import JOBS
from optimizer_service.service.store.sqlite_store import SqlitePlanStore

WARMUP = 8
#: Entries that are not plans: the peer and passthrough.
PEER, PASSTHROUGH = "peer", "passthrough"


def _stored_plan(work: Path, job: str, version: int) -> str:
    store = SqlitePlanStore.open(work / "service.db")
    try:
        return store.get_plan(job, version).plan_json
    finally:
        store.close()


def _alternate(report: dict, work: Path, entries: dict[str, str], steps: int, rounds: int, info: ClusterInfo,
               label: str) -> dict[str, list[float]]:
    """Each entry (a plan's JSON, :data:`PEER` or :data:`PASSTHROUGH`) run ``rounds`` times in turns on
    ``info``: every entry's steps after warm-up, over its rounds."""
    job = report["job"]["id"]
    ifnames = ",".join(info.nic(0, channel).ifname for channel in range(info.channels))
    seconds: dict[str, list[float]] = {name: [] for name in entries}
    for name, body in entries.items():
        if body not in (PEER, PASSTHROUGH):
            (work / f"{label}-{name}.json").write_text(body)
    for round_ in range(rounds):
        for name, body in entries.items():
            out = work / f"{label}-{name}-{round_}.out.json"
            backend = "gloo" if body == PEER else "p2enforcer"
            env = ({"GLOO_SOCKET_IFNAME": ifnames} if body == PEER else {} if body == PASSTHROUGH
                   else {"P2_PLAN_FILE": str(work / f"{label}-{name}.json")})
            command = JOBS[job].command(backend, steps, out, report["job"]["model_flags"])
            with (work / f"{label}.log").open("a") as log:
                code = run_ranks(info, command, env=env, out=log, err=log, timeout=900)
            if code != 0:
                raise SystemExit(f"the {label} run of {name} failed ({code}); see {work / f'{label}.log'}")
            seconds[name] += json.loads(out.read_text())["step_seconds"][WARMUP:]
    return seconds


def _cluster(report: dict, name: str, nic2_divisor: float) -> ClusterInfo:
    cluster = report["cluster"]
    return create_cluster(name, cluster["nodes"], cluster["per_node"], cluster["nic_bytes_per_second"],
                          cluster["nic2_bytes_per_second"] / nic2_divisor, fabric=cluster["fabric"])


def first_plan_alone(report: dict, work: Path, steps: int, rounds: int, cluster_name: str) -> dict:
    """The first committed plan, the peer and passthrough alone on the unchanged cluster (module
    docstring): each one's median, the plan's speed-up over the peer and passthrough and its ratio to
    the bound, and the loop's measurement of the plan over this one."""
    first = next(phase for phase in report["phases"] if phase["name"] == "first-plan")
    if not report["cluster"]["emulated"] or first["plan_version"] is None or not first["measured_iteration_seconds"]:
        return {"skipped": "no first plan measured (or a loopback run)"}
    entries = {"first_plan": _stored_plan(work, report["job"]["id"], first["plan_version"]),
               PEER: PEER, PASSTHROUGH: PASSTHROUGH}
    info = _cluster(report, cluster_name, 1.0)
    try:
        seconds = _alternate(report, work, entries, steps, rounds, info, "alone")
    finally:
        destroy_cluster(cluster_name)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    bound = first["bound_iteration_seconds"]
    return {"first_plan_seconds": median["first_plan"], "peer_seconds": median[PEER],
            "passthrough_seconds": median[PASSTHROUGH],
            "speedup_over_peer": median[PEER] / median["first_plan"],
            "speedup_over_passthrough": median[PASSTHROUGH] / median["first_plan"],
            "ratio_to_bound": median["first_plan"] / bound if bound else None,
            "loop_over_alone": first["measured_iteration_seconds"] / median["first_plan"],
            "steps_each": len(seconds["first_plan"]), "rounds": rounds}


def head_to_head(report: dict, work: Path, steps: int, rounds: int, cluster_name: str) -> dict:
    """The replanned plan and the offline search's best, run alternately on a cluster whose
    second NIC is slowed as in the demo; medians of each plan's steps after warm-up."""
    phases = {phase["name"]: phase for phase in report["phases"]}
    version = phases["replanned"]["plan_version"]
    if not report["cluster"]["emulated"] or version is None or not (work / OFFLINE_PLAN).is_file():
        return {"skipped": "no replanned plan or no offline plan (or a loopback run)"}
    entries = {"replanned": _stored_plan(work, report["job"]["id"], version),
               "offline": (work / OFFLINE_PLAN).read_text()}
    info = _cluster(report, cluster_name, report["cluster"]["throttle"])
    try:
        seconds = _alternate(report, work, entries, steps, rounds, info, "h2h")
    finally:
        destroy_cluster(cluster_name)
    replanned, offline = statistics.median(seconds["replanned"]), statistics.median(seconds["offline"])
    return {"replanned_seconds": replanned, "offline_seconds": offline, "ratio": replanned / offline,
            "steps_each": len(seconds["replanned"]), "rounds": rounds}
