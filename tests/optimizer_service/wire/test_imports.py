"""The contract loads in a bare interpreter: no torch, no FastAPI, nothing of the service's shell."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
WIRE = ROOT / "optimizer_service" / "wire"
FORBIDDEN = ("torch", "fastapi", "starlette", "uvicorn", "enforcer", "optimizer_service.service",
             "optimizer_service.dashboard", "optimizer_service.cli", "optimizer_service.settings")


def test_importing_the_wire_loads_neither_plane():
    names = sorted(f"optimizer_service.wire.{p.stem}" for p in WIRE.glob("*.py") if p.stem != "__init__")
    assert "optimizer_service.wire.credentials" in names
    program = (f"import json, sys\nfor name in {names!r}:\n    __import__(name)\n"
               "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", program], cwd=ROOT, check=True, capture_output=True,
                                       text=True, timeout=120).stdout)
    assert set(names) <= set(loaded) and "grpc" in loaded
    assert not [name for name in loaded if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)]
