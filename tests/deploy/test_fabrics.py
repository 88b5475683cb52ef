"""Fabrics of the emulated cluster (issue 32, item 1): lossless queues drop nothing.

Real namespaces, veths, ``tbf`` and TCP (``transfer_ranks.py``: plain sockets,
every sender at once into rank 0); skipped, with the reason, without
CAP_NET_ADMIN. Clusters are named ``p2fab*`` and removed by the tests.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.emulated import (
    ClusterInfo,
    Fabric,
    can_manage_namespaces,
    create_cluster,
    destroy_cluster,
    load_cluster,
    netns,
    nic_drops,
    run_ranks,
    set_channel_rate,
)
from deploy.emulated.state import read_state, write_state
from deploy.errors import DeployError
from optimizer_service.catalog import load_topology
from optimizer_service.cli.app import main

ROOT = Path(__file__).resolve().parents[2]
TRANSFER = Path(__file__).with_name("transfer_ranks.py")
TAG = os.getpid() % 10000
RATE = 40e6 / 8         # 40 Mbit/s: a second of incast is 5 MB
INCAST_SECONDS = 1.5

needs_namespaces = pytest.mark.skipif(
    not can_manage_namespaces() or shutil.which("ip") is None or shutil.which("nsenter") is None,
    reason="needs CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root) plus iproute2 and nsenter to build network namespaces")


def p2(*args: str, root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, P2_CLUSTER_DIR=str(root))
    return subprocess.run([sys.executable, "-m", "optimizer_service.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=60)


def node_sysctl(namespace: str, key: str) -> str:
    return subprocess.run(["ip", "netns", "exec", namespace, "sysctl", "-n", key], capture_output=True, text=True,
                          check=True).stdout.split()


def queue_seconds(info: ClusterInfo) -> list[float]:
    """How long every NIC's full ``tbf`` queue (both ends of every veth) takes to drain, as the
    kernel has it (``tc`` shows ``lat`` = (limit - burst) / rate, in microseconds)."""
    seconds = []
    for namespace in info.namespaces:
        found = json.loads(subprocess.run(["tc", "-n", namespace, "-j", "qdisc", "show"], capture_output=True,
                                          text=True, check=True).stdout)
        seconds += [entry["options"]["lat"] / 1e6 for entry in found if entry.get("kind") == "tbf"]
    return seconds


def drain_seconds(shape) -> float:
    return (shape.limit - shape.burst) / shape.rate


def incast(info: ClusterInfo, seconds: float, rate: float) -> int:
    """Every rank of the other nodes sends to rank 0 at once, ``seconds`` of its NIC's ``rate`` in
    all; returns the packets the NICs' queues dropped meanwhile."""
    senders = list(range(info.per_node, info.world_size))
    before = sum(nic_drops(info).values())
    out = io.StringIO()
    code = run_ranks(info, [sys.executable, str(TRANSFER), ",".join(map(str, senders)),
                            str(round(rate * seconds / len(senders)))], out=out, err=out, timeout=60)
    assert code == 0, out.getvalue()[-2000:]
    assert re.search(r"^\[r0\] TRANSFER bytes=\d+", out.getvalue(), re.M), out.getvalue()[-2000:]
    return sum(nic_drops(info).values()) - before


def test_a_state_folder_from_before_fabrics_reads_as_lossy(tmp_path):
    info = create_cluster("p2fab-old", 2, 2, RATE, loopback_rate=1e9, shaped=False, root=tmp_path)
    assert info.fabric == "lossless" and load_cluster("p2fab-old", tmp_path).fabric == "lossless"
    data = json.loads(info.state_file.read_text())
    for key in ("fabric", "tcp_window", "queue_flows"):
        del data[key]
    info.state_file.write_text(json.dumps(data))
    old = read_state(info.state_dir)
    assert old.fabric == "lossy" and old.fabric_rule == Fabric("lossy")
    write_state(old, info.topology_path.read_text())     # and it is written back as what it is
    assert json.loads(info.state_file.read_text())["fabric"] == "lossy"
    destroy_cluster("p2fab-old", root=tmp_path)


@pytest.mark.parametrize("fabric", ["bogus", "LOSSLESS"])
def test_up_with_an_unknown_fabric_exits_2_with_one_line(fabric, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("P2_CLUSTER_DIR", str(tmp_path))
    code = main(["cluster", "up", "--name", "p2fab-bad", "--nodes", "2", "--per-node", "1", "--nic", "40Mbit/s",
                 "--fabric", fabric])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "lossless" in err and "lossy" in err, err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DeployError, match="fabric 'wet' must be one of lossless, lossy"):
        create_cluster("p2fab-bad", 2, 1, RATE, shaped=False, root=tmp_path, fabric="wet")
    assert list(tmp_path.iterdir()) == []


@needs_namespaces
@pytest.mark.netns
def test_the_fabric_round_trips_through_up_the_state_folder_status_and_the_topology(tmp_path):
    name = f"p2fab{TAG}r"
    up = p2("cluster", "up", "--name", name, "--nodes", "2", "--per-node", "2", "--nic", "40Mbit/s",
            "--nic2", "10Mbit/s", "--loopback", "1GB/s", "--fabric", "lossless", "--json", "-", root=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        built = json.loads(up.stdout)
        rule = Fabric.for_cluster("lossless", 2, 2, (RATE, 10e6 / 8))
        assert (built["fabric"], built["tcp_window"], built["queue_flows"]) == ("lossless", rule.tcp_window,
                                                                                 rule.flows)
        info = load_cluster(name, tmp_path)
        assert info.fabric_rule == rule and info.tbf == (rule.shape(RATE), rule.shape(10e6 / 8))
        assert rule.shape(RATE).limit == rule.queue_bytes > Fabric("lossy").shape(RATE).limit
        assert sorted(queue_seconds(info)) == pytest.approx(sorted([drain_seconds(info.tbf[0])] * 4
                                                                   + [drain_seconds(info.tbf[1])] * 4), rel=1e-3)
        for namespace in info.node_namespaces:   # the windows that bound every flow
            assert node_sysctl(namespace, "net.ipv4.tcp_rmem")[-1] == str(rule.tcp_window)
            assert node_sysctl(namespace, "net.ipv4.tcp_wmem")[-1] == str(rule.tcp_window)
        assert "lossless fabric" in load_topology(str(info.topology_path)).description
        status = p2("cluster", "status", "--name", name, root=tmp_path)
        assert re.search(rf"^{name}\s+up\s+lossless\s+2\s+4\s", status.stdout, re.M), status.stdout
    finally:
        down = p2("cluster", "down", "--name", name, root=tmp_path)
    assert down.returncode == 0, down.stderr


@needs_namespaces
@pytest.mark.netns
@pytest.mark.multiproc
def test_lossless_drops_nothing_under_an_incast_that_a_lossy_fabric_drops_also_after_a_slowdown(tmp_path):
    """Four ranks on two nodes send to rank 0 at once: the lossy queues overflow (the senders' uploads and
    node 0's download); the lossless ones do not, also once the NIC runs 4x slower."""
    clusters = {}
    try:
        for fabric in ("lossy", "lossless"):
            clusters[fabric] = create_cluster(f"p2fab{TAG}{fabric[-1]}", 3, 2, RATE, loopback_rate=1e9,
                                              root=tmp_path, fabric=fabric)
        assert incast(clusters["lossy"], INCAST_SECONDS, RATE) > 0
        # the drops as read over rtnetlink (no process) are tc's, device by device
        for namespace in clusters["lossy"].namespaces:
            assert netns.qdisc_drops(namespace) == netns.qdisc_drops_by_tc(namespace)
        assert sum(netns.qdisc_drops(clusters["lossy"].bridge_namespace).values()) > 0
        lossless = clusters["lossless"]
        assert incast(lossless, INCAST_SECONDS, RATE) == 0
        slowed = set_channel_rate(lossless, 0, RATE / 4)
        assert slowed == lossless.fabric_rule.shape(RATE / 4) and slowed.limit == lossless.tbf[0].limit
        assert queue_seconds(lossless) == pytest.approx([drain_seconds(slowed)] * 6, rel=1e-3)
        assert incast(lossless, INCAST_SECONDS, RATE / 4) == 0
    finally:
        for info in clusters.values():
            destroy_cluster(info.name, root=tmp_path)
