"""The replanning loop with real processes: a real ``p2 serve`` (replanning on)
and a 4-rank job training through ``p2enforcer`` with ``P2_SERVICE`` and
``P2_TOPOLOGY``, nobody submitting anything. The service gathers telemetry,
asks every rank for its trace window, searches in its worker process, commits
the plan with two-phase commit; every rank switches at the same iteration and
every result equals plain gloo's. Every decision is a stored event with its
reason, and the plan's record has its predicted and measured iteration time and
the bound its search computed, and the job the model its latest search fitted
(``p2 jobs show``)."""

from __future__ import annotations

import json

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.service.store.sqlite_store import SqlitePlanStore
from tests.enforcer import service_ranks
from tests.support.cli import p2
from tests.support.multiproc import run_world
from tests.support.service_process import ServeProcess

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

WORLD = 4
JOB = "loop"
POLICY = ["min_gain=0", "first_plan_after=10", "warmup=2", "window=8", "min_samples=4", "evaluate=4", "consecutive=3",
          "cooldown=6"]


def test_the_service_plans_and_commits_a_live_job_by_itself(tmp_path):
    topology = tmp_path / "topology.yaml"     # 2 nodes x 2 ranks, links far faster than loopback: a gain is predicted
    topology.write_text(cluster_topology("loop", 2, 2, 1e11, 1e11, 1e12))
    policy = [arg for item in POLICY for arg in ("--policy", item)]
    serve = ServeProcess(tmp_path, "--search-budget", "1", *policy)
    try:
        env = {"P2_SERVICE": serve.address, "P2_JOB": JOB, "P2_SWITCH_EVERY": "4", "P2_TOPOLOGY": str(topology)}
        results = run_world(WORLD, service_ranks.train, "planned", 0, 0, 0.01, 12, 300, backend="p2enforcer",
                            timeout=300, env=env)
        listed = p2("jobs", "events", JOB, "--service", serve.address, "--json", "-")
        shown = p2("jobs", "events", JOB, "--service", serve.address, "--limit", "2")
        unknown = p2("jobs", "events", "no-such-job", "--service", serve.address)
        job = p2("jobs", "show", JOB, "--service", serve.address, "--json", "-")
        job_text = p2("jobs", "show", JOB, "--service", serve.address)
    finally:
        code, log = serve.stop()
    assert code == 0, log
    switched = {tuple((s["iteration"], s["version"]) for s in result["switches"]) for result in results}
    assert len(switched) == 1, f"the ranks switched differently: {switched}"
    switches = switched.pop()
    assert switches and switches[0][1] > 0 and switches[0][0] % 4 == 0, switches
    for rank, result in enumerate(results):
        assert result["mismatches"] == [], f"rank {rank}: results differ from plain gloo"
        assert result["running"] > 0 and result["enforced"] > 0, f"rank {rank} never ran a plan"
    store = SqlitePlanStore.open(tmp_path / "service.db")
    try:
        events = store.recent_events(JOB, limit=1000)
        version = switches[0][1]
        state = store.get_plan_state(JOB, version)
        plan = store.get_plan(JOB, version)
    finally:
        store.close()
    kinds = [event["kind"] for event in events]
    # p2 jobs events: the same decisions over the service's API (newest last), as JSON and as lines
    assert listed.returncode == 0, listed.stderr
    decisions = json.loads(listed.stdout)["decisions"]
    start = events.index(decisions[0])
    assert events[start:start + len(decisions)] == decisions and decisions[0] == events[0]
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 2, shown.stdout + shown.stderr
    assert all(line.split()[3] in set(kinds) for line in shown.stdout.splitlines()), shown.stdout
    assert unknown.returncode != 0 and "no-such-job" in unknown.stderr and len(unknown.stderr.splitlines()) == 1
    # notes (a drift seen on a loaded machine while the first search runs) may come between
    assert kinds[0] == "replan" and "searched" in kinds and "commit" in kinds, events
    assert kinds.index("searched") < kinds.index("commit"), events
    assert events[0]["trigger"] == "first" and all(event["reason"] for event in events)
    # the first search may predict no gain at all (min_gain=0 still asks for more than 0): a later one commits
    first_commit = kinds.index("commit")
    searched = [event for event in events[:first_commit] if event["kind"] == "searched"][-1]
    assert searched["version"] == version and searched["search"]["predicted_seconds"] > 0
    assert events[first_commit]["version"] == version and "predicted gain" in events[first_commit]["reason"]
    assert "committed" in kinds[first_commit:], events
    if "rollback" in kinds:         # passthrough measured faster: back to it, under a new version
        assert "passthrough" in events[kinds.index("rollback")]["reason"], events
        # the ranks switch to it at their next switch iteration, unless the job ended before that
        assert all(later > version for _, later in switches[1:]), switches
    assert state["decision"] == "commit" and state["origin"].startswith("search r")
    assert state["predicted_seconds"] > 0 and state["measured_seconds"] > 0 and plan is not None
    # the bound: the search's, on its plan and its record, below what the model predicts for the plan
    bound = searched["search"]["bound_seconds"]
    assert 0 < bound <= searched["search"]["predicted_seconds"] and searched["search"]["bound"]["binding"]
    assert state["bound_iteration_seconds"] == bound == json.loads(plan.plan_json)["bound_iteration_seconds"]
    assert "no plan beats" in searched["reason"]
    # p2 jobs show: every plan beside the bound, passthrough with the first search's
    assert job.returncode == 0 and job_text.returncode == 0, job.stderr + job_text.stderr
    shown_job = json.loads(job.stdout)
    record = next(p for p in shown_job["plans"] if p["version"] == version)
    assert record["bound_iteration_seconds"] == bound and record["predicted_seconds"] > 0
    assert record["ratio_to_bound"] == pytest.approx(record["measured_seconds"] / bound)
    first_bound = next(p["bound_iteration_seconds"] for p in shown_job["plans"] if p["bound_iteration_seconds"])
    assert shown_job["passthrough"]["bound_iteration_seconds"] == first_bound
    assert shown_job["passthrough"]["measured_seconds"] > 0
    assert "MEAS/BOUND" in job_text.stdout and "passthrough" in job_text.stdout
    # and the model the latest search fitted to the job's own telemetry, with each fitted value's effect
    # (a search may still finish after p2 jobs show ran: the decision of the version it showed)
    latest = next(e for e in events if e["kind"] == "searched" and e["version"] == shown_job["search_version"])
    assert shown_job["fit"] == latest["search"]["fit"]
    assert shown_job["bound"] == latest["search"]["bound"] and "0" in shown_job["fit"]["channels"]
    assert "the model the latest search" in job_text.stdout and "host" in job_text.stdout
    assert all(f"prediction without {e['parameter']}:" in job_text.stdout for e in shown_job["fit"]["effects"])
    hosts = shown_job["bound"]["hosts"]             # the ranks' CPU records, one host for every rank here
    assert len(hosts) == 1 and sorted(hosts[0]["ranks"]) == list(range(shown_job["world_size"]))
    assert f"host {hosts[0]['host'][:8]} (" in job_text.stdout and "% busy" in job_text.stdout
    assert "replan" in log and "commit" in log
