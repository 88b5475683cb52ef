"""``p2 demo`` end to end with real processes: the loopback run (any user) and the
emulated-cluster run (root; skipped without the capability) in short configurations."""

from __future__ import annotations

import json

import pytest

from deploy.emulated import can_manage_namespaces
from tests.support.cli import p2

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

SMALL = ["--tables", "8", "--rows", "2000", "--dim", "32", "--batch", "32", "--search-budget", "1"]


def check_report(report: dict, emulated: bool) -> None:
    assert [phase["name"] for phase in report["phases"]] == ["passthrough", "first-plan", "changed", "replanned"]
    assert set(report) >= {"cluster", "job", "phases", "speedup", "replan", "events"}
    assert set(report["replan"]) >= {"iterations_to_commit", "ratio_to_offline_best"}
    assert report["cluster"]["emulated"] is emulated
    kinds = [event["kind"] for event in report["events"]]
    assert "replan" in kinds and "commit" in kinds, kinds       # the service planned and committed by itself
    assert all(event["reason"] for event in report["events"])
    first = report["phases"][1]
    assert first["plan_version"] and first["plan_version"] > 0 and first["measured_iteration_seconds"] > 0
    assert first["predicted_iteration_seconds"] > 0 and report["speedup"] > 0
    assert max(report["plan_versions"]) > 0 and len(report["step_seconds"]) == report["job"]["steps"]


def test_the_demo_on_loopback_plans_and_commits(tmp_path):
    out, picture = tmp_path / "demo.json", tmp_path / "demo.png"
    # Steps of a few tens of ms: enough of them that the search and commit (about a second, several
    # on a loaded machine) land well before the end.
    result = p2("demo", "--loopback", "--nodes", "1", "--per-node", "4", "--steps", "240", *SMALL,
                "--name", "p2demotest", "--work-dir", str(tmp_path / "work"), "--json", str(out),
                "--plot", str(picture), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on loopback" in result.stderr and "speed-ups" in result.stderr
    assert "passthrough" in result.stdout and "first-plan" in result.stdout
    check_report(json.loads(out.read_text()), emulated=False)
    assert picture.stat().st_size > 10_000


@pytest.mark.skipif(not can_manage_namespaces(), reason="the emulated cluster needs CAP_NET_ADMIN (root)")
def test_the_demo_on_the_emulated_cluster_commits_a_plan_and_a_replan_after_the_nic_slows(tmp_path):
    # The demo's model (a smaller one leaves the NICs idle: nothing to replan for), the second NIC slowed 8x.
    out = tmp_path / "demo.json"
    result = p2("demo", "--steps", "130", "--throttle", "8", "--search-budget", "1", "--name", "p2demotest",
                "--work-dir", str(tmp_path / "work"), "--json", str(out), timeout=1200)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    check_report(report, emulated=True)
    assert report["replan"]["change_step"] is not None and "CLUSTER CHANGE" in result.stderr
    phases = {phase["name"]: phase for phase in report["phases"]}
    assert report["replan"]["iterations_to_commit"] is not None, report["events"]
    assert phases["replanned"]["plan_version"] > phases["changed"]["plan_version"] > 0, phases
    assert phases["replanned"]["measured_iteration_seconds"] > 0
    assert set(phases["passthrough"]["nic_drops_per_iteration"]) == {"0", "1"}
    assert report["replan"]["offline_best_predicted_seconds"] > 0 and report["replan"]["ratio_to_offline_best"] > 0


@pytest.mark.parametrize("args, words", [
    (["--job", "ddp", "--tables", "8"], "--tables sizes the DLRM-like model"),
    (["--job", "fsdp"], "'fsdp' is not one of"),
    (["--tables", "7"], "must be a multiple of the 8 ranks"),
])
def test_bad_demo_options_are_one_line_and_exit_2(args, words, tmp_path):
    result = p2("demo", *args, "--work-dir", str(tmp_path / "work"))
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert not (tmp_path / "work" / "service.db").exists()
