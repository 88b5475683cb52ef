"""A cluster's state folder and :class:`ClusterInfo`, the record in it.

``p2 cluster up`` writes ``<root>/<name>/cluster.json`` (what was built: sizes,
rates, shaping, the fabric, namespaces, interfaces and addresses) and ``topology.yaml``
(the P² model of the cluster). ``cluster.json`` is written last, so a folder
without it is the trace of an ``up`` that did not finish.

The root is the ``root`` the caller passes (the CLI passes its settings'
``cluster_dir``, i.e. ``$P2_CLUSTER_DIR``; this package reads no environment),
else ``/run/p2-clusters`` (tmpfs: a reboot, which also removes the namespaces,
removes the records too) or, when that is not writable (no root),
``~/.cache/p2/clusters``. Lookups search the same places in the same order.

A ``cluster.json`` written before fabrics existed names none and reads as
``lossy``: its queues were the shallow ones.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deploy.emulated import names
from deploy.emulated.fabric import LEGACY_FABRIC, Fabric
from deploy.emulated.netns import TbfShape
from deploy.errors import DeployError

STATE_FILE = "cluster.json"
TOPOLOGY_FILE = "topology.yaml"
SYSTEM_ROOT = Path("/run/p2-clusters")
FORMAT_VERSION = 1


def user_root() -> Path:
    return Path.home() / ".cache" / "p2" / "clusters"


def candidate_roots(root: Path | None = None) -> list[Path]:
    """Where state folders may live, in lookup order: ``root`` alone when
    given, else the defaults."""
    if root is not None:
        return [Path(root)]
    return [SYSTEM_ROOT, user_root()]


def writable_root(root: Path | None = None) -> Path:
    """The root a new cluster's state folder goes to (created if needed)."""
    for where in candidate_roots(root):
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(where, os.W_OK | os.X_OK):
            return where
    if root is not None:
        raise DeployError(f"cannot write cluster state: P2_CLUSTER_DIR={root} is not a writable folder")
    raise DeployError(f"cannot write cluster state: neither {SYSTEM_ROOT} nor {user_root()} is writable; "
                      f"set P2_CLUSTER_DIR to a writable folder")


def find_state_dir(name: str, root: Path | None = None) -> Path | None:
    """The state folder of cluster ``name``, complete or not, if any."""
    for root in candidate_roots(root):
        folder = root / name
        if folder.is_dir():
            return folder
    return None


def state_dirs(root: Path | None = None) -> dict[str, Path]:
    """Every state folder, by cluster name (the first root wins)."""
    found: dict[str, Path] = {}
    for root in candidate_roots(root):
        try:
            entries = sorted(root.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir() and entry.name not in found:
                try:
                    names.check_name(entry.name)
                except DeployError:
                    continue
                found[entry.name] = entry
    return found


@dataclass(frozen=True)
class NodeChannel:
    """Node ``node``'s NIC on ``channel``: interface names and address."""

    node: int
    channel: int
    ifname: str
    bridge_ifname: str
    address: str  # without prefix length


@dataclass(frozen=True)
class ClusterInfo:
    """What ``p2 cluster up`` built, as read back from ``cluster.json``.

    Rates are bytes/s. ``shaped`` is False for a loopback-only cluster (no
    namespaces: every rank runs on the host). ``tbf`` holds the qdisc
    parameters per channel (empty when unshaped); ``fabric_rule`` the fabric
    they were sized by (:mod:`deploy.emulated.fabric`), ``fabric`` its name."""

    name: str
    nodes: int
    per_node: int
    nic_rate: float
    nic2_rate: float | None
    loopback_rate: float
    loopback_measured: bool
    shaped: bool
    state_dir: Path
    created: str
    slot: int | None = None
    tbf: tuple[TbfShape, ...] = ()
    fabric_rule: Fabric = Fabric(LEGACY_FABRIC)

    @property
    def fabric(self) -> str:
        """``lossless`` or ``lossy``."""
        return self.fabric_rule.kind

    @property
    def world_size(self) -> int:
        return self.nodes * self.per_node

    @property
    def channels(self) -> int:
        return 1 if self.nic2_rate is None else 2

    @property
    def topology_path(self) -> Path:
        return self.state_dir / TOPOLOGY_FILE

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def bridge_namespace(self) -> str | None:
        return names.bridge_namespace(self.name) if self.shaped else None

    @property
    def node_namespaces(self) -> tuple[str, ...]:
        if not self.shaped:
            return ()
        return tuple(names.node_namespace(self.name, node) for node in range(self.nodes))

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.bridge_namespace, *self.node_namespaces) if self.shaped else ()

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def nic(self, node: int, channel: int = 0) -> NodeChannel:
        """Node ``node``'s NIC on ``channel`` (shaped clusters only)."""
        if not self.shaped or self.slot is None:
            raise DeployError(f"cluster {self.name!r} is loopback-only: it has no NICs")
        return NodeChannel(node=node, channel=channel, ifname=names.node_ifname(channel),
                           bridge_ifname=names.bridge_ifname(node, channel),
                           address=names.node_address(self.slot, channel, node))

    @property
    def master_addr(self) -> str:
        """Node 0's channel-0 address (``127.0.0.1`` when unshaped)."""
        return self.nic(0).address if self.shaped else "127.0.0.1"

    def to_dict(self) -> dict[str, Any]:
        """The ``cluster.json`` form (also what ``--json`` writes)."""
        nodes = []
        for node in range(self.nodes):
            entry: dict[str, Any] = {
                "node": node,
                "ranks": list(range(node * self.per_node, (node + 1) * self.per_node)),
                "namespace": names.node_namespace(self.name, node) if self.shaped else None,
            }
            if self.shaped:
                entry["channels"] = [
                    {"channel": nic.channel, "ifname": nic.ifname, "bridge_ifname": nic.bridge_ifname,
                     "bridge": names.bridge_name(nic.channel),
                     "address": f"{nic.address}/{names.PREFIX_LENGTH}"}
                    for nic in (self.nic(node, channel) for channel in range(self.channels))]
            nodes.append(entry)
        return {
            "version": FORMAT_VERSION,
            "name": self.name,
            "nodes": self.nodes,
            "per_node": self.per_node,
            "world_size": self.world_size,
            "shaped": self.shaped,
            "nic_rate": self.nic_rate,
            "nic2_rate": self.nic2_rate,
            "loopback_rate": self.loopback_rate,
            "loopback_measured": self.loopback_measured,
            "slot": self.slot,
            **self.fabric_rule.to_dict(),
            "tbf": [shape.to_dict() for shape in self.tbf],
            "namespaces": {"bridge": self.bridge_namespace, "nodes": list(self.node_namespaces)},
            "node_details": nodes,
            "master_addr": self.master_addr,
            "state_dir": str(self.state_dir),
            "topology": str(self.topology_path),
            "created": self.created,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], state_dir: Path) -> ClusterInfo:
        try:
            return cls(name=names.check_name(data["name"]), nodes=int(data["nodes"]), per_node=int(data["per_node"]),
                       nic_rate=float(data["nic_rate"]),
                       nic2_rate=None if data["nic2_rate"] is None else float(data["nic2_rate"]),
                       loopback_rate=float(data["loopback_rate"]), loopback_measured=bool(data["loopback_measured"]),
                       shaped=bool(data["shaped"]), state_dir=state_dir, created=str(data["created"]),
                       slot=None if data.get("slot") is None else int(data["slot"]),
                       tbf=tuple(TbfShape(**shape) for shape in data.get("tbf", ())),
                       fabric_rule=Fabric.from_dict(data))
        except (KeyError, TypeError, ValueError) as exc:
            raise DeployError(f"{state_dir / STATE_FILE} is damaged ({exc.__class__.__name__}: {exc}); "
                                    f"remove the cluster with p2 cluster down --name {state_dir.name}") from None


def now_text() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_state(info: ClusterInfo, topology_yaml: str) -> None:
    """Write ``topology.yaml``, then ``cluster.json`` (atomically, last)."""
    info.state_dir.mkdir(parents=True, exist_ok=True)
    info.topology_path.write_text(topology_yaml, encoding="utf-8")
    tmp = info.state_dir / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(info.to_dict(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, info.state_file)


def read_state(state_dir: Path) -> ClusterInfo:
    try:
        data = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeployError(f"cluster {state_dir.name!r} is incomplete ({state_dir} has no {STATE_FILE}); "
                                f"remove it with p2 cluster down --name {state_dir.name}") from None
    except (OSError, ValueError) as exc:
        raise DeployError(f"{state_dir / STATE_FILE} cannot be read ({exc.__class__.__name__}); "
                                f"remove the cluster with p2 cluster down --name {state_dir.name}") from None
    if not isinstance(data, dict):
        raise DeployError(f"{state_dir / STATE_FILE} is damaged; remove the cluster with "
                                f"p2 cluster down --name {state_dir.name}")
    return ClusterInfo.from_dict(data, state_dir)


def load_cluster(name: str = names.DEFAULT_NAME, root: Path | None = None) -> ClusterInfo:
    """The cluster called ``name`` (state under ``root``, see the module
    docstring), or a one-line error saying how to make it."""
    names.check_name(name)
    folder = find_state_dir(name, root)
    if folder is None:
        flag = "" if name == names.DEFAULT_NAME else f" --name {name}"
        raise DeployError(f"no cluster named {name}; create it with p2 cluster up{flag} "
                                f"--nodes N --per-node K --nic RATE")
    return read_state(folder)


def remove_state_dir(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
