"""``p2 calibrate`` and ``p2 bench reduce`` end to end: real ranks, real gloo.

The loopback-cluster tests need no privileges (``p2 cluster up --no-shaping``);
the shaped ones build real namespaces and are skipped, with the reason, without
CAP_NET_ADMIN. Sizes are small so the whole file stays well under a minute of
measuring; the numbers themselves are the benchmark's business, not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.emulated import can_manage_namespaces
from optimizer_service.catalog import load_topology

ROOT = Path(__file__).resolve().parents[2]
NAME = f"b{os.getpid() % 100000}"

needs_namespaces = pytest.mark.skipif(not can_manage_namespaces(),
                                      reason="needs CAP_NET_ADMIN (run as root) to build network namespaces")


def p2(*args: str, state: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, P2_CLUSTER_DIR=str(state))
    return subprocess.run([sys.executable, "-m", "optimizer_service.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("clusters")


def make_cluster(name: str, state: Path, *extra: str):
    up = p2("cluster", "up", "--name", name, "--nodes", "2", "--per-node", "2", "--nic", "100Mbit/s",
            "--loopback", "1GB/s", *extra, state=state)
    assert up.returncode == 0, up.stderr
    yield name
    down = p2("cluster", "down", "--name", name, state=state)
    assert down.returncode == 0, down.stderr


@pytest.fixture(scope="module")
def loopback_cluster(state):
    yield from make_cluster(f"{NAME}l", state, "--no-shaping")


@pytest.fixture(scope="module")
def shaped_cluster(state):
    if not can_manage_namespaces():
        pytest.skip("needs CAP_NET_ADMIN (run as root) to build network namespaces")
    yield from make_cluster(f"{NAME}s", state)


def check_bench(name: str, state: Path, tmp_path: Path, *extra: str) -> dict:
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    result = p2("bench", "reduce", "--cluster", name, "--axes", "2,2", "--reduce", "1", "--bytes", "96KiB",
                "--top", "3", "--repeat", "1", "--warmup", "0", "--json", str(out), "--plot", str(plot), *extra,
                state=state)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"cluster", "axes", "reduce", "bytes", "placements", "accuracy"} <= set(data)
    assert data["cluster"] == name and data["axes"] == [2, 2] and data["reduce"] == [1]
    assert data["bytes"] == 96 * 1024
    assert len(data["placements"]) == 2  # [[2 1] [1 2]] and [[1 2] [2 1]] on 2 nodes x 2
    assert sorted(e["crosses"] for e in data["placements"]) == [False, True]
    for entry in data["placements"]:
        flat = entry["flat"]
        assert flat["predicted_seconds"] > 0 and flat["measured_seconds"] > 0
        assert 1 <= len(entry["programs"]) <= 3
        for program in entry["programs"]:
            assert program["measured_seconds"] > 0 and program["predicted_seconds"] > 0
            assert program["speedup"] == pytest.approx(flat["measured_seconds"] / program["measured_seconds"])
            assert "AllReduce" in program["text"] or "Gather" in program["text"] or "Broadcast" in program["text"]
    accuracy = data["accuracy"]
    assert {"mape", "spearman", "top1", "top5", "candidates"} <= set(accuracy)
    assert accuracy["candidates"] == sum(1 + len(e["programs"]) for e in data["placements"])
    assert 0 <= accuracy["top1"] <= accuracy["top5"] <= 1 and -1 <= accuracy["spearman"] <= 1
    assert "simulator accuracy" in result.stdout or "MAPE" in result.stdout
    return data


@pytest.mark.multiproc
def test_calibrate_then_bench_on_a_loopback_cluster(loopback_cluster, state, tmp_path):
    topology_file = state / loopback_cluster / "topology.yaml"
    before = load_topology(str(topology_file))
    text = topology_file.read_text()
    dry = p2("calibrate", "--cluster", loopback_cluster, "--probe-bytes", "4MiB", "--repeat", "1",
             "--warmup", "1", "--dry-run", "--json", "-", state=state)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert json.loads(dry.stdout)["written"] is False and topology_file.read_text() == text
    result = p2("calibrate", "--cluster", loopback_cluster, "--probe-bytes", "4MiB", "--repeat", "2",
                "--warmup", "1", "--json", str(tmp_path / "cal.json"), state=state)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((tmp_path / "cal.json").read_text())
    assert record["written"] is True
    assert {link["name"] for link in record["links"]} == {"loopback", "nic"}
    after = load_topology(str(topology_file))
    assert after.hierarchy == before.hierarchy
    assert [link.bandwidth for link in after.links] != [link.bandwidth for link in before.links]
    assert all(p["measured_seconds"] > 0 for p in record["probes"])
    assert "calibrated" in after.description
    data = check_bench(loopback_cluster, state, tmp_path)
    assert data["shaped"] is False and data["nic_drops"] is None        # no NICs, nothing to drop


@pytest.mark.netns
@pytest.mark.multiproc
def test_bench_in_a_shaped_cluster(shaped_cluster, state, tmp_path):
    data = check_bench(shaped_cluster, state, tmp_path)
    assert data["shaped"] is True and data["fabric"] == "lossless"     # p2 cluster up's default
    # Every candidate (a flat AllReduce and a program at least, per placement) ran once untimed and once timed.
    assert data["nic_drops"]["runs"] >= 2 * 2 * len(data["placements"])
    assert data["nic_drops"]["total"] == 0 == data["nic_drops"]["per_run"]   # lossless: nothing dropped


def test_bad_requests_exit_2_with_one_line(loopback_cluster, state):
    cases = [
        ("bench", "reduce", "--cluster", "nosuchcluster", "--axes", "4", "--reduce", "0"),
        ("bench", "reduce", "--cluster", loopback_cluster, "--axes", "3", "--reduce", "0"),
        ("bench", "reduce", "--cluster", loopback_cluster, "--axes", "4", "--reduce", "1"),
        ("bench", "reduce", "--cluster", loopback_cluster, "--axes", "4", "--reduce", "0", "--bytes", "2"),
        ("calibrate", "--cluster", "nosuchcluster"),
        ("calibrate", "--cluster", loopback_cluster, "--probe-bytes", "12"),
    ]
    for args in cases:
        result = p2(*args, state=state, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "error:" in lines[0], (args, result.stderr)


def test_single_rank_reductions_have_nothing_to_measure(loopback_cluster, state):
    result = p2("bench", "reduce", "--cluster", loopback_cluster, "--axes", "1,4", "--reduce", "0", state=state)
    assert result.returncode == 2 and "nothing to measure" in result.stderr


@pytest.mark.parametrize("verb", [("bench", "reduce"), ("calibrate",)])
def test_help(verb, state):
    result = p2(*verb, "--help", state=state)
    assert result.returncode == 0 and "--json" in result.stdout


@pytest.mark.netns
@pytest.mark.multiproc
@needs_namespaces
def test_calibrate_measures_the_second_nic_through_its_own_channel(state, tmp_path):
    # The second NIC is ten times slower: if channel-1 probes went through nic0,
    # its fitted bandwidth would come out near nic0's.
    name = f"{NAME}c"
    up = p2("cluster", "up", "--name", name, "--nodes", "2", "--per-node", "1", "--nic", "200Mbit/s",
            "--nic2", "20Mbit/s", "--loopback", "1GB/s", state=state)
    assert up.returncode == 0, up.stderr
    try:
        result = p2("calibrate", "--cluster", name, "--probe-bytes", "2MiB", "--repeat", "1", "--warmup", "1",
                    "--json", str(tmp_path / "cal.json"), state=state)
        assert result.returncode == 0, result.stderr[-3000:]
        links = {link["name"]: link for link in json.loads((tmp_path / "cal.json").read_text())["links"]}
        assert set(links) == {"nic", "nic2"}  # one rank per node: nothing crosses the loopback
        assert links["nic2"]["bandwidth_bytes_per_second"] < 0.5 * links["nic"]["bandwidth_bytes_per_second"]
        assert links["nic2"]["bandwidth_bytes_per_second"] <= 20e6 / 8 * 1.2  # a shaped link is not faster
    finally:
        assert p2("cluster", "down", "--name", name, state=state).returncode == 0
