"""Running the project's ``p2`` command from a benchmark script."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def p2(*args: str) -> None:
    """``.venv/bin/p2 ARGS`` in the repository root, its output shown; a failure ends the benchmark."""
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "p2"), *args], cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"p2 {' '.join(args)} failed with exit code {done.returncode}")


@contextmanager
def emulated_cluster(name: str, nic: str, nodes: int = 2, per_node: int = 4) -> Iterator[str]:
    """``p2 cluster up`` with two NICs of rate ``nic`` per node, and ``p2 cluster down`` after."""
    p2("cluster", "up", "--name", name, "--nodes", str(nodes), "--per-node", str(per_node), "--nic", nic,
       "--nic2", nic)
    try:
        yield name
    finally:
        p2("cluster", "down", "--name", name)
