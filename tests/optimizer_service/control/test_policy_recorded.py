"""The replanning policy driven by two recorded demo runs (``data/``): rank 0's step seconds and the
plan version each step ran, the run's searches answering its requests in order, and the run's
searches that no change started (the first plan's, the slow and waits triggers') asked for where
the run asked for them (this replay has no dispatcher waits to fire them by itself).

In both the NIC slowed as a trial began. The runs' policy saw it at the trial's verdict (the run.sh
run: the old plan's tail was slow too) or after the verdict's rollback; it now sees it from the
trial's warm-up on (a stale tail: a drift; a trial slow from the start: a rollback, whose
re-installed plan then shows the change), and the new state's search no longer waits for the
commit's cooldown."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
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


def switch_step(decided: int) -> int:
    """The step the ranks first run a plan decided at step ``decided`` (the demo switches every 4
    iterations; in the recordings the ranks ran it 5 steps after the first boundary 3 steps on:
    decided at 22, 59, 85, 108 -> switched at 33, 69, 93, 117)."""
    return math.ceil((decided + 3) / 4) * 4 + 5


def replay(name: str) -> tuple[dict, list[tuple[int, object]]]:
    """The recording and every decision the policy took on it, with its step (1-based), up to its
    first commit after the change. Where the policy rolls back before the recording did, the ranks
    switch when :func:`switch_step` says, and the recorded iterations of the plan the rollback
    re-installs, from when the recording ran it on the changed cluster, stand in for its own."""
    run = json.loads((DATA / name).read_text())
    searches, recorded = list(run["searches"]), list(zip(run["step_seconds"], run["plan_versions"], strict=True))
    asked = {row["step"]: row["trigger"] for row in run["replans"] if row["trigger"] in ("slow", "waits")}
    state, decisions, version = Policy.new("A", _config(run["policy"])), [], 1
    own: tuple[int, int, Iterator[float]] | None = None      # (switch step, version, its seconds)
    for index, (seconds, running) in enumerate(recorded):
        if own is not None and index + 1 >= own[0]:
            seconds, running = next(own[2], None), own[1]
            if seconds is None:
                break
        state, queue = step(state, Iteration(index, seconds, 0.0, running), 0.0)
        if index + 1 in asked:
            state, more = step(state, ReplanNow(asked[index + 1]), 0.0)
            queue += more
        while queue:
            action = queue.pop(0)
            decisions.append((index + 1, action))
            more = []
            if isinstance(action, RequestPlan) and searches:
                search = searches.pop(0)
                state, more = step(state, SearchDone(action.request, version, search["predicted_seconds"],
                                                     search["running_seconds"]), 0.0)
            elif isinstance(action, Commit):
                if index + 1 >= run["change_step"]:
                    return run, decisions
                state, more = step(state, Committed(action.version, None), 0.0)
                version = action.version + 1
            elif isinstance(action, RollBack):
                state, more = step(state, Committed(version, None, same_as=action.to_version), 0.0)
                ran = [i for i, (_, ran_version) in enumerate(recorded) if ran_version == version]
                if ran and ran[0] + 1 != switch_step(index + 1):
                    own = (switch_step(index + 1), version, iter([recorded[i][0] for i in ran]))
                version += 1
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
    ("stale-tail-dlrm.json", 81, 84, ("v2 measured 5 iterations in a row after the switch each more than 20.0 % "
                                      "over v1's 0.196 s")),
    # the loop's DLRM run 2: recorded 40; v2 was rolled back at its verdict (85 here), v1 re-installed (as
    # v3) from step 93, drifted at 101 and searched at 105. Now v2 is rolled back at 73 and v3 runs from 81
    ("rollback-dlrm.json", 85, 88, ("v3, re-installed by the rollback, measured 5 iterations in a row each more "
                                    "than 20.0 % over the 0.216 s")),
])
def test_a_change_as_a_trial_begins_is_searched_for_sooner(name, drift_at, search_at, shows):
    run, decisions = replay(name)
    step_, drift, search = after_change(run, decisions)
    assert (step_, search) == (drift_at, search_at) and shows in drift.reason
    last_step, last = decisions[-1]
    assert isinstance(last, Commit) and last_step == search_at
    assert last_step - run["change_step"] <= 19 < run["recorded_iterations_to_commit"] - 10
    # what came before the change is the recording's: the first plan at step 20, kept, then the second search
    before = [(at, type(action).__name__) for at, action in decisions
              if at < run["change_step"] and isinstance(action, RequestPlan | Commit | RollBack)]
    assert before[:2] == [(20, "RequestPlan"), (20, "Commit")] and len(before) == 4
    rollbacks = [at for at, action in decisions if isinstance(action, RollBack)]
    assert rollbacks == ([73] if name.startswith("rollback") else [])
