"""The hybrid data-parallel example's command line: its flags, and bad ones refused before any rendezvous.

Its training (4 ranks on ``new_group`` subgroups, planned by the optimizer
service, losses equal to gloo's) is in ``test_service_plans_examples.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.examples.test_training_examples import EXAMPLES, ROOT

SCRIPT = "train_hybrid.py"


def test_help_describes_the_flags_and_the_groups():
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    for text in ("--backend", "--steps", "--json", "--after-plan", "--group-size", "new_group", "replica group",
                 "peer group", "P2_EXAMPLE_BACKEND", "torchrun", "p2 cluster run"):
        assert text in result.stdout


@pytest.mark.parametrize("flags,message", [
    (["--group-size", "3"], "--group-size 3 does not divide the world size 4"),
    (["--group-size", "0"], "--group-size 0 must be at least 1"),
    (["--backend", "no-such-backend"], "torch.distributed backend 'no-such-backend' is not registered (known: "),
])
def test_a_bad_flag_is_one_line_and_exit_code_2_before_rendezvous(flags, message):
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), "--backend", "gloo", *flags], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env={**os.environ, "WORLD_SIZE": "4"},
                            check=False)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"{SCRIPT}: error: {message}")


def test_a_negative_after_plan_is_refused():
    result = subprocess.run([sys.executable, str(EXAMPLES / SCRIPT), "--after-plan", "-1"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("argument --after-plan: -1 is negative")
