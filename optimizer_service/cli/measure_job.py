"""Run a measurement module (:mod:`enforcer.measure.programs`, :mod:`enforcer.measure.reshard`)
on every rank of an emulated cluster.

Shared by ``p2 bench reduce`` and ``p2 calibrate`` (lowered programs: each run
a program, reduction groups, bytes, channel) and by ``p2 reshard --measure``
and ``benchmarks/resharding.py`` (resharding programs): this module writes
the spec, starts the ranks through :func:`deploy.emulated.run_ranks` (their
output streams to stderr with rank prefixes, so progress is visible) and
returns each run's measured seconds by id.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from deploy.emulated import ClusterInfo, run_ranks
from optimizer_service.errors import JobFailedError
from optimizer_service.plan.lowered import LoweredProgram


@dataclass(frozen=True)
class Run:
    id: str
    program: LoweredProgram
    groups: tuple[tuple[int, ...], ...]
    nbytes: int
    channel: int = 0

    def to_dict(self) -> dict:
        return {"id": self.id, "program": str(self.program), "groups": [list(g) for g in self.groups],
                "bytes": self.nbytes, "channel": self.channel}


@dataclass(frozen=True)
class Measured:
    median: float
    seconds: tuple[float, ...]


def measure(info: ClusterInfo, runs: list[Run], *, warmup: int, repeat: int, no_shaping: bool = False,
            timeout: float | None = None, master_port: int | None = None) -> dict[str, Measured]:
    spec = {"warmup": warmup, "repeat": repeat, "runs": [run.to_dict() for run in runs]}
    return run_measurement(info, "enforcer.measure.programs", spec, no_shaping=no_shaping, timeout=timeout,
                           master_port=master_port)


def run_measurement(info: ClusterInfo, module: str, spec: dict, *, no_shaping: bool = False,
                    timeout: float | None = None, master_port: int | None = None) -> dict[str, Measured]:
    """Run ``python -m module SPEC OUT`` on every rank of ``info`` and read back
    ``OUT``'s ``runs[{id, median, seconds}]``."""
    with tempfile.TemporaryDirectory(prefix="p2-measure-") as folder:
        spec_path, out_path = Path(folder, "spec.json"), Path(folder, "result.json")
        spec_path.write_text(json.dumps(spec))
        Path(folder).chmod(0o755)
        code = run_ranks(info, [sys.executable, "-m", module, str(spec_path), str(out_path)],
                         env=_quiet_torch(), no_shaping=no_shaping, timeout=timeout, out=sys.stderr,
                         master_port=master_port)
        if code != 0 or not out_path.exists():
            raise JobFailedError(f"the measurement job on cluster {info.name!r} failed (exit code {code}); "
                                    "the ranks' output above says why")
        result = json.loads(out_path.read_text())
    return {r["id"]: Measured(r["median"], tuple(r["seconds"])) for r in result["runs"]}


def _quiet_torch() -> dict[str, str]:
    """c10d warns on every rank that a namespace has no resolvable hostname; the
    measurement does not need one. An explicit TORCH_CPP_LOG_LEVEL wins."""
    return {"TORCH_CPP_LOG_LEVEL": os.environ.get("TORCH_CPP_LOG_LEVEL", "ERROR")}
