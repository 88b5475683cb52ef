"""The replanning policy driven by two recorded demo runs (``data/``): rank 0's step seconds and the
plan version each step ran, the run's searches answering its requests in order, and the run's
searches that no change started (the first plan's, the slow and waits triggers') asked for where
the run asked for them (this replay has no dispatcher waits to fire them by itself).

In both the NIC slowed as a trial began. The runs' policy saw it at the trial's verdict (the run.sh
run: the old plan's tail was slow too) or after a rollback; it now sees it from the trial's warm-up
on, and the new state's search no longer waits for the commit's cooldown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer_service.control.policy import (
    Commit,
    Committed,
    Iteration,
    Note,
    ReplanNow,
    RequestPlan,
    RollBack,
    SearchDone,
    step,
)
from optimizer_service.control.policy_config import PolicyConfig
from optimizer_service.control.policy_state import Policy

DATA = Path(__file__).parent / "data"


def _config(items: list[str]) -> PolicyConfig:
    return PolicyConfig(**{key: float(value) if "." in value else int(value)
                           for key, value in (item.split("=", 1) for item in items)})


def replay(name: str) -> tuple[dict, list[tuple[int, object]]]:
    """The recording and every decision the policy took on it, with its step (1-based)."""
    run = json.loads((DATA / name).read_text())
    searches = list(run["searches"])
    asked = {row["step"]: row["trigger"] for row in run["replans"] if row["trigger"] in ("slow", "waits")}
    state, decisions, version = Policy.new("A", _config(run["policy"])), [], 1
    for index, (seconds, running) in enumerate(zip(run["step_seconds"], run["plan_versions"], strict=True)):
        state, queue = step(state, Iteration(index, seconds, 0.0, running), 0.0)
        if index + 1 in asked:
            state, more = step(state, ReplanNow(asked[index + 1]), 0.0)
            queue += more
        while queue:
            action = queue.pop(0)
            decisions.append((index + 1, action))
            if isinstance(action, RequestPlan) and searches:
                search = searches.pop(0)
                state, more = step(state, SearchDone(action.request, version, search["predicted_seconds"],
                                                     search["running_seconds"]), 0.0)
            elif isinstance(action, Commit):
                state, more = step(state, Committed(action.version, None), 0.0)
                version = action.version + 1
            elif isinstance(action, RollBack):
                state, more = step(state, Committed(version, None, same_as=action.to_version), 0.0)
                version += 1
            else:
                more = []
            queue += more
    return run, decisions


def after_change(run: dict, decisions: list[tuple[int, object]]) -> tuple[int, Note, int]:
    """The step of the first drift note after the change, the note, and the step of the search that follows."""
    change = run["change_step"]
    step_, drift = next((at, action) for at, action in decisions
                        if at >= change and isinstance(action, Note) and action.kind == "drift")
    search = next(at for at, action in decisions if at >= step_ and isinstance(action, RequestPlan))
    return step_, drift, search


@pytest.mark.parametrize("name, drift_at, search_at, shows", [
    # run.sh: recorded 33 iterations from the change to the committed replan; its policy drifted at the
    # trial's verdict (step 93 here) and searched at 94
    ("stale-tail-dlrm.json", 81, 84, "v2 measured 5 iterations in a row after the switch each more than 20.0 % "
                                     "over v1's 0.196 s"),
    # the loop's DLRM run 2: recorded 40; v2 rolled back, v1 re-installed (as v3) drifted at 101 here and
    # the search waited for the rollback's cooldown until 105
    ("rollback-dlrm.json", 97, 100, "v3, re-installed by the rollback, measured 5 iterations in a row each more "
                                    "than 20.0 % over the 0.216 s"),
])
def test_a_change_as_a_trial_begins_is_searched_for_sooner(name, drift_at, search_at, shows):
    run, decisions = replay(name)
    step_, drift, search = after_change(run, decisions)
    assert (step_, search) == (drift_at, search_at) and shows in drift.reason
    assert search - run["change_step"] < run["recorded_iterations_to_commit"] - 5
    # what came before the change is the recording's: the first plan at step 20, kept, then the second search
    before = [(at, type(action).__name__) for at, action in decisions
              if at < run["change_step"] and isinstance(action, RequestPlan | Commit | RollBack)]
    assert before[:2] == [(20, "RequestPlan"), (20, "Commit")] and len(before) == 4
