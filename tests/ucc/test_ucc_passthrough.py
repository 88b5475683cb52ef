"""``P2_INNER_BACKEND=ucc`` under ``backend="p2enforcer"`` (the Python group): every op of
:mod:`tests.enforcer.ops` on the world and on a subgroup passes through to our UCC backend and
gives what plain gloo gives, element for element, in float32/float64/int64 (sizes 0, 1, 37, 64 Ki).

Known differences, each checked: point-to-point ops fail (UCC has none) with our one-line
message; where gloo itself fails — AVG (gloo has none) and the futures of its async
reduce_scatter — UCC may succeed."""

from __future__ import annotations

import pytest
from enforcer.comm import ucc
from tests.enforcer import ops
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world

pytestmark = [pytest.mark.multiproc, pytest.mark.slow,
              pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}")]

DTYPES = ("float32", "float64", "int64")
UCC_ENV = {"P2_INNER_BACKEND": "ucc"}
POINT_TO_POINT = ("/p2p", "/batch_isend_irecv")
GLOO_ALONE_FAILS = ("/AVG/", "/reduce_scatter/True", "/reduce_scatter_tensor/True")


def _is_error(value) -> bool:
    return isinstance(value, list) and value[:1] == ["error"]


def differences(plain: list[dict], enforced: list[dict]) -> list[str]:
    found = []
    for rank, (want, got) in enumerate(zip(plain, enforced)):
        assert want.keys() == got.keys()
        for name in want:
            if name.endswith(POINT_TO_POINT):
                if not _is_error(got[name]):
                    found.append(f"rank {rank} {name}: UCC has no point-to-point, yet it gave {str(got[name])[:80]}")
            elif want[name] != got[name] and not (_is_error(want[name]) and any(k in name for k in GLOO_ALONE_FAILS)):
                found.append(f"rank {rank} {name}: gloo {str(want[name])[:80]} p2enforcer+ucc {str(got[name])[:80]}")
    return found


@pytest.mark.parametrize("world,sub,sizes", [
    (2, [1], ops.SIZES),
    (4, [0, 2, 3], ops.SIZES),
    (8, [1, 2, 5, 6, 7], (0, 1, 37)),
])
@pytest.mark.parametrize("impl", IMPLS)
def test_every_op_passes_through_to_ucc_unchanged(world, sub, sizes, impl):
    plain = run_world(world, ops.exercise, sub, sizes, DTYPES)
    enforced = run_world(world, ops.exercise, sub, sizes, DTYPES, backend="p2enforcer",
                         env={**UCC_ENV, **impl_env(impl)}, timeout=600)
    assert len(plain[0]) > 100
    errors = sum(1 for v in plain[0].values() if _is_error(v))
    assert errors < len(plain[0]) / 2
    assert differences(plain, enforced) == []


def _inner_name() -> str:
    import enforcer
    return enforcer.group_of().inner_backend("cpu").name()


@pytest.mark.parametrize("impl", IMPLS)
def test_the_group_uses_our_ucc_backend_for_cpu(impl):
    assert run_world(2, _inner_name, backend="p2enforcer", env={**UCC_ENV, **impl_env(impl)}) == ["ucc", "ucc"]


def _ddp_parameters(steps: int) -> list[list[float]]:
    """A small DDP model trained ``steps`` steps on rank-dependent data; its parameters after."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                                        torch.nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1 + torch.distributed.get_rank())
    for _ in range(steps):
        x = torch.randn(32, 8, generator=gen)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().flatten().tolist() for p in model.parameters()]


@pytest.mark.parametrize("impl", IMPLS)
def test_ddp_over_p2enforcer_with_ucc_inside_trains_as_on_gloo(impl):
    """DDP's reducer all-reduces its buckets and chains on the Works' futures; on two ranks a sum has
    one order, so the parameters must match gloo's bit for bit."""
    plain = run_world(2, _ddp_parameters, 3)
    enforced = run_world(2, _ddp_parameters, 3, backend="p2enforcer", env={**UCC_ENV, **impl_env(impl)})
    assert enforced == plain
    assert plain[0] == plain[1]
