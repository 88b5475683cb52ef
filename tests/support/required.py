"""Skipping a test whose infrastructure this machine lacks, except where it must run.

The deployment tests need a Docker daemon and a one-node Slurm; on a laptop without them they skip
with the reason. CI here can start both (its setup installs them), and the issue asks that they
run there, not skip: ``.ci/run`` sets ``P2_REQUIRE_DEPLOY=1``, under which the same reason fails
the test instead, so a CI run that could not start them is red, not silently green.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE = "P2_REQUIRE_DEPLOY"


def unavailable_here(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it where ``P2_REQUIRE_DEPLOY=1``."""
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{reason} ({REQUIRE}=1: this test must run here)", pytrace=False)
    pytest.skip(reason)
