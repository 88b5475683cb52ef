"""The live loop plans the example jobs: DDP, FSDP2 and hybrid data parallelism on ``new_group`` subgroups.

Each test is a real ``p2 serve`` (replanning on, ``min_gain=0``, short
windows) and a real 4-rank job — one ``python examples/train_*.py`` process
per rank, as in ``test_training_examples.py`` — training through
``p2enforcer`` with ``P2_SERVICE`` and ``P2_TOPOLOGY`` on loopback, nobody
submitting anything. The topology is a 2 × 2 cluster with two 25 MB/s NICs,
slow enough that the model predicts a gain for each job. ``--after-plan``
ends the job a few steps after it first ran a plan.

Shown: the service asked for the traces, searched and committed a plan;
every rank switched at the same iteration; the ops the plan names ran
enforced (on the subgroups too); the ops it cannot plan passed through and
the ``searched`` event lists them with the reason; the decisions and the
plan's record are stored; and the losses equal a plain gloo run of the same
steps.
"""

from __future__ import annotations

import json
import math

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.plan.plan import Plan
from optimizer_service.service.store.sqlite_store import SqlitePlanStore
from tests.examples.test_training_examples import REL_TOLERANCE, run_job, unavailable
from tests.support.service_process import ServeProcess

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

WORLD = 4
JOB = "examples"
SWITCH_EVERY = 4
MAX_STEPS = 300          # a cap: --after-plan ends the job long before
AFTER_PLAN = 6
POLICY = ["min_gain=0", "first_plan_after=8", "warmup=2", "window=8", "min_samples=4", "evaluate=4",
          "consecutive=3", "cooldown=6"]
WORLD_GROUP = [0, 1, 2, 3]
# What the plan may leave to gloo, per script: nothing (the hybrid job's int64 sample count, its 5th op,
# is planned in its own 8-byte elements).
PASSED_THROUGH = {
    "train_ddp.py": [],
    "train_fsdp.py": [],
    "train_hybrid.py": [],
}
# The groups the plan names, per script.
PLANNED_GROUPS = {
    "train_ddp.py": [WORLD_GROUP],
    "train_fsdp.py": [WORLD_GROUP],
    "train_hybrid.py": [[0, 1], [0, 1, 2, 3], [0, 2], [1, 3], [2, 3]],
}


def run_with_the_service(folder, script: str) -> tuple[dict, str, list[dict]]:
    """The job under a fresh ``p2 serve``: rank 0's JSON, the service's log, every rank's trace."""
    topology = folder / "topology.yaml"
    topology.write_text(cluster_topology("loop", 2, 2, 2.5e7, 2.5e7, 1e9))
    serve = ServeProcess(folder, "--search-budget", "1", *[arg for item in POLICY for arg in ("--policy", item)])
    env = {"P2_SERVICE": serve.address, "P2_JOB": JOB, "P2_SWITCH_EVERY": str(SWITCH_EVERY),
           "P2_TOPOLOGY": str(topology), "P2_TRACE_FILE": str(folder / "trace.json")}
    try:
        result, _ = run_job(script, "p2enforcer", WORLD, MAX_STEPS, folder / "job", env,
                            ["--after-plan", str(AFTER_PLAN)])
    finally:
        code, log = serve.stop()
    assert code == 0, log[-4000:]
    traces = [json.loads((folder / f"trace.rank{rank}.json").read_text()) for rank in range(WORLD)]
    return result, log, traces


@pytest.mark.parametrize("script", sorted(PASSED_THROUGH))
def test_the_service_plans_and_commits_the_example(tmp_path, script):
    reason = unavailable("p2enforcer")
    if reason:
        pytest.skip(reason)
    result, log, traces = run_with_the_service(tmp_path, script)

    # Every rank switched at the same iteration, a check boundary, to a plan of the service.
    switched = {tuple((s["iteration"], s["version"]) for s in trace["switches"]) for trace in traces}
    assert len(switched) == 1, f"the ranks switched differently: {switched}"
    switches = switched.pop()
    assert switches, f"no plan was committed:\n{log[-4000:]}"
    first, version = switches[0]
    assert version > 0 and first % SWITCH_EVERY == 0
    # Step s runs iteration s - 1: the JSON's per-step versions show the same switch.
    versions = result["plan_versions"]
    assert versions.index(version) == first and set(versions[:first]) == {0}
    assert len(result["step_seconds"]) == len(versions) == result["steps"] <= first + AFTER_PLAN + 1
    if script == "train_hybrid.py":
        assert result["groups"] == {"replica": [[0, 1], [2, 3]], "peer": [[0, 2], [1, 3]]}
        assert result["samples"] == result["steps"] * WORLD * 64        # training.BATCH_SIZE per rank and step

    # Under the plan, the ops it names ran enforced on every group; the rest passed through.
    expected = PASSED_THROUGH[script]
    for rank, trace in enumerate(traces):
        ran = [op for op in trace["ops"] if op["iteration"] == first]
        passed = [(op["kind"], op["dtype"], op["group"]) for op in ran if not op["enforced"]]
        assert passed == [(e["kind"], e["dtype"], e["group"]) for e in expected], f"rank {rank}"
        assert {tuple(op["group"]) for op in ran if op["enforced"]} == {
            tuple(g) for g in PLANNED_GROUPS[script] if rank in g}, f"rank {rank}"

    # The decisions, the search's figures (with what passes through) and the plan are stored.
    store = SqlitePlanStore.open(tmp_path / "service.db")
    try:
        events = store.recent_events(JOB, limit=1000)
        state = store.get_plan_state(JOB, version)
        plan = Plan.parse(store.get_plan(JOB, version).plan_json)
    finally:
        store.close()
    kinds = [(event["kind"], event["version"]) for event in events]
    assert events[0]["kind"] == "replan" and events[0]["trigger"] == "first", events[0]
    searched, commit = kinds.index(("searched", version)), kinds.index(("commit", version))
    assert searched < commit < [kind for kind, _ in kinds].index("committed", commit), events
    assert all(event["reason"] for event in events), events
    searched = events[searched]
    assert searched["search"]["passthrough"] == expected
    assert f"{len(plan.ops)} of {len(plan.ops) + len(expected)} comm-ops planned" in searched["reason"]
    assert "no op passes through" in searched["reason"]
    assert sorted({tuple(op.key.group) for op in plan.ops}) == [
        tuple(g) for g in PLANNED_GROUPS[script]]
    assert state["decision"] == "commit" and state["predicted_seconds"] > 0

    # Same seeds, same data, the same sums: gloo's losses for the same steps.
    reference, _ = run_job(script, "gloo", WORLD, result["steps"], tmp_path / "gloo")
    mismatches = [(step, want, got) for step, (want, got) in enumerate(zip(reference["losses"], result["losses"]), 1)
                  if not math.isclose(got, want, rel_tol=REL_TOLERANCE)]
    assert len(reference["losses"]) == len(result["losses"]) and mismatches == [], "(step, gloo, planned)"
