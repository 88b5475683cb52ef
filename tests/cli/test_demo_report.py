"""The pure parts of ``p2 demo``'s report: NIC drops per iteration, the live search's model time, the
bound and the peer beside each phase, and every committed plan's prediction."""

from __future__ import annotations

import pytest

from deploy.emulated.cores import CoreTimes
from optimizer_service.cli.demo_report import (
    PHASES,
    SETTLE,
    TURN_WARMUP,
    WARMUP,
    beside,
    busy_text,
    committed_plans,
    core_shares,
    drop_rate,
    iterations_to_commit,
    model_seconds,
    most_stolen,
    over_peer_beside,
    peer,
    phases,
    speedup,
    table,
)


def test_drop_rate_is_per_channel_and_per_iteration_between_the_samples_around_the_steps():
    samples = [(0, {0: 0, 1: 0}), (10, {0: 50, 1: 5}), (20, {0: 150, 1: 5}), (30, {0: 160, 1: 65})]
    assert drop_rate(samples, 11, 20) == {"0": 10.0, "1": 0.0}
    assert drop_rate(samples, 21, 30) == {"0": 1.0, "1": 6.0}
    assert drop_rate(samples, 5, 25) == {"0": 160 / 30, "1": 65 / 30}
    assert drop_rate(samples, 0, 10) is None            # no sample before the first step
    assert drop_rate(samples, 25, 31) is None           # none after the last
    assert drop_rate([], 1, 2) is None


def test_model_seconds_is_the_searched_event_of_that_version():
    events = [{"kind": "searched", "version": 1, "search": {"predicted_seconds": 0.5}},
              {"kind": "commit", "version": 2},
              {"kind": "searched", "version": 2, "search": {"predicted_seconds": 0.25}}]
    assert model_seconds(events, 2) == 0.25 and model_seconds(events, 1) == 0.5
    assert model_seconds(events, 3) is None and model_seconds(events, None) is None


def test_phases_carry_the_drops_of_their_steps():
    seconds = [1.0] * 10 + [0.5] * 20
    versions = [0] * 10 + [1] * 20
    drops = [(s, {0: 10 * s if s <= 10 else 100 + (s - 10), 1: 0}) for s in range(31)]
    rows = phases({"step_seconds": seconds, "plan_versions": versions}, None,
                  {1: {"predicted_seconds": 0.6}}, [], drops)
    by_name = {row["name"]: row for row in rows}
    assert by_name["passthrough"]["nic_drops_per_iteration"] == {"0": pytest.approx(10.0), "1": 0.0}
    assert by_name["first-plan"]["nic_drops_per_iteration"] == {"0": pytest.approx(1.0), "1": 0.0}
    assert by_name["first-plan"]["measured_iteration_seconds"] == 0.5
    assert by_name["changed"]["nic_drops_per_iteration"] is None        # no change, no steps


def test_phases_and_peer_segments_carry_how_busy_the_hosts_cores_were_over_their_steps():
    seconds = [1.0] * 10 + [0.5] * 20
    versions = [0] * 10 + [1] * 20
    # 2 cores: under passthrough (steps up to 10) 1 core-s of processes per 2 s of the cores' time,
    # under the plan 0.9 core-s of processes and 0.1 of softirq per 1 s.
    times = [(s, CoreTimes(2, user=0.5 * min(s, 10) + 0.45 * max(0, s - 10), softirq=0.05 * max(0, s - 10),
                           idle=1.5 * min(s, 10) + 0.5 * max(0, s - 10)).to_list()) for s in range(31)]
    rows = phases({"step_seconds": seconds, "plan_versions": versions}, None, {1: {}}, [], (), times)
    by_name = {row["name"]: row for row in rows}
    assert by_name["passthrough"]["host_cores"]["busy"] == pytest.approx(0.25)
    plan = by_name["first-plan"]["host_cores"]
    assert plan["busy"] == pytest.approx(0.5) and plan["kernel"] == pytest.approx(0.05)
    assert by_name["changed"]["host_cores"] is None
    assert core_shares(times, 0, 5) is None and core_shares([], 1, 2) is None
    assert busy_text(plan) == "50 % (k 5 %)" and busy_text(None) == "-"
    result = _peer_result([0.3] * 12, [_turn(1, 12, 10, "before", cores=(CoreTimes(2, user=1, idle=1),
                                                                         CoreTimes(2, user=3, idle=2)))])
    before = peer(result, rows)["before"]
    assert before["host_cores"]["busy"] == pytest.approx(2 / 3)
    assert "50 % (k 5 %)" in table(rows)


def _run(versions: list[int], seconds: list[float]) -> dict:
    return {"step_seconds": seconds, "plan_versions": versions}


def _turn(first: int, last: int, job_step: int, cluster: str, drops: tuple[dict, dict] | None = None,
          cores: tuple[CoreTimes, CoreTimes] | None = None) -> dict:
    """A peer turn as ``p2 demo`` records it (demo_turns.PeerTurn.as_json)."""
    start, end = ({"drops": None, "cores": None} for _ in range(2))
    if drops:
        start["drops"], end["drops"] = drops
    if cores:
        start["cores"], end["cores"] = (times.to_list() for times in cores)
    return {"first_step": first, "last_step": last, "measured_from": first + (WARMUP if first == 1 else TURN_WARMUP),
            "job_step": job_step, "cluster": cluster, "start": start, "end": end}


def _peer_result(seconds: list[float], turns: list[dict], every: int = 10) -> dict:
    return {"rank0": {"step_seconds": seconds}, "turns": turns, "ifnames": "nic0,nic1", "every": every}


def test_phases_carry_the_first_plans_bound_before_the_change_and_the_replanned_plans_after():
    # 10 passthrough steps, v1 for 20 (the change at step 25), v2 from step 36.
    versions = [0] * 10 + [1] * 25 + [2] * 15
    seconds = [1.0] * 10 + [0.5] * 15 + [0.8] * 10 + [0.6] * 15
    plans = {1: {"predicted_seconds": 0.55, "bound_iteration_seconds": 0.4},
             2: {"predicted_seconds": 0.5, "bound_iteration_seconds": 0.5}}
    commit = {"kind": "commit", "version": 2, "iteration": 34}
    rows = {row["name"]: row for row in phases(_run(versions, seconds), 25, plans, [commit])}
    assert [rows[name]["bound_iteration_seconds"] for name in PHASES] == [0.4, 0.4, 0.5, 0.5]
    assert rows["passthrough"]["ratio_to_bound"] == pytest.approx(2.5)
    assert rows["first-plan"]["ratio_to_bound"] == pytest.approx(1.25)
    assert rows["changed"]["ratio_to_bound"] == pytest.approx(1.6)
    assert rows["replanned"]["ratio_to_bound"] == pytest.approx(1.2)


def test_the_replanned_phase_is_the_first_commit_after_the_change_not_a_restore():
    # v1 until the change at step 25; v1 restored as v3 at step 31 (measured before the change: no
    # replan); the service's search commits v4 at step 41
    versions = [0] * 10 + [1] * 20 + [3] * 10 + [4] * 20
    seconds = [1.0] * 10 + [0.5] * 15 + [0.9] * 15 + [0.6] * 20
    events = [{"kind": "commit", "version": 1, "iteration": 9}, {"kind": "rollback", "version": 1, "iteration": 29},
              {"kind": "commit", "version": 4, "iteration": 39}]
    rows = {row["name"]: row for row in phases(_run(versions, seconds), 25, {}, events)}
    assert rows["replanned"]["plan_version"] == 4 and rows["replanned"]["measured_iteration_seconds"] == 0.6
    assert rows["changed"]["plan_version"] == 1 and rows["changed"]["last_step"] == 30
    # no commit after the change: nothing was replanned, whatever ran
    rows = {row["name"]: row for row in phases(_run(versions, seconds), 25, {}, events[:2])}
    assert rows["replanned"]["plan_version"] is None and rows["replanned"]["steps"] == 0


@pytest.mark.parametrize("asked, counts", [(25, False), (27, False), (28, True)])
def test_a_plan_searched_on_the_old_cluster_s_window_is_no_replan(asked, counts):
    # the change at step 25; a search asked for at step ``asked`` read the 7 steps up to it and
    # committed v2 at step 31; the next search (asked at step 40, after the change) committed v3
    versions = [0] * 10 + [1] * 21 + [2] * 14 + [3] * 15
    seconds = [1.0] * 10 + [0.5] * 15 + [0.9] * 6 + [0.8] * 14 + [0.6] * 15
    events = [{"kind": "replan", "iteration": asked - 1},
              {"kind": "searched", "version": 2, "iteration": 29,
               "search": {"window_iterations": 7, "predicted_seconds": 0.7}},
              {"kind": "commit", "version": 2, "iteration": 29},
              {"kind": "replan", "iteration": 39},
              {"kind": "searched", "version": 3, "iteration": 43,
               "search": {"window_iterations": 7, "predicted_seconds": 0.55}},
              {"kind": "commit", "version": 3, "iteration": 43}]
    rows = {row["name"]: row for row in phases(_run(versions, seconds), 25, {}, events)}
    assert rows["replanned"]["plan_version"] == (2 if counts else 3)
    assert iterations_to_commit(events, 25) == (5 if counts else 19)


def test_phases_without_a_bound_say_none():
    rows = phases(_run([0] * 10 + [1] * 10, [1.0] * 10 + [0.5] * 10), None, {1: {"predicted_seconds": 0.5}}, [])
    assert all(row["bound_iteration_seconds"] is None and row["ratio_to_bound"] is None for row in rows)


def test_committed_plans_are_judged_on_the_cluster_state_they_were_committed_for():
    # v1 before the change (step 21) and on after it; v2 only after it; v3 a rollback to passthrough.
    versions = [0] * 5 + [1] * 25 + [2] * 10 + [3] * 10
    seconds = [1.0] * 5 + [0.5] * 15 + [0.9] * 10 + [0.6] * 10 + [1.0] * 10
    plans = {1: {"predicted_seconds": 0.55, "bound_iteration_seconds": 0.4},
             2: {"predicted_seconds": 0.6, "bound_iteration_seconds": 0.5},
             3: {"origin": "rollback to v0"}}
    events = [{"kind": "searched", "version": 1, "search": {"running_seconds": 0.95, "predicted_seconds": 0.5}}]
    rows = {row["plan_version"]: row for row in committed_plans(_run(versions, seconds), 21, plans, events)}
    assert rows[1]["cluster"] == "before" and rows[1]["steps"] == 15 - 3       # steps 9..20 (after settling)
    assert rows[1]["measured_iteration_seconds"] == 0.5 and rows[1]["prediction_error"] == pytest.approx(0.1)
    assert rows[1]["ratio_to_bound"] == pytest.approx(1.25)
    assert rows[2]["cluster"] == "after" and rows[2]["measured_iteration_seconds"] == 0.6
    assert rows[2]["prediction_error"] == pytest.approx(0.0)
    assert rows[3]["predicted_iteration_seconds"] == 0.95 and rows[3]["bound_iteration_seconds"] is None
    assert rows[3]["ratio_to_bound"] is None


def test_a_plan_committed_before_the_change_that_ran_only_after_it_has_no_error():
    # v1 from step 6; v2 committed at step 19 (iteration 18), before the change at step 21, and
    # switched to at step 22: its prediction was for the cluster before, where it never ran.
    versions = [0] * 5 + [1] * 16 + [2] * 19
    seconds = [1.0] * 5 + [0.5] * 16 + [1.2] * 19
    plans = {1: {"predicted_seconds": 0.5}, 2: {"predicted_seconds": 0.45}}
    events = [{"kind": "commit", "version": 1, "iteration": 4}, {"kind": "commit", "version": 2, "iteration": 18}]
    rows = {row["plan_version"]: row for row in committed_plans(_run(versions, seconds), 21, plans, events)}
    assert rows[2]["cluster"] == "before" and rows[2]["steps"] == 0
    assert rows[2]["measured_iteration_seconds"] is None and rows[2]["prediction_error"] is None
    assert rows[1]["cluster"] == "before" and rows[1]["prediction_error"] == pytest.approx(0.0)
    # Committed after the change (iteration 22, step 23): judged after it, as before.
    late = [events[0], {"kind": "commit", "version": 2, "iteration": 22}]
    rows = {row["plan_version"]: row for row in committed_plans(_run(versions, seconds), 21, plans, late)}
    assert rows[2]["cluster"] == "after" and rows[2]["measured_iteration_seconds"] == 1.2


def test_a_plan_a_rollback_re_installed_after_the_change_is_judged_where_its_prediction_was_made():
    # v1 before the change (step 21); v2 committed after it and rolled back: v1 re-installed as v3 with
    # v1's prediction, made before the change; v4 a search's plan after it, judged there.
    versions = [0] * 5 + [1] * 20 + [2] * 10 + [3] * 10 + [4] * 10
    seconds = [1.0] * 5 + [0.5] * 16 + [0.9] * 4 + [1.3] * 10 + [1.0] * 10 + [0.8] * 10
    plans = {1: {"predicted_seconds": 0.5, "origin": "search r1"}, 2: {"predicted_seconds": 0.45},
             3: {"predicted_seconds": 0.5, "origin": "rollback to v1"}, 4: {"predicted_seconds": 0.8}}
    events = [{"kind": "commit", "version": 1, "iteration": 4}, {"kind": "commit", "version": 2, "iteration": 23},
              {"kind": "commit", "version": 4, "iteration": 44}]
    rows = {row["plan_version"]: row for row in committed_plans(_run(versions, seconds), 21, plans, events)}
    assert rows[3]["cluster"] == "before" and rows[3]["steps"] == 0 and rows[3]["prediction_error"] is None
    assert rows[2]["cluster"] == "after" and rows[2]["prediction_error"] == pytest.approx(0.45 / 1.3 - 1)
    assert rows[4]["cluster"] == "after" and rows[4]["prediction_error"] == pytest.approx(0.0)


def test_the_peer_is_the_median_of_its_turns_after_warm_up_with_their_drops_and_the_bound_of_its_state():
    # Turn 1 (steps 1-10, after the job's step 10): 5 warm-up steps; turn 2 (11-20, after step 20): 2.
    seconds = [2.0] * WARMUP + [0.3, 0.4, 0.5, 0.6, 0.7] + [2.0] * TURN_WARMUP + [0.45] * 8 + [0.9] * 10
    turns = [_turn(1, 10, 10, "before", drops=({0: 0, 1: 0}, {0: 50, 1: 5})),
             _turn(11, 20, 20, "before", drops=({0: 60, 1: 5}, {0: 140, 1: 13})),
             _turn(21, 30, 40, "after")]
    rows = phases(_run([0] * 10 + [1] * 30, [1.0] * 40), 30, {1: {"bound_iteration_seconds": 0.25}}, [])
    found = peer(_peer_result(seconds, turns), rows)
    before = found["before"]
    assert before["measured_iteration_seconds"] == 0.45 and before["steps"] == 13 and before["turns"] == 2
    assert (before["first_step"], before["last_step"]) == (WARMUP + 1, 20)
    assert before["turn_seconds"] == [[10, 0.5], [20, 0.45]]
    assert before["nic_drops_per_iteration"] == {"0": pytest.approx(130 / 13), "1": pytest.approx(13 / 13)}
    assert before["bound_iteration_seconds"] == 0.25 and before["ratio_to_bound"] == pytest.approx(1.8)
    assert before["gloo_socket_ifname"] == "nic0,nic1" and before["host_cores"] is None
    assert found["after"]["measured_iteration_seconds"] == 0.9 and found["after"]["nic_drops_per_iteration"] is None
    assert peer(None, rows) == {"before": None, "after": None}


def test_each_plan_is_compared_with_the_peers_turns_beside_it():
    # Passthrough steps 1-10, the first plan 11-40, the change at 40; the peer's turns every 10 of the
    # job's steps, slower as the host drifts (0.40 s, then 0.60 s from the job's step 30 on).
    versions, seconds = [0] * 10 + [1] * 30 + [2] * 30, [1.0] * 10 + [0.3] * 30 + [0.5] * 30
    peer_seconds = [9.0] * 100
    turns = []
    for k, job_step in enumerate(range(10, 80, 10)):
        first = 10 * k + 1
        turn = _turn(first, first + 9, job_step, "before" if job_step < 40 else "after")
        for s in range(turn["measured_from"], first + 10):
            peer_seconds[s - 1] = 0.4 if job_step < 30 else 0.6
        turns.append(turn)
    result = _peer_result(peer_seconds, turns)
    rows = phases(_run(versions, seconds), 40, {}, [{"kind": "commit", "version": 2, "iteration": 44}])
    beside(rows, result)
    by_name = {row["name"]: row for row in rows}
    first = by_name["first-plan"]               # steps 14-39: the turns after steps 10, 20, 30
    assert first["peer_turns"] == 3 and first["peer_iteration_seconds"] == 0.4
    assert first["speedup_over_peer"] == pytest.approx(0.4 / 0.3)
    assert over_peer_beside(first, None) == first["speedup_over_peer"]
    replanned = by_name["replanned"]            # after the change: the turns after steps 40-70
    assert replanned["peer_turns"] == 4 and replanned["speedup_over_peer"] == pytest.approx(0.6 / 0.5)
    lonely = {"measured_iteration_seconds": 0.3, "speedup_over_peer": None}
    assert over_peer_beside(lonely, {"measured_iteration_seconds": 0.6}) == pytest.approx(2.0)


def test_the_jobs_first_steps_of_each_turn_are_in_no_phase():
    versions, seconds = [0] * 10 + [1] * 30, [1.0] * 10 + [0.3] * 9 + [5.0] + [0.3] * 20
    rows = phases(_run(versions, seconds), None, {1: {"predicted_seconds": 0.3}}, [], skip=[20])
    first = {row["name"]: row for row in rows}["first-plan"]
    assert first["steps"] == 30 - SETTLE - 1 and first["measured_iteration_seconds"] == 0.3
    plans = committed_plans(_run(versions, seconds), None, {1: {"predicted_seconds": 0.3}}, [], skip=[20])
    assert plans[0]["steps"] == 30 - SETTLE - 1


def test_speedup_is_the_ratio_of_measured_times_or_none():
    assert speedup({"measured_iteration_seconds": 0.6}, {"measured_iteration_seconds": 0.4}) == pytest.approx(1.5)
    assert speedup(None, {"measured_iteration_seconds": 0.4}) is None
    assert speedup({"measured_iteration_seconds": None}, {"measured_iteration_seconds": 0.4}) is None


def test_the_table_shows_the_peer_beside_its_cluster_state_and_the_bound():
    versions = [0] * 10 + [1] * 25 + [2] * 15
    seconds = [1.0] * 10 + [0.5] * 15 + [0.8] * 10 + [0.6] * 15
    plans = {1: {"predicted_seconds": 0.55, "bound_iteration_seconds": 0.4},
             2: {"predicted_seconds": 0.5, "bound_iteration_seconds": 0.5}}
    rows = phases(_run(versions, seconds), 25, plans, [{"kind": "commit", "version": 2, "iteration": 34}])
    result = _peer_result([0.7] * 20, [_turn(1, 10, 10, "before"), _turn(11, 20, 30, "after")])
    lines = table(rows, peer(result, rows)).splitlines()
    assert [line.split()[0] for line in lines] == ["phase", "passthrough", "peer-before", "first-plan", "changed",
                                                   "peer-after", "replanned"]
    assert "bound" in lines[0]
    assert lines[2].split()[1] == "gloo" and "700.0 ms" in lines[2] and "1.75x" in lines[2]     # 0.7 / 0.4
    assert "500.0 ms" in lines[6] and "1.20x" in lines[6]                                        # 0.6 / 0.5
    assert len(table(rows).splitlines()) == 5                                                    # no peer rows


def test_a_phase_whose_cores_the_hypervisor_took_is_marked():
    """Steal time: the ranks ran on less than the host's cores, which makes the run's figures not
    comparable with another's; marked from STEAL_MARKED (2 %) on, in the table and the loop's summary."""
    # 2 cores over 1 s: 1.6 core-s of processes, 0.2 idle, 0.2 taken by the hypervisor
    times = [(0, CoreTimes(2).to_list()), (10, CoreTimes(2, user=1.6, idle=0.2, steal=0.2).to_list())]
    assert busy_text(core_shares(times, 1, 10)) == "80 % (k 0 %), stolen 10 %"
    taken = {"busy": 0.8, "kernel": 0.1, "steal": 0.12}
    assert busy_text({"busy": 0.8, "kernel": 0.1, "steal": 0.019}) == "80 % (k 10 %)"
    assert busy_text(taken) == "80 % (k 10 %), stolen 12 %"
    assert most_stolen({"passthrough": {"busy": 0.8, "kernel": 0.1, "steal": 0.0}, "first-plan": taken,
                        "changed": None, "replanned": {"busy": 0.8, "kernel": 0.1, "steal": 0.05}}) == (
        "first-plan", 0.12)
    assert most_stolen({"passthrough": {"busy": 0.8, "kernel": 0.1, "steal": 0.01}, "changed": None}) is None
    assert most_stolen({}) is None
