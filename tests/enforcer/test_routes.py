"""Multiproc (loopback): every route to a collective reaches p2enforcer — DTensor ``redistribute`` on a
``DeviceMesh`` from ``init_device_mesh("cpu", …)``, the functional collectives and FSDP2 — with zero
bypasses, on the C++ backend and the Python group, and a plan made from their trace applies to their
ops with results equal to plain gloo's."""

import pytest
import torch

from tests.enforcer import route_ranks
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


@pytest.mark.parametrize("impl", IMPLS)
def test_dtensor_functional_and_fsdp2_ops_reach_the_enforcer_and_take_a_plan(impl):
    plain = run_world(4, route_ranks.routes, False, backend="gloo", timeout=240)
    ours = run_world(4, route_ranks.routes, True, backend="p2enforcer", timeout=240, env=impl_env(impl))
    for rank, (want, got) in enumerate(zip(plain, ours)):
        assert got["impl"] == impl
        assert got["bypassed"] == {}, f"rank {rank}"
        # DTensor's all-gathers and all-reduce, the functional collectives, FSDP2's all-gathers and reduce-scatters.
        planned = {"all_gather_into_tensor", "all_reduce", "all_to_all_single", "reduce_scatter_tensor"}
        assert planned <= set(got["kinds"]) and planned <= set(got["enforced"])
        for want_iteration, got_iteration in zip(want["results"], got["results"]):
            # The collectives' integer-valued data: bit for bit. FSDP2's loss and parameters come from
            # float gradients a planned reduce-scatter sums in ring order: equal up to rounding.
            exact = route_ranks.EXACT
            assert got_iteration[:exact] == want_iteration[:exact], f"rank {rank}"
            for w, g in zip(want_iteration[exact:], got_iteration[exact:]):
                assert torch.allclose(torch.tensor(g), torch.tensor(w), rtol=1e-5, atol=1e-6), f"rank {rank}"
