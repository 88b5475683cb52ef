"""Running the project's ``p2`` command from a benchmark script, and the emulated cluster's
fabric and NIC drops that every cluster benchmark reports."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.emulated import DEFAULT_FABRIC, FABRICS, load_cluster, nic_drops
from optimizer_service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
FABRIC_HELP = (f"the emulated fabric: {' or '.join(FABRICS)} (default {DEFAULT_FABRIC}: queues deep enough that "
               "nothing is dropped; lossy: shallow switch-like queues, drops and TCP retransmissions)")


def p2(*args: str) -> None:
    """``.venv/bin/p2 ARGS`` in the repository root, its output shown; a failure ends the benchmark."""
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "p2"), *args], cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"p2 {' '.join(args)} failed with exit code {done.returncode}")


def fabric_problem(benchmark: str, fabric: str) -> str | None:
    """The one line a benchmark prints (and exits 2) for an unknown ``--fabric``, else None."""
    if fabric in FABRICS:
        return None
    return f"{benchmark}: --fabric {fabric!r} must be one of {', '.join(FABRICS)}"


@contextmanager
def emulated_cluster(name: str, nic: str, fabric: str = DEFAULT_FABRIC, nodes: int = 2,
                     per_node: int = 4) -> Iterator[str]:
    """``p2 cluster up`` on ``fabric`` with two NICs of rate ``nic`` per node, and ``p2 cluster down`` after."""
    p2("cluster", "up", "--name", name, "--nodes", str(nodes), "--per-node", str(per_node), "--nic", nic,
       "--nic2", nic, "--fabric", fabric)
    try:
        yield name
    finally:
        p2("cluster", "down", "--name", name)


def nic_drop_total(name: str) -> int:
    """Packets the NICs' ``tbf`` queues of cluster ``name`` dropped so far (every channel, node and
    direction; :func:`deploy.emulated.nic_drops`). A benchmark reads it before and after a run."""
    return sum(nic_drops(load_cluster(name, Settings().cluster_dir)).values())


def drop_record(drops: int, iterations: int) -> dict:
    """The ``nic_drops`` entry of a benchmark's JSON: drops over ``iterations`` (every op or
    iteration the ranks ran on the cluster, warm-up included)."""
    return {"total": drops, "iterations": iterations, "per_iteration": drops / iterations if iterations else 0.0}
