"""Finding a cluster's rank processes after their launcher is gone.

Every rank starts with ``P2_CLUSTER=<name>`` in its environment (set by
:mod:`deploy.emulated.launcher` and inherited by whatever the rank starts), and
nothing else sets it. ``/proc/<pid>/environ`` is the environment a process
was started with, so a scan finds the ranks of a crashed ``p2 cluster run`` —
including those on the host (unshaped runs), which no namespace holds.
"""

from __future__ import annotations

import os
from pathlib import Path

from deploy.emulated.netns import kill_pids

MARKER = "P2_CLUSTER"


def cluster_processes(name: str) -> list[int]:
    """Pids of live processes started for cluster ``name`` (never this one)."""
    needle = f"{MARKER}={name}".encode()
    mine = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == mine:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return sorted(found)


def kill_cluster_processes(name: str, grace: float = 1.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process of cluster ``name``; their pids."""
    return kill_pids(cluster_processes(name), grace)
