"""The pybind11 bindings to UCC's C API on real local ranks: the Store all-gather UCC's OOB runs on
(a fresh key prefix per round, old keys deleted), and library / context / team / collective
requests used directly (context with and without a store)."""

from __future__ import annotations

import pytest
from enforcer.comm import ucc
from tests.support.multiproc import run_world
from tests.ucc import bindings_ranks

pytestmark = [pytest.mark.multiproc,
              pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}")]


@pytest.mark.parametrize("world", [2, 3])
def test_each_oob_round_reads_its_own_keys_and_old_ones_are_deleted(world):
    rounds = 30
    for result in run_world(world, bindings_ranks.oob_rounds, rounds, timeout=120):
        assert result["wrong"] == []
        assert result["rounds"] == rounds
        assert result["new_keys"] <= 2 * world, result       # the last two rounds' keys; earlier ones deleted


@pytest.mark.parametrize("local_context", [False, True])
def test_lib_context_team_and_requests(local_context):
    assert run_world(3, bindings_ranks.raw_collectives, local_context, timeout=120) == [[]] * 3
