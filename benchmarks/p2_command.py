"""Running the project's ``p2`` command from a benchmark script."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def p2(*args: str) -> None:
    """``.venv/bin/p2 ARGS`` in the repository root, its output shown; a failure ends the benchmark."""
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "p2"), *args], cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"p2 {' '.join(args)} failed with exit code {done.returncode}")
