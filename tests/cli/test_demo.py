"""``p2 demo`` end to end with real processes: the loopback run (any user) and the
emulated-cluster run (root; skipped without the capability) in short configurations."""

from __future__ import annotations

import json

import pytest

from deploy.emulated import can_manage_namespaces
from optimizer_service.cli.demo_report import TURN_WARMUP, WARMUP
from tests.support.cli import p2

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

SMALL = ["--tables", "8", "--rows", "2000", "--dim", "32", "--batch", "32", "--search-budget", "1"]


def check_report(report: dict, emulated: bool) -> None:
    assert [phase["name"] for phase in report["phases"]] == ["passthrough", "first-plan", "changed", "replanned"]
    assert set(report) >= {"cluster", "job", "phases", "peer", "plans", "speedup", "speedup_over_peer", "replan",
                           "events"}
    assert set(report["replan"]) >= {"iterations_to_commit", "ratio_to_offline_best", "speedup_over_peer"}
    assert report["cluster"]["fabric"] == "lossless"
    assert report["cluster"]["emulated"] is emulated
    kinds = [event["kind"] for event in report["events"]]
    assert "replan" in kinds and "commit" in kinds, kinds       # the service planned and committed by itself
    assert all(event["reason"] for event in report["events"])
    first = report["phases"][1]
    assert first["plan_version"] and first["plan_version"] > 0 and first["measured_iteration_seconds"] > 0
    assert first["predicted_iteration_seconds"] > 0 and report["speedup"] > 0
    assert max(report["plan_versions"]) > 0 and len(report["step_seconds"]) == report["job"]["steps"]


def service_lines(result) -> str:
    """The service's decisions as the demo printed them (its ``[step N: kind]`` lines), for a failure's message."""
    return "\n".join(line for line in result.stderr.splitlines() if line.startswith("  ["))


def test_the_demo_on_loopback_plans_and_commits(tmp_path):
    out, picture = tmp_path / "demo.json", tmp_path / "demo.png"
    # Steps of a few tens of ms: enough of them that the search and commit (about a second, several
    # on a loaded machine) land well before the end.
    result = p2("demo", "--loopback", "--nodes", "1", "--per-node", "4", "--steps", "240", *SMALL,
                "--name", "p2demotest", "--work-dir", str(tmp_path / "work"), "--json", str(out),
                "--plot", str(picture), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on loopback" in result.stderr and "speed-ups" in result.stderr
    assert "passthrough" in result.stdout and "first-plan" in result.stdout and "bound" in result.stdout
    report = json.loads(out.read_text())
    check_report(report, emulated=False)
    assert report["peer"] == {"before": None, "after": None}      # no NICs on loopback: no peer to run
    assert picture.stat().st_size > 10_000


@pytest.mark.skipif(not can_manage_namespaces(), reason="the emulated cluster needs CAP_NET_ADMIN (root)")
def test_the_demo_on_the_emulated_cluster_commits_a_plan_and_a_replan_after_the_nic_slows(tmp_path):
    # The demo's model (a smaller one leaves the NICs idle: nothing to replan for), the second NIC slowed 8x,
    # the peer's turns (8 steps after every 20 of the job's). 170 steps: the change comes by step 94 at the latest, and a replan that waited for
    # a trial the change spoiled (about 40 iterations) still has settled steps before the end; with 130, one
    # CI run committed its replan too late for any.
    out = tmp_path / "demo.json"
    result = p2("demo", "--steps", "170", "--throttle", "8", "--search-budget", "1", "--peer-steps", "8",
                "--name", "p2demotest", "--work-dir", str(tmp_path / "work"), "--json", str(out), timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    check_report(report, emulated=True)
    assert report["replan"]["change_step"] is not None and "CLUSTER CHANGE" in result.stderr
    phases = {phase["name"]: phase for phase in report["phases"]}
    assert report["replan"]["iterations_to_commit"] is not None, report["events"]
    assert phases["replanned"]["plan_version"] > phases["changed"]["plan_version"] > 0, phases
    assert phases["replanned"]["measured_iteration_seconds"] is not None, (phases["replanned"], service_lines(result))
    assert phases["replanned"]["measured_iteration_seconds"] > 0
    assert set(phases["passthrough"]["nic_drops_per_iteration"]) == {"0", "1"}
    assert 0 < phases["first-plan"]["host_cores"]["busy"] <= 1 and phases["first-plan"]["host_cores"]["cores"] >= 1
    assert report["replan"]["offline_best_predicted_seconds"] > 0 and report["replan"]["ratio_to_offline_best"] > 0
    # The peer (plain gloo over both NICs) in turns with the job, before and after the change, and the bounds.
    after_steps = {state: [step for step, _ in report["peer"][state]["turn_seconds"]] for state in ("before", "after")}
    assert after_steps["before"] + after_steps["after"] == [*range(20, 170, 20), 170]         # a turn after each
    change = report["replan"]["change_step"]
    assert all(step < change for step in after_steps["before"]) and all(step >= change for step in after_steps["after"])
    for state in ("before", "after"):
        segment = report["peer"][state]
        turns = segment["turns"]
        first_turn = 8 - WARMUP if state == "before" else 8 - TURN_WARMUP
        assert segment["measured_iteration_seconds"] > 0
        # Turns beside one of the service's searches are left out of the medians (all of them, if every one was).
        kept = turns - segment["search_turns"] or turns
        assert segment["steps"] in (first_turn + (kept - 1) * (8 - TURN_WARMUP), kept * (8 - TURN_WARMUP)), segment
        assert segment["with_searches_iteration_seconds"] > 0
        assert segment["gloo_socket_ifname"] == "nic0,nic1" and set(segment["nic_drops_per_iteration"]) == {"0", "1"}
        assert 0 < segment["host_cores"]["busy"] <= 1
        assert segment["bound_iteration_seconds"] > 0 and segment["ratio_to_bound"] > 0
    assert report["speedup_over_peer"] > 0 and report["replan"]["speedup_over_peer"] > 0
    assert phases["first-plan"]["peer_turns"] >= 1 and phases["replanned"]["peer_turns"] >= 1
    assert report["speedup_over_peer"] == phases["first-plan"]["speedup_over_peer"]
    assert report["turn_warmup"] == [s for start in range(21, 171, 20) for s in (start, start + 1)]
    for name in ("first-plan", "replanned"):
        assert phases[name]["bound_iteration_seconds"] > 0 and phases[name]["ratio_to_bound"] > 0, phases[name]
    assert [plan["plan_version"] for plan in report["plans"]] == sorted(set(report["plan_versions"]) - {0})
    assert "peer-before" in result.stdout and "peer-after" in result.stdout and "GLOO_SOCKET_IFNAME" in result.stderr


@pytest.mark.parametrize("args, words", [
    (["--job", "ddp", "--tables", "8"], "--tables sizes the DLRM-like model"),
    (["--job", "bert"], "'bert' is not one of"),
    (["--fabric", "wet"], "'wet' is not one of"),
    (["--peer-steps", "3"], "--peer-steps 3 leaves no step after the peer's 5 warm-up steps (its first turn's)"),
    (["--peer-every", "0"], "'--peer-every': 0 is not in the range"),
    (["--tables", "7"], "must be a multiple of the 8 ranks"),
])
def test_bad_demo_options_are_one_line_and_exit_2(args, words, tmp_path):
    result = p2("demo", *args, "--work-dir", str(tmp_path / "work"))
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert not (tmp_path / "work" / "service.db").exists()
