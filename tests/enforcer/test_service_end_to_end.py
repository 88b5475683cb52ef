"""The whole path with real processes: a real ``p2 serve`` (SQLite, then Redis),
a 4-rank job training through ``p2enforcer`` with ``P2_SERVICE`` set, and
``p2 plan submit``: every rank switches at the same iteration (their traces
show it) and every result equals plain gloo's; a wrong token is refused."""

from __future__ import annotations

import json
import threading
import time

import pytest

from optimizer_service.plan import Plan
from tests.enforcer import plan_ranks, service_ranks
from tests.support.cli import p2
from tests.support.multiproc import run_world
from tests.support.redis_server import MISSING, redis_server_path, start_redis
from tests.support.service_process import ServeProcess

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

WORLD = 4
JOB = "e2e"


def submit_when_live(address: str, plan_file: str, token_file: str, outcome: dict) -> None:
    """Wait until every rank registered, then ``p2 plan submit --wait``; record what it said."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        shown = p2("jobs", "show", JOB, "--service", address, "--token-file", token_file, "--json", "-")
        if shown.returncode == 0 and json.loads(shown.stdout)["state"] == "live":
            break
        time.sleep(0.2)
    result = p2("plan", "submit", "--job", JOB, plan_file, "--wait", "60", "--service", address,
                "--token-file", token_file, "--json", "-")
    outcome["submit"] = result


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_p2_plan_submit_switches_every_rank_of_a_real_job_at_the_same_iteration(tmp_path, store):
    if store == "redis" and redis_server_path() is None:
        pytest.skip(MISSING)
    redis = start_redis(tmp_path / "redis") if store == "redis" else None
    token_file = tmp_path / "token"
    token_file.write_text("e2e-token\n")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(Plan.parse(plan_ranks.build_plan(WORLD, reverse=True, channels=2)).to_json())
    serve = ServeProcess(tmp_path, "--token-file", str(token_file), store=redis.url if redis else None)
    outcome: dict = {}
    try:
        submitter = threading.Thread(target=submit_when_live, args=(serve.address, str(plan_file), str(token_file),
                                                                    outcome), daemon=True)
        submitter.start()
        env = {"P2_SERVICE": serve.address, "P2_TOKEN_FILE": str(token_file), "P2_JOB": JOB, "P2_SWITCH_EVERY": "4"}
        results = run_world(WORLD, service_ranks.train, "running", 1, 0, 0.01, backend="p2enforcer", timeout=300,
                            env=env)
        submitter.join(90)
        listed = p2("plan", "list", "--job", JOB, "--service", serve.address, "--token-file", str(token_file),
                    "--json", "-")
        intruder = p2("jobs", "list", "--service", serve.address, env={"P2_TOKEN": "not-the-token"})
    finally:
        code, log = serve.stop()
        if redis:
            redis.stop()
    submitted = outcome["submit"]
    assert submitted.returncode == 0, submitted.stderr
    record = json.loads(submitted.stdout)
    assert record["version"] == 1 and record["state"] == "committed"
    switched_at = {result["switches"][0]["iteration"] for result in results}
    assert len(switched_at) == 1, [result["switches"] for result in results]
    boundary = switched_at.pop()
    assert boundary % 4 == 0
    for rank, result in enumerate(results):
        assert result["mismatches"] == [], f"rank {rank}: results differ from plain gloo"
        assert result["running"] == 1
        assert result["first_enforced"] == boundary and result["all_enforced_after"], f"rank {rank}"
    plans = json.loads(listed.stdout)["plans"]
    assert [(p["version"], p["state"]) for p in plans] == [(1, "committed")]
    assert {r["state"] for r in plans[0]["ranks"]} == {"acked_commit"} and len(plans[0]["ranks"]) == WORLD
    assert intruder.returncode == 2 and "bearer token" in intruder.stderr     # a wrong token is refused
    assert code == 0 and "registered" in log and "commit" in log
