"""Multiproc (loopback): without a plan, every c10d op on ``p2enforcer`` gives exactly what plain gloo gives.

Each world runs the whole op surface of :mod:`tests.enforcer.ops` on ``gloo``
and on ``p2enforcer`` (the C++ backend and the Python group) — and every
result (or error type) of every rank must be equal, element for element.
"""

import pytest

from tests.enforcer import ops
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


def differences(plain: list[dict], enforced: list[dict]) -> list[str]:
    found = []
    for rank, (want, got) in enumerate(zip(plain, enforced)):
        assert want.keys() == got.keys()
        found += [f"rank {rank} {name}: gloo {str(want[name])[:80]} p2enforcer {str(got[name])[:80]}"
                  for name in want if want[name] != got[name]]
    return found


@pytest.mark.parametrize("world,sub,sizes,dtypes", [
    (2, [1], ops.SIZES, ops.DTYPES),
    (4, [0, 2, 3], ops.SIZES, ops.DTYPES),
    (8, [1, 2, 5, 6, 7], (0, 1, 37), ("float32", "int64")),
])
@pytest.mark.parametrize("impl", IMPLS)
def test_every_op_passes_through_unchanged(world, sub, sizes, dtypes, impl):
    plain = run_world(world, ops.exercise, sub, sizes, dtypes)
    enforced = run_world(world, ops.exercise, sub, sizes, dtypes, backend="p2enforcer", env=impl_env(impl))
    assert len(plain[0]) > 100
    # gloo itself must have done real work: most combinations succeed.
    errors = sum(1 for v in plain[0].values() if isinstance(v, list) and v[:1] == ["error"])
    assert errors < len(plain[0]) / 2
    assert differences(plain, enforced) == []
