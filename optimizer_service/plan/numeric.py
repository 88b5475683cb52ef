"""Motifs run on numbers, and the numeric check of an op plan (pure).

:func:`execute` runs a composition of motifs on one vector per rank, so tests
can compare every decomposition with the collective it replaces; parallel
parts run in both orders and must agree, which checks that they are
independent. :func:`wrong_numbers` is the check behind
:meth:`~optimizer_service.plan.op_plan.OpPlan.validate`: the op's motifs run on
a compressed buffer of random integers and are compared with what the op must
compute (the buffer model is in :mod:`optimizer_service.plan.op_plan`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Composition, Motif, Seq, motifs_of, rewrite

if TYPE_CHECKING:
    from optimizer_service.plan.op_plan import OpKey, OpPlan

def execute(plan: Composition, buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Run ``plan`` on numbers: ``buffers[r]`` is rank r's buffer (``(N, D)`` for
    AllToAll, whose result is written to a fresh output). Returns new buffers."""
    state = {r: b.copy() for r, b in buffers.items()}
    outputs = {r: np.full_like(b, np.nan, dtype=float) for r, b in buffers.items()}
    _run(plan, state, outputs)
    if any(m.kind is Collective.ALL_TO_ALL for m in motifs_of(plan)):
        return outputs
    return state



def _run(plan: Composition, state, outputs) -> None:
    if isinstance(plan, Motif):
        _run_motif(plan, state, outputs)
    elif isinstance(plan, Seq):
        for part in plan.parts:
            _run(part, state, outputs)
    else:
        forward = ({r: b.copy() for r, b in state.items()}, {r: b.copy() for r, b in outputs.items()})
        for part in plan.parts:
            _run(part, *forward)
        for part in reversed(plan.parts):
            _run(part, state, outputs)
        for r in state:
            if not (np.array_equal(state[r], forward[0][r], equal_nan=True)
                    and np.array_equal(outputs[r], forward[1][r], equal_nan=True)):
                raise InvalidInputError(f"parallel parts of {plan} depend on each other's order")



def _run_motif(m: Motif, state, outputs) -> None:
    ranks = m.ranks
    if m.kind is Collective.ALL_TO_ALL:
        (lo, hi), = m.ranges
        n = len(ranks)
        for i, src in enumerate(ranks):
            for offset in range(*m.window):
                dst = ranks[(i + offset) % n]
                outputs[dst][i, lo:hi] = state[src][(i + offset) % n, lo:hi]
        return
    if m.kind in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
        for k, (lo, hi) in enumerate(m.ranges):
            if m.kind is Collective.REDUCE_SCATTER:
                state[ranks[k]][lo:hi] = sum(state[r][lo:hi] for r in ranks)
            else:
                value = state[ranks[k]][lo:hi].copy()
                for r in ranks:
                    state[r][lo:hi] = value
        return
    (lo, hi), = m.ranges
    if m.kind is Collective.BROADCAST:
        value = state[ranks[0]][lo:hi].copy()
        for r in ranks[1:]:
            state[r][lo:hi] = value
        return
    total = sum(state[r][lo:hi] for r in ranks)
    targets = ranks if m.kind is Collective.ALL_REDUCE else ranks[:1]
    for r in targets:
        state[r][lo:hi] = total


def buffer_extent(key: OpKey, elements: int) -> tuple[int, int]:
    """``(extent, block)``: the length of the ranges' coordinate space and
    the block length (0 when the buffer has no blocks). For all_to_all the
    coordinates are the ``D`` columns of one block."""
    if elements < 0:
        raise PlanError(f"plan {key}: {elements} elements is not a size")
    if key.kind == "all_to_all":
        if elements % key.size:
            raise PlanError(f"plan {key}: all_to_all of {elements} elements does not split into "
                            f"{key.size} equal blocks")
        return elements // key.size, 0
    if key.kind in ("all_gather", "reduce_scatter"):
        return key.size * elements, elements
    return elements, 0



def _compress(plan: Composition, boundaries: list[int]) -> Composition:
    """``plan`` with every range boundary replaced by its index in ``boundaries``."""
    index = {b: i for i, b in enumerate(boundaries)}
    return rewrite(plan, lambda m: replace(m, ranges=tuple((index[a], index[b]) for a, b in m.ranges)))



def wrong_numbers(op: OpPlan, boundaries: list[int], block: int) -> str | None:
    """Run the compressed plan on random positive integers, one vector per
    member, and compare with what the op must produce (module docstring):
    ``None`` when it does, else one line about the first difference."""
    p, cells, kind = op.key.size, len(boundaries) - 1, op.key.kind
    rng = np.random.default_rng(0)
    if kind == "all_to_all":
        inputs = rng.integers(1, 2 ** 24, (p, p, cells)).astype(float)
        want, care = inputs.transpose(1, 0, 2), np.ones(inputs.shape, dtype=bool)
    else:
        values = rng.integers(1, 2 ** 24, (p, cells)).astype(float)
        owner = np.array([b // block for b in boundaries[:-1]] if block else [0] * cells, dtype=int)
        own = owner[None, :] == np.arange(p)[:, None]          # member k's block k
        inputs, care, want = values, np.ones((p, cells), dtype=bool), values.sum(axis=0)
        if kind == "broadcast":
            want = values[op.key.root]
        elif kind == "all_gather":
            inputs, want = np.where(own, values, np.nan), values[owner, np.arange(cells)]
        elif kind == "reduce_scatter":
            care = own
        want = np.broadcast_to(want, (p, cells))
    result = execute(_compress(op.plan, boundaries), dict(enumerate(inputs)))
    return _first_wrong(op, np.stack([result[k] for k in range(p)]), want, care, boundaries)



def _first_wrong(op: OpPlan, got: np.ndarray, want: np.ndarray, care: np.ndarray,
                 boundaries: list[int]) -> str | None:
    """``None`` when ``got`` equals ``want`` wherever ``care``; else which
    member misses which interval (and, for all_to_all, from which member)."""
    wrong = care & (got != want)          # NaN (never written) differs from every value
    if not wrong.any():
        return None
    member, *source, cell = (int(i) for i in np.argwhere(wrong)[0])
    how = "never receives" if math.isnan(got[(member, *source, cell)]) else "ends with a wrong value in"
    where = f"[{boundaries[cell]}:{boundaries[cell + 1]})"
    what = f"columns {where} from member {source[0]}" if source else f"elements {where}"
    return f"member {member} (rank {op.key.group[member]}) {how} {what}"
