"""Running ``p2`` through its real entry point, as tests of the CLI do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def p2(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``p2 ARGS`` in the repository root, output captured, with ``env`` added."""
    environment = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "optimizer_service.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=environment, timeout=timeout)
