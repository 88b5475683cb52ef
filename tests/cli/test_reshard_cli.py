"""``p2 reshard`` end to end, through the real entry point."""

import json

import pytest

from optimizer_service.plan.resharding import ReshardProgram
from tests.support.cli import p2

ALGORITHMS = ["naive", "lb", "dfs", "greedy", "ensemble"]


def test_help_names_the_default_topology():
    result = p2("reshard", "--help")
    assert result.returncode == 0
    assert "emulated cluster sized to fit both meshes" in " ".join(result.stdout.split())


def test_plans_print_and_write_json_program_and_gantt(tmp_path):
    out, program, png = tmp_path / "r.json", tmp_path / "program.txt", tmp_path / "g.png"
    result = p2("reshard", "--shape", "64,64,32", "--src", "RS^0R@2x4", "--dst", "S^0RR@2x4", "--json", str(out),
                "--program", str(program), "--gantt", str(png))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("reshard 64x64x32 (4-byte elements, 512 KiB), strategy broadcast, topology "
                               "emulated-4x4 (default")
    assert "unit tasks (4):" in lines
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in ALGORITHMS}
    assert list(rows) == ALGORITHMS
    assert rows["naive"][3] == "1.631x" and rows["ensemble"][3] == "1.087x"
    data = json.loads(out.read_text())
    assert data["shape"] == [64, 64, 32] and data["strategy"] == "broadcast" and data["topology"] == "emulated-4x4"
    assert data["src"] == "RS^0R@[[0,1,2,3],[4,5,6,7]]" and data["dst"] == "S^0RR@[[8,9,10,11],[12,13,14,15]]"
    assert [t["box"] for t in data["unit_tasks"]] == ["0:32,0:32,0:32", "0:32,32:64,0:32", "32:64,0:32,0:32",
                                                      "32:64,32:64,0:32"]
    assert data["unit_tasks"][1]["sources"] == [[4, 5, 6, 7]] and data["unit_tasks"][1]["destination_hosts"] == [2]
    assert data["lower_bound_seconds"] == pytest.approx(2 * 32 * 32 * 32 * 4 / 25e6)
    assert [a["name"] for a in data["algorithms"]] == ALGORITHMS
    for algorithm in data["algorithms"]:
        assert algorithm["predicted_seconds"] >= data["lower_bound_seconds"]
        assert algorithm["ratio_to_lower_bound"] == pytest.approx(
            algorithm["predicted_seconds"] / data["lower_bound_seconds"])
        assert sorted(algorithm["order"]) == [0, 1, 2, 3] and len(algorithm["senders"]) == 4
        assert "measured_seconds" not in algorithm
    written = ReshardProgram.parse(program.read_text())
    assert written.algorithm == "ensemble" and str(written) == data["algorithms"][-1]["program"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_algorithm_on_a_preset_with_json_on_stdout(tmp_path):
    program = tmp_path / "p.txt"
    result = p2("reshard", "--shape", "16,16", "--src", "S^0R@[[0,1],[2,3]]", "--dst", "RS^0@2x2", "--topology",
                "hgx2-4n", "--algo", "lb", "--strategy", "send-recv", "--dtype-bytes", "2", "--json", "-",
                "--program", str(program))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["topology"] == "hgx2-4n" and data["element_bytes"] == 2 and data["strategy"] == "send-recv"
    assert data["dst"] == "RS^0@[[8,9],[16,17]]"            # 8 GPUs per node; host 0 holds the source
    assert [a["name"] for a in data["algorithms"]] == ["lb"]
    assert ReshardProgram.parse(program.read_text()).algorithm == "lb"


def test_the_same_seed_gives_the_same_plans():
    args = ("reshard", "--shape", "64,64,32", "--src", "RS^01R@2x4", "--dst", "S^01RR@2x4", "--algo", "greedy",
            "--seed", "3", "--json", "-")
    first, second = p2(*args), p2(*args)
    assert first.returncode == 0 and json.loads(first.stdout)["algorithms"] == json.loads(second.stdout)["algorithms"]


@pytest.mark.parametrize("args, message", [
    (["--src", "S^2RR@2x4"], "sharding spec 'S^2RR'"),
    (["--src", "S^0S^0R@2x4"], "shards over mesh dimension 0 twice"),
    (["--src", "S^0RR@2x4x2"], "has 3 dimensions; a mesh is 1-D"),
    (["--src", "S^0RR"], "is not SPEC@MESH"),
    (["--shape", "64,64"], "has 3 dimensions but the tensor 64x64 has 2"),
    (["--dst", "S^0RR@2x8", "--topology", "hgx2-4n", "--src", "S^0RR@3x4"], "need 5 free hosts"),
    (["--dst", "RS^0R@2x32", "--topology", "hgx2-4n"], "puts 32 devices on a host"),
    (["--src", "S^0RR@[[0,1],[2,3]]", "--dst", "S^0RR@[[3,4],[5,6]]"], "ranks [3] are in both meshes"),
    (["--shape", "64,x,32"], "is not a list of whole numbers"),
    (["--algo", "fifo"], "--algo"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    base = {"--shape": "64,64,32", "--src": "S^0RR@2x4", "--dst": "RS^0R@2x4"}
    extra = []
    for flag, value in zip(args[::2], args[1::2]):
        if flag in base:
            base[flag] = value
        else:
            extra += [flag, value]
    result = p2("reshard", *[part for pair in base.items() for part in pair], *extra)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_measure_needs_a_cluster():
    result = p2("reshard", "--shape", "8,8", "--src", "S^0R@1x2", "--dst", "RS^0@1x2", "--measure")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "p2 reshard: error: --measure needs --cluster NAME (an emulated cluster made by 'p2 cluster up') "
        "(see 'p2 reshard --help')"]


@pytest.mark.multiproc
@pytest.mark.slow
def test_measure_runs_every_plan_on_a_cluster(tmp_path):
    """A loopback cluster (no privileges needed): every algorithm's program runs
    on the ranks through the enforcer, is checked bit for bit there, and its
    median time lands in the JSON next to the prediction."""
    env = {"P2_CLUSTER_DIR": str(tmp_path / "clusters")}
    up = p2("cluster", "up", "--name", "rsmeasure", "--nodes", "2", "--per-node", "2", "--nic", "1Gbit/s", "--no-shaping",
            "--loopback", "1GB/s", env=env)
    assert up.returncode == 0, up.stderr
    try:
        out = tmp_path / "m.json"
        result = p2("reshard", "--shape", "64,48", "--src", "RS^0@1x2", "--dst", "S^0R@1x2", "--cluster", "rsmeasure",
                    "--measure", "--repeat", "1", "--json", str(out), env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        assert "measured" in result.stdout and "vs predicted" in result.stdout
        data = json.loads(out.read_text())
        assert data["topology"] == "rsmeasure"
        assert [a["name"] for a in data["algorithms"]] == ALGORITHMS
        assert all(a["measured_seconds"] > 0 for a in data["algorithms"])
        small = p2("reshard", "--shape", "8,8", "--src", "S^0R@2x2", "--dst", "RS^0@1x2", "--cluster", "rsmeasure",
                   "--measure", env=env)
        assert small.returncode == 2 and len(small.stderr.strip().splitlines()) == 1
    finally:
        p2("cluster", "down", "--name", "rsmeasure", env=env)
