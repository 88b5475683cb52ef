"""Bringing a cluster up, taking it down, and finding out what exists.

``create_cluster`` validates everything before it touches the system, then
builds (namespaces, wiring, the fabric's queues and TCP windows, loopback
probe, state folder) and rolls back all of it if any step fails or is
interrupted. ``destroy_cluster`` works from what it *finds* — the state
folder if there is one, plus every namespace whose name parses as this
cluster's (:func:`names.parse_namespace`), plus host processes still marked
with ``P2_CLUSTER=<name>`` — so it also cleans up after a crash and is
idempotent. ``cluster_statuses`` reports the same findings without acting.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from deploy.emulated import names, netns, probe
from deploy.emulated.fabric import DEFAULT_FABRIC, Fabric, check_fabric
from deploy.emulated.model import cluster_topology
from deploy.emulated.privileges import require_namespace_privileges
from deploy.emulated.processes import kill_cluster_processes
from deploy.emulated.state import (
    ClusterInfo,
    candidate_roots,
    find_state_dir,
    now_text,
    read_state,
    remove_state_dir,
    state_dirs,
    writable_root,
    write_state,
)
from deploy.errors import DeployError

MIN_RATE = 1e6 / 8  # 1 Mbit/s: below it a one-GSO-packet bucket is a long burst
MAX_WORLD = 1024
NO_PRIVILEGES_HINT = "use --no-shaping for an unshaped loopback cluster"


def check_request(name: str, nodes: int, per_node: int, nic_rate: float, nic2_rate: float | None,
                  loopback_rate: float | None, fabric: str = DEFAULT_FABRIC) -> None:
    """Reject a bad ``up`` request with one line, before anything is created."""
    names.check_name(name)
    check_fabric(fabric)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= names.MAX_NODES:
        raise DeployError(f"--nodes {nodes!r} must be a whole number from 1 to {names.MAX_NODES}")
    if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < 1:
        raise DeployError(f"--per-node {per_node!r} must be a whole number >= 1")
    if nodes * per_node > MAX_WORLD:
        raise DeployError(f"{nodes} x {per_node} = {nodes * per_node} ranks; at most {MAX_WORLD} are supported")
    for option, rate in (("--nic", nic_rate), ("--nic2", nic2_rate), ("--loopback", loopback_rate)):
        if rate is not None and rate < MIN_RATE:
            raise DeployError(f"{option} {rate * 8 / 1e6:g} Mbit/s is below the 1 Mbit/s minimum")


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Serialize ``up``s sharing a state root (slot choice, name check)."""
    with open(root / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cluster_namespaces(name: str) -> list[str]:
    """The namespaces that exist and belong to cluster ``name``."""
    return [ns for ns in netns.list_namespaces() if (parsed := names.parse_namespace(ns)) and parsed[0] == name]


def _used_slots(root: Path | None) -> set[int]:
    """Address blocks in use: recorded in state folders, or (for clusters
    whose state lives elsewhere, e.g. another ``P2_CLUSTER_DIR``) read from
    node 0's ``nic0``."""
    used = set()
    recorded = state_dirs(root)
    for folder in recorded.values():
        try:
            info = read_state(folder)
        except DeployError:
            continue
        if info.slot is not None:
            used.add(info.slot)
    for namespace in netns.list_namespaces():
        parsed = names.parse_namespace(namespace)
        if parsed and parsed[1] == "n0" and parsed[0] not in recorded:
            slot = netns.address_slot(namespace)
            if slot is not None:
                used.add(slot)
    return used


def create_cluster(name: str, nodes: int, per_node: int, nic_rate: float, nic2_rate: float | None = None,
                   loopback_rate: float | None = None, shaped: bool = True, root: Path | None = None,
                   fabric: str = DEFAULT_FABRIC) -> ClusterInfo:
    """Build the cluster and write its state folder; see the module docstring.

    ``loopback_rate`` None measures it inside node 0 (after the fabric's TCP
    windows are set: ranks of a node live with them too). ``shaped`` False makes
    a loopback-only record (state and topology, no namespaces, no privileges;
    the fabric is recorded, nothing applies it). ``root`` is where state folders
    live (:mod:`deploy.emulated.state`). ``fabric``: ``lossless`` or ``lossy``
    (:mod:`deploy.emulated.fabric`)."""
    check_request(name, nodes, per_node, nic_rate, nic2_rate, loopback_rate, fabric)
    if shaped:
        require_namespace_privileges("building the cluster's namespaces", NO_PRIVILEGES_HINT)
    home = writable_root(root)
    with _locked(home):
        existing = find_state_dir(name, root)
        leftovers = cluster_namespaces(name)
        if existing is not None or leftovers:
            what = str(existing) if existing is not None else f"namespaces {', '.join(leftovers)}"
            raise DeployError(f"cluster {name!r} already exists ({what}); "
                                    f"remove it first with p2 cluster down --name {name}")
        slot = None
        if shaped:
            free = [s for s in names.SLOTS if s not in _used_slots(root)]
            if not free:
                raise DeployError("no free address block: 254 clusters exist; remove some with p2 cluster down")
            slot = free[0]
        state_dir = home / name
        created: list[str] = []
        state_dir.mkdir()
        try:
            tbf: tuple[netns.TbfShape, ...] = ()
            rates = tuple(rate for rate in (nic_rate, nic2_rate) if rate is not None)
            rule = Fabric.for_cluster(fabric, nodes, per_node, rates) if shaped else Fabric(fabric)
            if shaped:
                tbf = tuple(rule.shape(rate) for rate in rates)
                netns.build(netns.Wiring(cluster=name, nodes=nodes, slot=slot, shapes=tbf,
                                         sysctls=tuple(rule.sysctls().items())), created)
            measured = loopback_rate is None
            if measured:
                loopback_rate = probe.measure_loopback(names.node_namespace(name, 0) if shaped else None)
            info = ClusterInfo(name=name, nodes=nodes, per_node=per_node, nic_rate=nic_rate, nic2_rate=nic2_rate,
                               loopback_rate=loopback_rate, loopback_measured=measured, shaped=shaped,
                               state_dir=state_dir, created=now_text(), slot=slot, tbf=tbf, fabric_rule=rule)
            write_state(info, cluster_topology(name, nodes, per_node, nic_rate, nic2_rate, loopback_rate, shaped,
                                               fabric))
        except BaseException:
            for namespace in reversed(created):
                try:
                    netns.delete_namespace(namespace)
                except DeployError:
                    pass
            remove_state_dir(state_dir)
            raise
    return info


def destroy_cluster(name: str, root: Path | None = None) -> list[str]:
    """Remove everything of cluster ``name`` that exists; one line per thing
    removed (empty if there was nothing)."""
    names.check_name(name)
    removed = []
    killed = kill_cluster_processes(name)
    if killed:
        removed.append(f"killed {len(killed)} rank process(es) on the host: {' '.join(map(str, killed))}")
    namespaces = cluster_namespaces(name)
    if namespaces:
        require_namespace_privileges(f"removing namespaces {', '.join(namespaces)}")
    # Nodes first, the bridge last: a node's veth ends vanish with either side.
    for namespace in sorted(namespaces, key=lambda ns: ns.endswith("-br")):
        pids = netns.delete_namespace(namespace)
        extra = f" (killed {len(pids)} process(es): {' '.join(map(str, pids))})" if pids else ""
        removed.append(f"deleted namespace {namespace}{extra}")
    folder = find_state_dir(name, root)
    while folder is not None:
        remove_state_dir(folder)
        if folder.exists():
            raise DeployError(f"cannot remove state folder {folder}")
        removed.append(f"removed state folder {folder}")
        folder = find_state_dir(name, root)
    return removed


def set_channel_rate(info: ClusterInfo, channel: int, rate: float) -> netns.TbfShape:
    """Change the rate of every node's NIC on ``channel`` (both directions) while
    the cluster runs: a NIC slowed by another tenant or a degraded link. The
    queue is sized for the new rate by the cluster's fabric rule (lossless: it
    still holds every flow's window, in bytes; the TCP windows stay those of
    the build). The state folder keeps the rate the cluster was built with."""
    if not info.shaped:
        raise DeployError(f"cluster {info.name!r} is loopback-only: it has no NICs to slow down")
    if channel >= len(info.tbf):
        raise DeployError(f"cluster {info.name!r} has {len(info.tbf)} NIC channel(s); there is no channel {channel}")
    if not rate > 0:
        raise DeployError(f"rate {rate!r} must be a positive number of bytes/s")
    require_namespace_privileges("changing a NIC's rate")
    shape = info.fabric_rule.shape(rate)
    bridge = []
    for node in range(info.nodes):
        nic = info.nic(node, channel)
        netns.tc_batch([netns.qdisc_line(nic.ifname, shape)], info.node_namespaces[node])
        bridge.append(netns.qdisc_line(nic.bridge_ifname, shape))
    netns.tc_batch(bridge, info.bridge_namespace)
    return shape


def nic_drops(info: ClusterInfo) -> dict[int, int]:
    """Per channel: packets the NICs' ``tbf`` queues dropped so far, both
    directions, every node (0 for a loopback-only cluster)."""
    drops = {channel: 0 for channel in range(len(info.tbf))}
    if not info.shaped:
        return drops
    bridge = netns.qdisc_drops(info.bridge_namespace)
    for node in range(info.nodes):
        own = netns.qdisc_drops(info.node_namespaces[node])
        for channel in drops:
            nic = info.nic(node, channel)
            drops[channel] += own.get(nic.ifname, 0) + bridge.get(nic.bridge_ifname, 0)
    return drops


@dataclass(frozen=True)
class ClusterStatus:
    """What exists of one cluster, and whether it is whole."""

    name: str
    info: ClusterInfo | None
    state_dir: Path | None
    namespaces: tuple[str, ...]
    missing: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())

    @property
    def condition(self) -> str:
        """``up``, ``loopback`` (unshaped record), ``partial`` or ``orphaned``."""
        if self.info is None:
            return "orphaned" if self.state_dir is None else "partial"
        if self.problems:
            return "partial"
        return "up" if self.info.shaped else "loopback"

    def to_dict(self) -> dict:
        data = {"name": self.name, "condition": self.condition, "problems": list(self.problems),
                "namespaces": list(self.namespaces), "missing_namespaces": list(self.missing),
                "state_dir": None if self.state_dir is None else str(self.state_dir)}
        if self.info is not None:
            data["cluster"] = self.info.to_dict()
        return data


def cluster_statuses(name: str | None = None, root: Path | None = None) -> list[ClusterStatus]:
    """Every cluster found in state folders (under ``root``) or namespaces
    (or only ``name``)."""
    folders = state_dirs(root)
    found: dict[str, list[str]] = {}
    for namespace in netns.list_namespaces():
        parsed = names.parse_namespace(namespace)
        if parsed:
            found.setdefault(parsed[0], []).append(namespace)
    statuses = []
    for cluster in sorted(set(folders) | set(found)):
        if name is not None and cluster != name:
            continue
        present = tuple(sorted(found.get(cluster, [])))
        folder = folders.get(cluster)
        info, problems, missing = None, [], ()
        if folder is None:
            roots = " or ".join(str(where) for where in candidate_roots(root))
            problems.append(f"namespaces without a state folder in {roots}; if no one uses them, "
                            f"remove them with p2 cluster down --name {cluster}")
        else:
            try:
                info = read_state(folder)
            except DeployError as exc:
                problems.append(str(exc))
        if info is not None:
            missing = tuple(ns for ns in info.namespaces if ns not in present)
            if missing:
                problems.append(f"missing namespace(s) {', '.join(missing)}; recreate with "
                                f"p2 cluster down --name {cluster} and p2 cluster up")
            extra = sorted(set(present) - set(info.namespaces))
            if extra:
                problems.append(f"stray namespace(s) {', '.join(extra)}")
        statuses.append(ClusterStatus(name=cluster, info=info, state_dir=folder, namespaces=present,
                                      missing=missing, problems=tuple(problems)))
    return statuses
