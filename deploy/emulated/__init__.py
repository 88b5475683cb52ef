"""The emulated cluster: network namespaces as nodes, ``tbf``-shaped veths as NICs.

One namespace per node (its ranks talk over the namespace's loopback), one
bridge namespace, and per node one rate-limited veth per channel into that
channel's bridge. The fabric (``lossless``, the default, or ``lossy``) sets
how deep the NICs' queues are. ``p2 cluster up/run/down/status`` drive it; other commands
(``p2 bench``, ``p2 calibrate``) use this façade::

    from deploy.emulated import load_cluster, run_ranks
    info = load_cluster("p2")
    code = run_ranks(info, [sys.executable, "-m", "some.module"], env={"X": "1"})

Modules, one idea each: :mod:`~deploy.emulated.names` (what things are
called), :mod:`~deploy.emulated.state` (the state folder and
:class:`ClusterInfo`), :mod:`~deploy.emulated.netns` (namespaces, veths,
bridges, ``tbf``), :mod:`~deploy.emulated.fabric` (lossless or lossy: the
queue rule), :mod:`~deploy.emulated.probe` (measurements inside a node),
:mod:`~deploy.emulated.model` (the P² topology), :mod:`~deploy.emulated.lifecycle`
(up, down, status), :mod:`~deploy.emulated.launcher` (running ranks),
:mod:`~deploy.emulated.processes` and :mod:`~deploy.emulated.privileges`.
"""

from deploy.emulated.fabric import DEFAULT_FABRIC, FABRICS, Fabric
from deploy.emulated.launcher import rank_environment, run_ranks
from deploy.emulated.lifecycle import (
    ClusterStatus,
    cluster_statuses,
    create_cluster,
    destroy_cluster,
    nic_drops,
    set_channel_rate,
)
from deploy.emulated.names import DEFAULT_NAME
from deploy.emulated.netns import TbfShape, tbf_shape
from deploy.emulated.privileges import can_manage_namespaces
from deploy.emulated.state import ClusterInfo, load_cluster

__all__ = [
    "DEFAULT_FABRIC",
    "DEFAULT_NAME",
    "FABRICS",
    "ClusterInfo",
    "ClusterStatus",
    "Fabric",
    "TbfShape",
    "can_manage_namespaces",
    "cluster_statuses",
    "create_cluster",
    "destroy_cluster",
    "load_cluster",
    "nic_drops",
    "rank_environment",
    "run_ranks",
    "set_channel_rate",
    "tbf_shape",
]
