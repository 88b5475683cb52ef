"""Multiproc (loopback): ``examples/reshard.py`` plans a cross-mesh resharding and runs it, on local ranks
it starts itself and as one rank per process under an env:// launcher (what torchrun and ``p2 cluster run`` do).

The example checks every destination's slice itself and fails otherwise; here
its JSON must say what ran. The launcher is the training examples' one
(:func:`tests.examples.test_training_examples.launch_ranks`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples.test_training_examples import launch_ranks

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "reshard.py"
TIMEOUT = 180.0
# 4 ranks: a 2x1 source mesh (ranks 0, 1) and a 1x2 destination mesh (ranks 2, 3).
FLAGS = ["--shape", "8,6", "--src", "S^0R@[[0],[1]]", "--dst", "RS^0@[[2,3]]", "--repeats", "2"]

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


def check(result: dict, world: int, strategy: str) -> None:
    assert result["world_size"] == world and result["strategy"] == strategy
    assert result["shape"] == [8, 6] and result["tasks"] and all(strategy in t for t in result["tasks"])
    assert len(result["seconds"]) == 2 and all(s > 0 for s in result["seconds"])
    assert result["predicted_seconds"] > 0


def test_runs_on_local_ranks_it_starts(tmp_path):
    out = tmp_path / "reshard.json"
    done = subprocess.run([sys.executable, str(SCRIPT), *FLAGS, "--json", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT, env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "every destination got exactly its slice" in done.stdout
    check(json.loads(out.read_text()), 4, "broadcast")


def test_runs_as_one_rank_per_process_under_a_launcher(tmp_path):
    out = tmp_path / "reshard.json"
    command = [sys.executable, str(SCRIPT), *FLAGS, "--strategy", "global-allgather", "--backend", "p2enforcer",
               "--json", str(out)]
    launch_ranks(command, 4, tmp_path, label="examples/reshard.py")
    check(json.loads(out.read_text()), 4, "global-allgather")


def test_a_bad_spec_is_one_line_and_exit_code_2():
    done = subprocess.run([sys.executable, str(SCRIPT), "--src", "S^2R@2x2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 2
    assert done.stderr.startswith("error: sharding spec 'S^2R'") and done.stderr.count("\n") == 1
