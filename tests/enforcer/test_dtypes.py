"""Multiproc (loopback, 4 ranks as two nodes of 2): under a plan, every planned op kind in every
dtype c10d collectives take gives plain gloo's result, for every reduce op, on both runtimes and
with a plan channel on UCC (issue 32, "every dtype").

One world per runtime runs every case (:mod:`tests.enforcer.dtype_ranks`: 10 dtypes x 5 op kinds,
the reducing ones x 6 reduce ops, 160 ops under one plan keyed by dtype) against a plain gloo group:

* **What a plan takes** (``enforcer/runtime/buffers.py``, twin ``cpp_ext/enforcer/op_buffer.cpp``):
  every op kind of every dtype but int16 (gloo has no int16 collective), reductions SUM on every
  such dtype and AVG on floating point. Those ops are ``enforced``; every other one passes
  through: MIN, MAX, PRODUCT, PREMUL_SUM, AVG on integers and bool, and int16 of any kind.
* **Bit for bit**: integer and bool results (bool compared as its bytes: gloo adds bool bytewise),
  every op without a reduction, and every op that passes through. An op gloo refuses (int16,
  AVG on integers, PREMUL_SUM on the Python group) raises the same error under the plan.
  PREMUL_SUM on the C++ backend is gloo's SUM times the factor in the tensor's dtype (gloo lacks
  it; the backend scales, as NCCL's premul_sum takes the factor) and refuses integers.
* **Floating sums within the rounding of another summation order.** A plan adds the same ``p``
  operands ``x_1..x_p`` as gloo, in another order (a ring, a two-level or tree reduction, segments
  on two channels; a float16 reduction on a UCC channel in float32, rounded once). Any order
  evaluated with unit roundoff ``u`` (2^-24 float32, 2^-53 float64, 2^-11 float16, 2^-8 bfloat16)
  is within ``γ·Σ|x_i|`` of the exact sum, ``γ = (p−1)·u / (1 − (p−1)·u)`` (Higham, *Accuracy and
  Stability of Numerical Algorithms*, §4.2), so per element::

      SUM:  |plan − gloo| <= 2·γ·Σ|x_i|
      AVG:  |plan − gloo| <= 2·γ·Σ|x_i| / p + u·(|plan| + |gloo|)     (each divides by p once)

  checked for each element of every floating SUM and AVG case, whose operands have fractions
  (so the sums round).
* **Dtype in the key**: an op whose dtype is not the one its plan key names passes through
  (a bfloat16 key is not applied to a float16 op of the same bytes), logged once; a key without a
  dtype takes it.
"""

from __future__ import annotations

import pytest
import torch
from enforcer.comm import ucc
from tests.enforcer import dtype_ranks
from tests.enforcer.impls import IMPLS, impl_env
from tests.support.multiproc import run_world

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
UCC = pytest.mark.skipif(not ucc.available(), reason=f"UCC backend not built: {ucc.why_unavailable()}")


def planned(case: dtype_ranks.Case) -> bool:
    """Whether the runtimes hand ``case`` to its plan (buffers.py's rule)."""
    floating = getattr(torch, case.dtype).is_floating_point
    return case.dtype != "int16" and (case.reduce_op in ("", "SUM") or (case.reduce_op == "AVG" and floating))


def bound(case: dtype_ranks.Case, magnitude: torch.Tensor, got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """The module docstring's bound on |plan − gloo| per element (float64)."""
    u, p = UNIT_ROUNDOFF[case.dtype], dtype_ranks.WORLD
    gamma = (p - 1) * u / (1 - (p - 1) * u)
    if case.reduce_op == "SUM":
        return 2 * gamma * magnitude
    return 2 * gamma * magnitude / p + u * (got.double().abs() + want.double().abs())


def problems(result: dict) -> list[str]:
    """What is wrong with one case's outcome on one rank (empty: nothing)."""
    case, got, want = result["case"], result["got"], result["want"]
    if result["enforced"] != planned(case):
        return [f"{case}: enforced is {result['enforced']}, expected {planned(case)}"]
    if "error" in want or "error" in got:
        if "error" not in got or "error" not in want:
            return [f"{case}: plain gloo gave {want.get('error', 'a result')}, "
                    f"the enforcer {got.get('error', 'a result')}"]
        if case.reduce_op != "PREMUL_SUM" and got["error"] != want["error"]:
            return [f"{case}: the enforcer raised {got['error']!r}, plain gloo {want['error']!r}"]
        return []
    got, want = dtype_ranks.tensor_of(got["tensor"]), dtype_ranks.tensor_of(want["tensor"])
    if "magnitude" in result and result["enforced"]:
        difference = (got.double() - want.double()).abs()
        allowed = bound(case, dtype_ranks.tensor_of(result["magnitude"]), got, want)
        if not bool((difference <= allowed).all()):
            worst = int((difference - allowed).argmax())
            return [f"{case}: element {worst} differs from gloo's by {float(difference[worst]):.3g}, "
                    f"more than the bound {float(allowed[worst]):.3g}"]
        return []
    if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
        bad = (got.view(torch.uint8) != want.view(torch.uint8)).nonzero().view(-1)[:4].tolist()
        return [f"{case}: differs from gloo's bits at bytes {bad}"]
    return []


def check(results: list[dict], impl: str) -> None:
    for rank, result in enumerate(results):
        assert result["impl"] == impl
        found = [problem for case in result["results"] for problem in problems(case)]
        assert found == [], f"rank {rank}:\n" + "\n".join(found)
        mismatch = result["mismatch"]
        assert mismatch["enforced"] == [False, True, False, True], f"rank {rank}"
        assert mismatch["equal"] == [True, True], f"rank {rank}"
        assert len(mismatch["logged"]) == 1, f"rank {rank}: {mismatch['logged']}"
        assert "is for bfloat16 elements but the op's are float16" in mismatch["logged"][0]


def test_the_case_table_covers_every_dtype_kind_and_reduce_op():
    cases = dtype_ranks.cases()
    assert {c.dtype for c in cases} == set(dtype_ranks.DTYPES) and len(dtype_ranks.DTYPES) == 10
    assert {c.kind for c in cases} == {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"}
    for kind in ("all_reduce", "reduce_scatter"):
        assert {(c.dtype, c.reduce_op) for c in cases if c.kind == kind} == \
            {(d, op) for d in dtype_ranks.DTYPES for op in dtype_ranks.REDUCE_OPS}
    assert [c.seq for c in cases] == list(range(len(cases)))


def test_the_bound_catches_a_missing_operand():
    """The floating bound is tight enough to fail a sum that lost one member's operand."""
    case = dtype_ranks.Case(0, "all_reduce", "bfloat16", "SUM", "ring")
    operands = [torch.randn(1000, generator=torch.Generator().manual_seed(r), dtype=torch.float64) for r in range(4)]
    exact = sum(operands)
    magnitude = sum(x.abs() for x in operands)
    lost = (exact - operands[3]).to(torch.bfloat16)
    assert not bool(((lost.double() - exact).abs() <= bound(case, magnitude, lost, exact)).all())


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
def test_every_dtype_kind_and_reduce_op_under_a_plan_equals_plain_gloo(impl):
    results = run_world(dtype_ranks.WORLD, dtype_ranks.every_case, backend="p2enforcer", timeout=300,
                        env=impl_env(impl))
    check(results, impl)
    assert all(r["backends"] == {0: ["gloo"], 1: ["gloo"]} for r in results)


@UCC
@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("impl", IMPLS)
def test_every_dtype_with_a_plan_channel_on_ucc_equals_plain_gloo(impl):
    results = run_world(dtype_ranks.WORLD, dtype_ranks.every_case, backend="p2enforcer", timeout=300,
                        env={"P2_CHANNEL_BACKENDS": "gloo,ucc", **impl_env(impl)})
    check(results, impl)
    for result in results:
        assert result["backends"] == {0: ["gloo"], 1: ["ucc"]} and result["ucc_collectives"] > 0
