"""The emulated cluster end to end: real namespaces, veths and tbf, no mocks.

Everything goes through the real ``p2`` entry point. Tests that build
namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN and are skipped, with that
reason, without them. Every cluster has a name unique to this test process and
is removed by a fixture finalizer; state folders live under a temporary
``P2_CLUSTER_DIR``. Timing bounds are lower bounds that follow from the
configured rate (a shaped link cannot be faster), with the tbf burst allowed
for, never upper bounds on this machine's speed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.emulated import can_manage_namespaces, names, tbf_shape
from deploy.emulated.netns import GSO_PACKET, list_namespaces, namespace_pids, route_device
from optimizer_service.catalog import load_topology

ROOT = Path(__file__).resolve().parents[2]
TRANSFER = Path(__file__).with_name("transfer_ranks.py")
PREFIX = f"t{os.getpid() % 100000}"
NIC = "40Mbit/s"
NIC_RATE = 40e6 / 8

needs_namespaces = pytest.mark.skipif(
    not can_manage_namespaces() or shutil.which("ip") is None or shutil.which("nsenter") is None,
    reason="needs CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root) plus iproute2 and nsenter to build network namespaces")


@pytest.fixture(scope="module")
def state_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("clusters")


def p2(*args: str, state_root: Path, timeout: float = 60, wrap: list[str] | None = None,
       extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, P2_CLUSTER_DIR=str(state_root))
    env.pop("P2_MASTER_PORT", None)
    env.update(extra_env or {})
    argv = [sys.executable, "-m", "optimizer_service.cli", *args]
    return subprocess.run([*(wrap or []), *argv], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout)


def ours(name: str) -> list[str]:
    """Namespaces of cluster ``name`` (or of every cluster whose name starts with it)."""
    return [ns for ns in list_namespaces() if ns.startswith(f"p2-{name}-")]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def rank_lines(stdout: str) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        match = re.match(r"^\[r(\d+)\] (.*)$", line)
        assert match, f"unprefixed output line {line!r}"
        lines.setdefault(int(match.group(1)), []).append(match.group(2))
    return lines


class Cluster:
    """A cluster made for one test (or module) and always removed."""

    def __init__(self, name: str, state_root: Path) -> None:
        self.name = name
        self.state_root = state_root

    def p2(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return p2(*args, state_root=self.state_root, **kwargs)

    def run(self, *command: str, **kwargs) -> subprocess.CompletedProcess:
        return self.p2("cluster", "run", "--name", self.name, "--", *command, **kwargs)

    def down(self) -> subprocess.CompletedProcess:
        return self.p2("cluster", "down", "--name", self.name)


@pytest.fixture
def make_cluster(state_root):
    made: list[Cluster] = []

    def make(tag: str, *options: str) -> Cluster:
        cluster = Cluster(f"{PREFIX}-{tag}", state_root)
        made.append(cluster)
        result = cluster.p2("cluster", "up", "--name", cluster.name, *options)
        assert result.returncode == 0, result.stderr
        return cluster

    yield make
    for cluster in made:
        cluster.down()


@pytest.fixture(scope="module")
def shaped(state_root):
    """2 nodes x 2 ranks, NIC 40 Mbit/s, shared by the module's read-only tests."""
    if not can_manage_namespaces():
        pytest.skip("needs CAP_NET_ADMIN and CAP_SYS_ADMIN")
    cluster = Cluster(f"{PREFIX}-m", state_root)
    try:
        result = cluster.p2("cluster", "up", "--name", cluster.name, "--nodes", "2", "--per-node", "2",
                            "--nic", NIC, "--json", str(state_root / "up.json"))
        assert result.returncode == 0, result.stderr
        yield cluster
    finally:
        cluster.down()


# -------------------------------------------------------------- up / status
@needs_namespaces
def test_up_builds_namespaces_status_and_a_loadable_topology(shaped, state_root):
    up = json.loads((state_root / "up.json").read_text())
    assert up["name"] == shaped.name and up["nodes"] == 2 and up["per_node"] == 2 and up["shaped"]
    assert sorted(ours(shaped.name)) == sorted([up["namespaces"]["bridge"], *up["namespaces"]["nodes"]])
    slot = up["slot"]
    assert [c["address"] for n in up["node_details"] for c in n["channels"]] == [f"10.{slot}.0.1/24",
                                                                               f"10.{slot}.0.2/24"]
    # Created directly in their namespaces: nothing of the cluster in the root namespace.
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not re.search(r"\b(nic0|n0c0|n1c0)\b", root_links)
    # lo is up inside every node (same-node traffic needs it).
    for namespace in up["namespaces"]["nodes"]:
        lo = subprocess.run(["ip", "-n", namespace, "-o", "link", "show", "lo"], capture_output=True, text=True)
        assert "UP" in lo.stdout.split(">")[0]

    status = shaped.p2("cluster", "status", "--name", shaped.name)
    assert status.returncode == 0, status.stderr
    assert re.search(rf"^{shaped.name}\s+up\s+lossless\s+2\s+4\s", status.stdout, re.M), status.stdout
    data = json.loads(shaped.p2("cluster", "status", "--json", "-").stdout)
    mine = [c for c in data["clusters"] if c["name"] == shaped.name]
    assert mine and mine[0]["condition"] == "up" and not mine[0]["problems"]

    topology = load_topology(up["topology"])
    assert topology.name == shaped.name
    assert topology.hierarchy == (2, 2) and topology.level_names == ("node", "device")
    links = {link.name: link for link in topology.links}
    assert links["nic"].bandwidth == NIC_RATE and links["nic"].levels == ("node",) and links["nic"].shared_by == 2
    assert links["loopback"].levels == ("device",) and links["loopback"].bandwidth > 10 * NIC_RATE
    assert shaped.p2("topology", "show", up["topology"]).returncode == 0
    synth = shaped.p2("synth", "--topology", up["topology"], "--axes", "4", "--reduce", "0")
    assert synth.returncode == 0, synth.stderr


@needs_namespaces
def test_second_nic_is_its_own_channel(make_cluster, state_root):
    cluster = make_cluster("nic2", "--nodes", "2", "--per-node", "1", "--nic", "100Mbit/s", "--nic2", "50Mbit/s",
                           "--loopback", "1GB/s")
    info = json.loads((state_root / cluster.name / "cluster.json").read_text())
    channels = info["node_details"][1]["channels"]
    assert [c["ifname"] for c in channels] == ["nic0", "nic1"]
    assert channels[1]["address"].startswith(f"10.{info['slot']}.1.")
    topology = load_topology(info["topology"])
    nic2 = {link.name: link for link in topology.links}["nic2"]
    assert nic2.channel == 1 and nic2.bandwidth == 50e6 / 8 and nic2.shared_by == 1
    qdiscs = subprocess.run(["tc", "-n", f"p2-{cluster.name}-br", "qdisc", "show"], capture_output=True,
                            text=True).stdout
    assert re.search(r"tbf .* dev n1c1 .*rate 50Mbit", qdiscs) and re.search(r"dev n1c0 .*rate 100Mbit", qdiscs)
    result = cluster.run("sh", "-c", 'echo "$P2_CHANNEL_IFNAMES $P2_CHANNEL_ADDRS"')
    assert result.returncode == 0, result.stderr
    assert rank_lines(result.stdout)[1] == [f"nic0,nic1 10.{info['slot']}.0.2,10.{info['slot']}.1.2"]


# --------------------------------------------------------------- the wires
@needs_namespaces
def test_cross_node_traffic_goes_through_the_shaped_nic(shaped):
    up = json.loads((shaped.state_root / "up.json").read_text())
    node0, node1 = up["namespaces"]["nodes"]
    other = up["node_details"][1]["channels"][0]["address"].split("/")[0]
    own = up["node_details"][0]["channels"][0]["address"].split("/")[0]
    assert route_device(node0, other) == "nic0"
    assert route_device(node0, own) == "lo"  # same-node traffic never touches the veth

    size = 4_000_000
    cross = shaped.run(sys.executable, str(TRANSFER), "2", str(size))  # rank 2 (node 1) -> rank 0 (node 0)
    assert cross.returncode == 0, cross.stdout + cross.stderr
    local = shaped.run(sys.executable, str(TRANSFER), "1", str(size))  # rank 1 (node 0) -> rank 0
    assert local.returncode == 0, local.stdout + local.stderr

    def seconds(result) -> float:
        match = re.search(r"^\[r0\] TRANSFER bytes=(\d+) seconds=([\d.]+)$", result.stdout, re.M)
        assert match and int(match.group(1)) == size, result.stdout
        return float(match.group(2))

    burst = tbf_shape(NIC_RATE).burst
    cross_s, local_s = seconds(cross), seconds(local)
    assert cross_s >= (size - burst) / NIC_RATE * 0.97, f"4 MB at 40 Mbit/s took only {cross_s:.3f} s"
    assert local_s < cross_s / 5, f"same node {local_s:.3f} s vs across nodes {cross_s:.3f} s"


@needs_namespaces
def test_every_nic_end_sends_small_gso_packets_under_a_small_bucket(shaped, state_root):
    """A NIC after idle sends its bucket at the veth's speed: both ends of every NIC veth send GSO
    packets of at most 16 KiB, so the bucket is 20 KiB, not the 80 KiB that 64 KiB packets need."""
    up = json.loads((state_root / "up.json").read_text())
    ends = [(node_ns, names.node_ifname(0)) for node_ns in up["namespaces"]["nodes"]]
    ends += [(up["namespaces"]["bridge"], names.bridge_ifname(node, 0)) for node in range(up["nodes"])]
    for namespace, ifname in ends:
        shown = subprocess.run(["ip", "-n", namespace, "-d", "-j", "link", "show", ifname], capture_output=True,
                               text=True, check=True).stdout
        assert json.loads(shown)[0]["gso_max_size"] == GSO_PACKET == 16 * 1024, (namespace, ifname)
    assert tbf_shape(NIC_RATE).burst == 20 * 1024


# --------------------------------------------------------------------- run
ENV_SCRIPT = ("import json, os; keys = ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', "
              "'MASTER_PORT', 'GLOO_SOCKET_IFNAME', 'OMP_NUM_THREADS', 'P2_CLUSTER', 'P2_NODE', "
              "'P2_CHANNEL_IFNAMES', 'P2_CHANNEL_ADDRS', 'P2_TOPOLOGY']; "
              "print(json.dumps({k: os.environ.get(k) for k in keys})); print('second line')")


@needs_namespaces
def test_run_gives_each_rank_its_environment_and_prefixes_its_lines(shaped):
    up = json.loads((shaped.state_root / "up.json").read_text())
    result = shaped.run(sys.executable, "-c", ENV_SCRIPT)
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert sorted(lines) == [0, 1, 2, 3]
    ports = set()
    for rank, (first, second) in lines.items():
        env = json.loads(first)
        node = rank // 2
        address = up["node_details"][node]["channels"][0]["address"].split("/")[0]
        assert env["RANK"] == str(rank) and env["WORLD_SIZE"] == "4"
        assert env["LOCAL_RANK"] == str(rank % 2) and env["LOCAL_WORLD_SIZE"] == "2"
        assert env["P2_NODE"] == str(node) and env["P2_CLUSTER"] == shaped.name
        assert env["MASTER_ADDR"] == up["master_addr"] and env["GLOO_SOCKET_IFNAME"] == "nic0"
        assert env["P2_CHANNEL_IFNAMES"] == "nic0" and env["P2_CHANNEL_ADDRS"] == address
        assert env["OMP_NUM_THREADS"] == "1"
        assert env["P2_TOPOLOGY"] == str(shaped.state_root / shaped.name / "topology.yaml")
        assert second == "second line"
        ports.add(env["MASTER_PORT"])
    assert len(ports) == 1 and ports.pop().isdigit()
    # Each rank runs inside its node's namespace.
    where = shaped.run("ip", "-o", "-4", "addr", "show", "dev", "nic0")
    for rank, (line,) in rank_lines(where.stdout).items():
        assert up["node_details"][rank // 2]["channels"][0]["address"] in line


@needs_namespaces
def test_first_failure_sets_the_exit_code_and_stops_the_others(shaped):
    script = ("import os, sys, time; rank = int(os.environ['RANK']); print('pid', os.getpid(), flush=True); "
              "time.sleep(0.3); sys.exit(3) if rank == 3 else time.sleep(60)")
    start = time.monotonic()
    result = shaped.run(sys.executable, "-c", script, timeout=30)
    elapsed = time.monotonic() - start
    assert result.returncode == 3, result.stdout + result.stderr
    assert elapsed < 10, f"the sleeping ranks were not stopped promptly ({elapsed:.1f} s)"
    assert "rank 3 exited with code 3" in result.stderr
    pids = [int(line.split()[1]) for lines in rank_lines(result.stdout).values() for line in lines]
    assert len(pids) == 4 and not any(alive(pid) for pid in pids)
    for namespace in ours(shaped.name):
        assert namespace_pids(namespace) == []


@needs_namespaces
def test_timeout_stops_every_rank(shaped):
    result = shaped.p2("cluster", "run", "--name", shaped.name, "--timeout", "0.5", "--", "sleep", "30", timeout=30)
    assert result.returncode == 124 and "timeout" in result.stderr


# ------------------------------------------------------------ down / crash
@needs_namespaces
def test_down_leaves_nothing_behind(make_cluster, state_root):
    cluster = make_cluster("down", "--nodes", "2", "--per-node", "1", "--nic", "100Mbit/s", "--loopback", "1GB/s")
    # A process left inside a node (not started by run): down must kill it.
    stray = subprocess.Popen(["ip", "netns", "exec", f"p2-{cluster.name}-n1", "sleep", "60"])
    try:
        deadline = time.monotonic() + 5
        while not namespace_pids(f"p2-{cluster.name}-n1") and time.monotonic() < deadline:
            time.sleep(0.05)
        result = cluster.down()
        assert result.returncode == 0, result.stderr
        assert f"deleted namespace p2-{cluster.name}-n1 (killed 1 process" in result.stdout
        assert stray.wait(timeout=5) != 0
    finally:
        stray.kill()
    assert ours(cluster.name) == []
    assert not (state_root / cluster.name).exists()
    again = cluster.down()
    assert again.returncode == 0 and "nothing to remove" in again.stdout


@needs_namespaces
def test_crash_of_the_launcher_is_cleaned_up_by_down(make_cluster, state_root):
    cluster = make_cluster("crash", "--nodes", "2", "--per-node", "2", "--nic", "100Mbit/s", "--loopback", "1GB/s")
    # Each rank also leaves a child of its own behind, which only down can find.
    script = 'sleep 60 & echo "pids $$ $!"; exec python3 -c "import time; time.sleep(60)"'
    env = dict(os.environ, P2_CLUSTER_DIR=str(state_root))
    launcher = subprocess.Popen([sys.executable, "-m", "optimizer_service.cli", "cluster", "run", "--name",
                                 cluster.name, "--", "sh", "-c", script], stdout=subprocess.PIPE, text=True,
                                cwd=ROOT, env=env, start_new_session=True)
    pids = []
    try:
        while len(pids) < 8:
            line = launcher.stdout.readline()
            assert line, "the ranks did not start"
            pids += [int(word) for word in line.split()[2:]]
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
    finally:
        launcher.kill()
        launcher.stdout.close()
    # The ranks themselves die with the launcher (their parent-death signal), before down.
    ranks = pids[0::2]
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in ranks), [pid for pid in ranks if alive(pid)]
    result = cluster.down()
    assert result.returncode == 0, result.stderr
    assert ours(cluster.name) == [] and not (state_root / cluster.name).exists()
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids), [pid for pid in pids if alive(pid)]


@needs_namespaces
def test_up_refuses_an_existing_name(shaped):
    result = shaped.p2("cluster", "up", "--name", shaped.name, "--nodes", "1", "--per-node", "1", "--nic", NIC)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and f"p2 cluster down --name {shaped.name}" in result.stderr


# ------------------------------------------------------- without privileges
def _without(*capabilities: str) -> list[str] | None:
    """A prefix that runs a command without ``capabilities``, or None."""
    if not can_manage_namespaces():
        return []  # already without them
    if shutil.which("capsh"):
        return ["capsh", f"--drop={','.join('cap_' + c for c in capabilities)}", "--", "-c", '"$0" "$@"']
    if shutil.which("setpriv"):
        drop = ",".join(f"-{c}" for c in capabilities)
        return ["setpriv", "--bounding-set", drop, "--inh-caps", drop, "--"]
    return None


def test_up_without_cap_net_admin_fails_with_one_line(state_root):
    wrap = _without("net_admin")
    if wrap is None:
        pytest.skip("neither capsh nor setpriv is installed to drop CAP_NET_ADMIN")
    name = f"{PREFIX}-nocap"
    result = p2("cluster", "up", "--name", name, "--nodes", "2", "--per-node", "1", "--nic", NIC,
                state_root=state_root, wrap=wrap)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "CAP_NET_ADMIN" in result.stderr and "--no-shaping" in result.stderr
    assert result.stderr.startswith("p2 cluster up: error: ")
    assert ours(name) == [] and not (state_root / name).exists()


def test_no_shaping_cluster_runs_four_ranks_on_loopback_without_privileges(state_root):
    wrap = _without("net_admin", "sys_admin")
    if wrap is None:
        pytest.skip("neither capsh nor setpriv is installed to drop capabilities")
    name = f"{PREFIX}-lo"
    try:
        up = p2("cluster", "up", "--name", name, "--no-shaping", "--nodes", "2", "--per-node", "2", "--nic", NIC,
                state_root=state_root, wrap=wrap)
        assert up.returncode == 0, up.stderr
        assert load_topology(str(state_root / name / "topology.yaml")).hierarchy == (2, 2)
        result = p2("cluster", "run", "--name", name, "--", sys.executable, "-c", ENV_SCRIPT,
                    state_root=state_root, wrap=wrap)
        assert result.returncode == 0, result.stderr
        lines = rank_lines(result.stdout)
        assert sorted(lines) == [0, 1, 2, 3]
        for rank, (first, _) in lines.items():
            env = json.loads(first)
            assert env["RANK"] == str(rank) and env["P2_NODE"] == str(rank // 2)
            assert env["MASTER_ADDR"] == "127.0.0.1" and env["GLOO_SOCKET_IFNAME"] == "lo"
        status = p2("cluster", "status", "--name", name, state_root=state_root, wrap=wrap)
        assert re.search(rf"^{name}\s+loopback\s+lossless\s+2\s+4\s", status.stdout, re.M), status.stdout
    finally:
        down = p2("cluster", "down", "--name", name, state_root=state_root, wrap=wrap)
    assert down.returncode == 0, down.stderr
    assert not (state_root / name).exists()


def test_master_port_setting_reaches_every_rank_and_a_bad_one_is_one_line(state_root):
    """P2_MASTER_PORT is read once by the p2 command (its settings) and passed
    to the launcher: every rank gets it as MASTER_PORT."""
    name = f"{PREFIX}-port"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    try:
        up = p2("cluster", "up", "--name", name, "--no-shaping", "--nodes", "1", "--per-node", "2", "--nic", NIC,
                "--loopback", "1Gbit/s", state_root=state_root)
        assert up.returncode == 0, up.stderr
        result = p2("cluster", "run", "--name", name, "--", sys.executable, "-c", ENV_SCRIPT,
                    state_root=state_root, extra_env={"P2_MASTER_PORT": str(port)})
        assert result.returncode == 0, result.stderr
        ports = {json.loads(first)["MASTER_PORT"] for first, _ in rank_lines(result.stdout).values()}
        assert ports == {str(port)}
        for bad in ("http", "70000", "0"):
            refused = p2("cluster", "run", "--name", name, "--", "true", state_root=state_root,
                         extra_env={"P2_MASTER_PORT": bad})
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert len(refused.stderr.splitlines()) == 1 and "P2_MASTER_PORT" in refused.stderr
        missing = p2("cluster", "run", "--name", name, "--", "no-such-program-p2", state_root=state_root)
        assert missing.returncode == 2, missing.stdout + missing.stderr
        assert len(missing.stderr.splitlines()) == 1 and "no-such-program-p2" in missing.stderr
    finally:
        p2("cluster", "down", "--name", name, state_root=state_root)
    assert not (state_root / name).exists()


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("args", [
    ["up", "--nodes", "0", "--per-node", "1", "--nic", NIC],
    ["up", "--nodes", "2", "--per-node", "0", "--nic", NIC],
    ["up", "--nodes", "2", "--per-node", "1", "--nic", "fast"],
    ["up", "--nodes", "2", "--per-node", "1", "--nic", "10furlongs/s"],
    ["up", "--nodes", "2", "--per-node", "1", "--nic", NIC, "--name", "Bad_Name"],
    ["up", "--nodes", "2", "--per-node", "1", "--nic", NIC, "--name", "much-too-long-cluster-name"],
    ["up", "--nodes", "2", "--per-node", "1"],
    ["run", "--name", f"{PREFIX}-none"],
    ["run", "--name", f"{PREFIX}-none", "--", "true"],
    ["down", "--name", "Bad!"],
])
def test_bad_input_exits_2_with_one_line_and_creates_nothing(args, state_root):
    namespaces, folders = ours(PREFIX), sorted(state_root.iterdir())
    result = p2("cluster", *args, state_root=state_root)
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and "error:" in result.stderr
    assert ours(PREFIX) == namespaces and sorted(state_root.iterdir()) == folders


@pytest.mark.parametrize("verb", [[], ["up"], ["run"], ["down"], ["status"]])
def test_help_for_every_verb(verb, state_root):
    result = p2("cluster", *verb, "--help", state_root=state_root)
    assert result.returncode == 0 and "Usage: p2 cluster" in result.stdout
