"""``p2 synth`` and ``p2 topology`` end to end, through the real entry point."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.cli import p2

ROOT = Path(__file__).resolve().parents[2]


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "p2"
    assert script.exists()
    result = subprocess.run([str(script), "synth", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--topology" in result.stdout


@pytest.mark.parametrize("command", [[], ["synth"], ["topology"], ["topology", "show"], ["topology", "list"]])
def test_help_everywhere(command):
    result = p2(*command, "--help")
    assert result.returncode == 0
    assert "Usage: p2" in result.stdout


def test_synth_prints_every_placement_and_the_best():
    result = p2("synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--top", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for matrix in ("[[1 4] [4 4]]", "[[2 2] [2 8]]", "[[4 1] [1 16]]"):
        assert matrix in out
    assert "[(root, 1), (node, 2), (gpu, 2)]" in out
    assert "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather" in out
    assert "best: [[1 4] [4 4]]" in out
    assert "top 2 of 47" in out


def test_json_to_stdout_has_the_documented_fields():
    result = p2("synth", "--topology", "gcp-a100-4n", "--axes", "16,2,2", "--reduce", "0,2", "--bytes", "64MiB",
                "--json", "-")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # nothing but JSON on stdout
    for key in ("topology", "axes", "reduce", "bytes", "synthesis_seconds", "placements"):
        assert key in data
    assert data["topology"] == "gcp-a100-4n" and data["axes"] == [16, 2, 2] and data["reduce"] == [0, 2]
    assert data["bytes"] == 64 * 2**20
    assert len(data["placements"]) == 4
    assert sum(len(p["programs"]) for p in data["placements"]) == 188  # every program, not only the top K
    for placement in data["placements"]:
        assert {"matrix", "synthesis_hierarchy", "allreduce_seconds", "programs"} <= set(placement)
        times = [p["predicted_seconds"] for p in placement["programs"]]
        assert times == sorted(times)
        for program in placement["programs"]:
            assert program["text"] and program["steps"]
            for step in program["steps"]:
                assert step["collective"] in {"AllReduce", "ReduceScatter", "AllGather", "Reduce", "Broadcast"}
                assert all(isinstance(d, int) for g in step["groups"] for d in g)


def test_json_to_a_file_and_text_to_stdout(tmp_path):
    out = tmp_path / "synth.json"
    result = p2("synth", "--topology", "gcp-v100-2n", "--axes", "16", "--reduce", "0", "--algo", "tree",
                "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "best:" in result.stdout
    import os
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask, "permissions like any file the user writes"
    data = json.loads(out.read_text())
    assert data["algorithm"] == "tree" and len(data["placements"][0]["programs"]) == 47


def test_topology_file_is_accepted(tmp_path):
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump({
        "name": "mini", "levels": [{"name": "node", "cardinality": 2}, {"name": "gpu", "cardinality": 4}],
        "links": [{"name": "nvlink", "levels": ["gpu"], "bandwidth": "50GB/s", "latency": "2us"},
                  {"name": "nic", "levels": ["node"], "bandwidth": "200Mbit/s", "latency": "50us", "shared_by": 4}]}))
    result = p2("synth", "--topology", str(path), "--axes", "2,4", "--reduce", "1", "--json", "-")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["topology"] == "mini"


def test_explain_shows_lowered_steps_and_states():
    program = "node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather"
    result = p2("synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--explain", program,
                "--matrix", "[[2 2] [2 8]]")
    assert result.returncode == 0, result.stderr
    assert "lowered: ReduceScatter {0,8}" in result.stdout
    assert "d1: 2-3:0-1" in result.stdout           # after the ReduceScatter: chunks 2-3 summed over 0-1
    assert "valid: every device ends with the sum" in result.stdout


def test_explain_json():
    result = p2("synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--explain",
                "root InsideGroup ReduceScatter; root InsideGroup AllGather", "--json", "-")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [p["valid"] for p in data["placements"]] == [True, True, True]
    assert data["placements"][1]["steps"][0]["states_after"][0] == "0:0-3"


def test_explain_of_an_invalid_program_says_which_step_and_why():
    result = p2("synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--matrix",
                "[[2 2] [2 8]]", "--explain", "node InsideGroup ReduceScatter; node InsideGroup AllReduce")
    assert result.returncode == 2
    assert "INVALID: step 2" in result.stdout
    assert result.stderr.count("\n") == 1 and "different chunks" in result.stderr


def test_topology_show_and_list():
    shown = p2("topology", "show", "gcp-v100-4n")
    assert shown.returncode == 0 and "pcie" in shown.stdout and "32 devices" in shown.stdout
    as_json = p2("topology", "show", "dgx-h100", "--json", "-")
    assert json.loads(as_json.stdout)["device_count"] == 32
    listed = p2("topology", "list")
    assert "gcp-a100-2n" in listed.stdout and "dgx-h100" in listed.stdout
    round_trip = p2("topology", "show", "gcp-a100-4n", "--yaml")
    assert yaml.safe_load(round_trip.stdout)["name"] == "gcp-a100-4n"


BAD_INPUTS = [
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,15", "--reduce", "0"], "multiply to 60"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "5"], "out of range"),
    (["synth", "--topology", "no-such-preset", "--axes", "4,16", "--reduce", "0"], "unknown topology"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "four", "--reduce", "0"], "--axes"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,16"], "Missing option '--reduce'"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--max-size", "30"], "bound of 8"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--bytes", "lots"], "--bytes"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--matrix", "[[1 4] [4 4]]"],
     "--matrix is only used with --explain"),
    (["synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0", "--explain", "x",
      "--matrix", "[[1 2] [4 4]]"], "is not 'SLICE FORM COLLECTIVE'"),
    (["topology", "show", "gcp-a100-9n"], "unknown topology"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(args, message, tmp_path):
    out = tmp_path / "never.json"
    result = p2(*args, "--json", str(out)) if args[0] == "synth" else p2(*args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("p2 ") and ": error: " in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists(), "nothing is written on bad input"


def test_malformed_yaml_and_oversized_search(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nlevels: [ {name: node, cardinality: 2}\n")
    result = p2("synth", "--topology", str(bad), "--axes", "2", "--reduce", "0")
    assert result.returncode == 2 and "malformed YAML at line" in result.stderr
    big = p2("synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0",
             env={"P2_MAX_PLACEMENTS": "2"})
    assert big.returncode == 2 and "raise P2_MAX_PLACEMENTS" in big.stderr
    env_bad = p2("synth", "--topology", "gcp-a100-4n", "--axes", "4,16", "--reduce", "0",
                 env={"P2_MAX_PLACEMENTS": "many"})
    assert env_bad.returncode == 2 and "P2_MAX_PLACEMENTS" in env_bad.stderr


def test_existing_json_file_survives_a_failed_run(tmp_path):
    out = tmp_path / "result.json"
    out.write_text('{"keep": true}')
    result = p2("synth", "--topology", "gcp-a100-4n", "--axes", "3,16", "--reduce", "0", "--json", str(out))
    assert result.returncode == 2
    assert json.loads(out.read_text()) == {"keep": True}
