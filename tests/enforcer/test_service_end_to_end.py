"""The whole path with real processes: a real ``p2 serve`` (SQLite, then Redis),
a 4-rank job training through ``p2enforcer`` with ``P2_SERVICE`` set, and
``p2 plan submit``: every rank switches at the same iteration (their traces
show it) and every result equals plain gloo's; a wrong token is refused."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from optimizer_service.plan import Plan
from tests.enforcer import plan_ranks, service_ranks
from tests.support.cli import p2
from tests.support.multiproc import run_world
from tests.support.redis_server import MISSING, redis_server_path, start_redis
from tests.support.service_process import ServeProcess, free_port

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

WORLD = 4
JOB = "e2e"


def submit_when_live(address: str, plan_file: str, token_file: str, outcome: dict,
                     traces: Path | None = None) -> None:
    """Wait until every rank registered (and, with ``traces``, ran 4 iterations:
    then ``p2 jobs trace`` into that folder), then ``p2 plan submit --wait``;
    record what they said."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        shown = p2("jobs", "show", JOB, "--service", address, "--token-file", token_file, "--json", "-")
        if shown.returncode == 0:
            job = json.loads(shown.stdout)
            if job["state"] == "live" and (traces is None or min(r["iteration"] for r in job["ranks"]) >= 4):
                break
        time.sleep(0.2)
    if traces is not None:
        outcome["trace"] = p2("jobs", "trace", JOB, "--out", str(traces), "--iterations", "2", "--service", address,
                              "--token-file", token_file, "--json", "-")
    result = p2("plan", "submit", "--job", JOB, plan_file, "--wait", "60", "--service", address,
                "--token-file", token_file, "--json", "-")
    outcome["submit"] = result


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_p2_plan_submit_switches_every_rank_of_a_real_job_at_the_same_iteration(tmp_path, store):
    if store == "redis" and redis_server_path() is None:
        pytest.skip(MISSING)
    redis = start_redis(tmp_path / "redis") if store == "redis" else None
    token_file = tmp_path / "token"
    token_file.write_text("e2e-token-0123456789abcdef\n")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(Plan.parse(plan_ranks.build_plan(WORLD, reverse=True, channels=2)).to_json())
    serve = ServeProcess(tmp_path, "--token-file", str(token_file), store=redis.url if redis else None)
    outcome: dict = {}
    try:
        submitter = threading.Thread(target=submit_when_live, args=(serve.address, str(plan_file), str(token_file),
                                                                    outcome, tmp_path / "traces"), daemon=True)
        submitter.start()
        env = {"P2_SERVICE": serve.address, "P2_TOKEN_FILE": str(token_file), "P2_JOB": JOB, "P2_SWITCH_EVERY": "4"}
        results = run_world(WORLD, service_ranks.train, "running", 1, 0, 0.01, backend="p2enforcer", timeout=300,
                            env=env)
        submitter.join(90)
        listed = p2("plan", "list", "--job", JOB, "--service", serve.address, "--token-file", str(token_file),
                    "--json", "-")
        intruder = p2("jobs", "list", "--service", serve.address, env={"P2_TOKEN": "not-the-token-0123456789"})
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
    # p2 jobs trace: every rank's last 2 finished iterations of passthrough ops, as trace files
    fetched = outcome["trace"]
    assert fetched.returncode == 0, fetched.stderr
    written = json.loads(fetched.stdout)["traces"]
    assert [item["rank"] for item in written] == list(range(WORLD))
    for item in written:
        document = json.loads(Path(item["path"]).read_text())
        assert document["format"] == "p2enforcer-trace" and document["rank"] == item["rank"]
        iterations = sorted({op["iteration"] for op in document["ops"]})
        assert len(iterations) == 2 and len(document["ops"]) == 2 * 6 and document["motifs"] == []
        assert {op["kind"] for op in document["ops"]} >= {"all_reduce", "broadcast"}
    assert code == 0 and "registered" in log and "commit" in log


@pytest.mark.parametrize("point, decided", [("prepare-sent-to-one", False), ("decision-persisted", True)])
def test_the_service_killed_mid_commit_and_restarted_leaves_every_real_rank_on_one_plan(tmp_path, point, decided):
    """``p2 serve`` SIGKILLs itself at a protocol point while 4 real ranks train;
    a new one starts on the same port and store. The ranks never stop training,
    reconnect, and all end on the stored decision: all switched at one iteration
    (a durable commit is not lost) or none did (an undecided prepare is aborted)."""
    token_file = tmp_path / "token"
    token_file.write_text("crash-token-0123456789abcdef\n")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(Plan.parse(plan_ranks.build_plan(WORLD, reverse=True, channels=2)).to_json())
    port, store = free_port(), f"sqlite:///{tmp_path / 'service.db'}"
    doomed = ServeProcess(tmp_path, "--token-file", str(token_file), env={"P2_CRASH_AT": point}, port=port,
                          store=store)
    outcome: dict = {}

    def crash_and_restart() -> None:
        submit_when_live(doomed.address, str(plan_file), str(token_file), outcome)
        outcome["doomed"] = doomed.wait_dead(60)
        outcome["survivor"] = ServeProcess(tmp_path, "--token-file", str(token_file), port=port, store=store)

    operator = threading.Thread(target=crash_and_restart, daemon=True)
    operator.start()
    try:
        env = {"P2_SERVICE": doomed.address, "P2_TOKEN_FILE": str(token_file), "P2_JOB": JOB, "P2_SWITCH_EVERY": "4"}
        results = run_world(WORLD, service_ranks.train, "settled", 1, 0, 0.01, 3, 5000, backend="p2enforcer",
                            timeout=300, env=env)
        operator.join(60)
        shown = p2("plan", "show", "--job", JOB, "1", "--service", doomed.address, "--token-file", str(token_file),
                   "--json", "-")
    finally:
        if doomed.process.poll() is None:
            doomed.stop()
        survivor = outcome.get("survivor")
        survivor_code, survivor_log = survivor.stop() if survivor else (None, "")
    code, log = outcome["doomed"]
    assert code == -9 and f"crashing at {point}" in log, log
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert record["state"] == ("committed" if decided else "aborted"), record
    switched_at = {tuple(s["iteration"] for s in result["switches"]) for result in results}
    assert len(switched_at) == 1, switched_at            # every rank the same, at the same iteration
    for rank, result in enumerate(results):
        assert result["mismatches"] == [], f"rank {rank}: results differ from plain gloo"
        assert result["running"] == (1 if decided else 0), f"rank {rank}"
        assert len(result["switches"]) == (1 if decided else 0), f"rank {rank}"
        assert result["attempts"] >= 2, f"rank {rank} never reconnected"
    assert survivor_code == 0 and "epoch 2" in survivor_log, survivor_log
