"""``p2 pipeline`` through its real entry point (``optimizer_service.cli.app.main``), in-process."""

import json

import pytest

from optimizer_service.cli.app import main
from optimizer_service.plan.pipeline import PipelineSchedule
from optimizer_service.resharding.pipeline_costs import PipelineCosts
from optimizer_service.resharding.pipeline_schedules import SCHEDULE_NAMES
from tests.support.cli import p2


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["pipeline", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_help_through_the_console_script():
    result = p2("pipeline", "--help")
    assert result.returncode == 0 and "eager-1f1b-wd" in result.stdout


def test_one_schedule_prints_its_grid_and_numbers(capsys):
    code, out, err = run(capsys, "--stages", "2", "--microbatches", "3", "--schedule", "eager-1f1b",
                         "--forward-seconds", "1", "--backward-seconds", "2", "--comm-seconds", "0.5",
                         "--activation-mb", "1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("gpt profile, 2 stages x 3 micro-batches")
    grid = "\n".join(lines[3:6])
    assert grid == "eager-1f1b stages=2 microbatches=3\n0: 0F0 0F1 0F2 0B0 0B1 0B2\n1: 1F0 1B0 1F1 1B1 1F2 1B2"
    assert lines[6] == "  iteration 13000.000 ms, bubble 30.8%, peak activation per stage [3.0, 1.0] MiB"
    assert "vs 1f1b" not in out          # no comparison for one schedule


def test_all_compares_every_schedule_with_1f1b_and_writes_the_json(capsys, tmp_path):
    path = tmp_path / "p.json"
    code, out, err = run(capsys, "--stages", "4", "--microbatches", "8", "--profile", "u-transformer",
                         "--json", str(path))
    assert code == 0, err
    table = out[out.index("schedule        "):].splitlines()
    assert [line.split()[0] for line in table[1:5]] == list(SCHEDULE_NAMES)
    assert table[2].split()[3] == "1.000"
    data = json.loads(path.read_text())
    assert (data["stages"], data["microbatches"], data["profile"], data["overlap"], data["links"]) == \
        (4, 8, "u-transformer", True, "edge")
    assert PipelineCosts.parse(data["costs"]).stage_count == 4
    by_name = {s["name"]: s for s in data["schedules"]}
    assert list(by_name) == list(SCHEDULE_NAMES)
    assert by_name["1f1b"]["iteration_seconds"] == pytest.approx(0.418)
    assert by_name["eager-1f1b"]["iteration_seconds"] == pytest.approx(0.362)
    assert by_name["eager-1f1b-wd"]["iteration_seconds"] == pytest.approx(0.322)
    assert by_name["eager-1f1b"]["ratio_to_1f1b"] == pytest.approx(0.362 / 0.418)
    assert by_name["eager-1f1b-wd"]["weight_delays"] == [0, 0, 0, 2] and by_name["1f1b"]["weight_delays"] is None
    mib = 2**20
    assert by_name["1f1b"]["peak_activation_bytes_per_stage"] == [4 * 48 * mib, 3 * 48 * mib, 2 * 48 * mib, 48 * mib]
    assert by_name["eager-1f1b"]["peak_inflight_microbatches_per_stage"] == [7, 5, 3, 1]
    for entry in data["schedules"]:
        schedule = PipelineSchedule.parse(entry["text"])
        assert schedule.name == entry["name"] and 0 < entry["bubble_fraction"] < 1
        assert len(entry["actions"]) == sum(len(a) for a in schedule.stages)
        assert max(a["end"] for a in entry["actions"]) == pytest.approx(entry["iteration_seconds"])
        assert {(t["from_stage"], t["to_stage"]) for t in entry["transfers"]} == {
            (0, 1), (1, 2), (2, 3), (0, 3), (1, 0), (2, 1), (3, 2), (3, 0)}


def test_json_to_stdout_is_only_json_and_no_overlap_is_slower(capsys):
    code, out, _ = run(capsys, "--schedule", "1f1b", "--json", "-")
    assert code == 0
    overlapped = json.loads(out)
    code, out, _ = run(capsys, "--schedule", "1f1b", "--no-overlap", "--json", "-")
    blocked = json.loads(out)
    assert blocked["overlap"] is False
    assert blocked["schedules"][0]["iteration_seconds"] > overlapped["schedules"][0]["iteration_seconds"]


def test_links_host_shares_each_stages_nic(capsys):
    """4 stages, F 2 ms, B 4 ms, 5.4 ms each way: sharing a NIC slows the pipeline, and eager-1F1B's
    lead over 1F1B shrinks; with 2 stages both link models agree."""
    common = ("--microbatches", "8", "--forward-seconds", "0.002", "--backward-seconds", "0.004",
              "--comm-seconds", "0.0054", "--json", "-")
    found = {}
    for stages in ("2", "4"):
        for links in ("edge", "host"):
            code, out, err = run(capsys, "--stages", stages, "--links", links, *common)
            assert code == 0, err
            data = json.loads(out)
            assert data["links"] == links
            found[(stages, links)] = {s["name"]: s["iteration_seconds"] for s in data["schedules"]}
    assert found[("2", "edge")] == found[("2", "host")]
    for name in SCHEDULE_NAMES:
        assert found[("4", "host")][name] >= found[("4", "edge")][name]
    edge, host = found[("4", "edge")], found[("4", "host")]
    assert host["eager-1f1b"] > edge["eager-1f1b"]
    assert host["eager-1f1b"] / host["1f1b"] > edge["eager-1f1b"] / edge["1f1b"]
    code, out, _ = run(capsys, "--stages", "3", "--microbatches", "2", "--schedule", "1f1b", "--links", "host")
    assert code == 0 and "links: host (each stage's sends share its egress" in out.splitlines()[1]


def test_the_gantt_chart_is_a_png(capsys, tmp_path):
    png = tmp_path / "g.png"
    code, _, err = run(capsys, "--stages", "3", "--microbatches", "4", "--gantt", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "gantt chart ->" in err


@pytest.mark.parametrize("args, message", [
    (["--stages", "0"], "--stages"),
    (["--microbatches", "0"], "--microbatches"),
    (["--stages", "17"], "--stages"),
    (["--microbatches", "257"], "--microbatches"),
    (["--schedule", "zb-h1"], "--schedule"),
    (["--profile", "resnet"], "--profile"),
    (["--comm-seconds", "-1"], "--comm-seconds"),
    (["--weight-share", "2"], "--weight-share"),
    (["--links", "nic"], "--links"),
    (["--skip-seconds", "1"], "--skip-seconds applies to --profile u-transformer only"),
    (["--json", "/nowhere/x.json"], "folder /nowhere does not exist"),
    (["--gantt", "/nowhere/x.png"], "folder /nowhere does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
