"""Plan channels on UCC (``P2_CHANNEL_BACKENDS=gloo,ucc``): channel 1's backends are ours, its
motifs run as UCC collectives (:mod:`enforcer.runtime.ucc_motifs`), and the planned ops give plain gloo's
results bit for bit on int64 data — every planned op kind, motifs of one op alternating between the
gloo and the UCC channel, and P² programs whose ReduceScatter/AllGather/Reduce/Broadcast motifs all
run on UCC."""

from __future__ import annotations

import pytest
from enforcer.comm import ucc
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world
from tests.ucc import plan_ucc_ranks

pytestmark = [pytest.mark.multiproc, pytest.mark.slow,
              pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}")]

ENV = {"P2_CHANNEL_BACKENDS": "gloo,ucc"}


@pytest.mark.parametrize("world,first_channel", [(2, 0), (3, 1), (4, 0), (4, 1)])
@pytest.mark.parametrize("impl", IMPLS)
def test_planned_int64_ops_with_channel_one_on_ucc_equal_plain_gloo(world, first_channel, impl):
    for rank, result in enumerate(run_world(world, plan_ucc_ranks.under_plan, first_channel, backend="p2enforcer",
                                            env={**ENV, **impl_env(impl)}, timeout=300)):
        assert result["mismatches"] == [], f"rank {rank}"
        assert result["backends"] == {0: ["gloo"], 1: ["ucc"]}, f"rank {rank}"
        assert result["ucc_collectives"] > 0, f"rank {rank}: nothing ran on UCC"
        assert result["enforced"] == 3 * 6, f"rank {rank}"


@pytest.mark.parametrize("program", [
    "ReduceScatter 1 {0,1,2,3} {4,5,6,7}; AllReduce 1/4 {0,4} {1,5} {2,6} {3,7}; AllGather 1/4 {0,1,2,3} {4,5,6,7}",
    "Reduce 1 {0,1,2,3} {4,5,6,7}; AllReduce 1 {0,4}; Broadcast 1 {0,1,2,3} {4,5,6,7}",
])
@pytest.mark.parametrize("impl", IMPLS)
def test_a_p2_program_on_the_ucc_channel_equals_plain_gloo(program, impl):
    for result in run_world(8, plan_ucc_ranks.program_under_plan, program, 4099, backend="p2enforcer",
                            env={**ENV, **impl_env(impl)}, timeout=300):
        assert result["equal"] and result["enforced"], result
        assert result["backends"] == {0: [], 1: ["ucc"]}, result
        assert result["ucc_collectives"] > 0, result
