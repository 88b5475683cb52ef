"""How well the simulator predicts measured times (P² §6.3's top-k accuracy).

Candidates are grouped by placement: for one placement the choice is which
program to run (the flat AllReduce is one of the candidates). Over all
measured candidates:

* ``mape`` — mean of ``|predicted − measured| / measured``;
* ``spearman`` — rank correlation of predicted and measured times (ties get
  their average rank);
* ``top1`` / ``top5`` — the fraction of placements (with at least two
  candidates) whose measured fastest candidate is among the simulator's top 1 /
  top 5 for that placement. Candidates the simulator predicts exactly as fast
  as the k-th best are in its top k: a tie is not a choice the simulator made.
  ``top1_tolerant`` / ``top5_tolerant`` count a placement as agreeing when a
  top-k candidate is measured within ``tolerance`` of the fastest, i.e. the
  simulator's pick loses nothing measurable.

P² reports 52 % top-1 and 92 % top-10 for its simulator on GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Candidate:
    placement: int
    predicted_seconds: float
    measured_seconds: float


@dataclass(frozen=True)
class Accuracy:
    mape: float
    spearman: float
    top1: float
    top5: float
    top1_tolerant: float
    top5_tolerant: float
    tolerance: float
    candidates: int
    placements: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties averaged."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="stable")
    ranked = np.empty(len(values))
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (0 when either side is constant)."""
    if len(x) < 2:
        return 0.0
    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return 0.0
    return float(np.corrcoef(rx, ry)[0, 1])


def in_top(predicted: Sequence[float], k: int) -> np.ndarray:
    """Which candidates the simulator ranks in its top ``k`` (ties at the k-th included)."""
    predicted = np.asarray(predicted, dtype=float)
    cutoff = np.sort(predicted)[min(k, len(predicted)) - 1]
    return predicted <= cutoff * (1 + 1e-9)


def evaluate(candidates: Sequence[Candidate], tolerance: float = 0.05) -> Accuracy:
    if not candidates:
        return Accuracy(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, tolerance, 0, 0)
    predicted = np.array([c.predicted_seconds for c in candidates])
    measured = np.array([c.measured_seconds for c in candidates])
    mape = float(np.mean(np.abs(predicted - measured) / measured))
    hits = {1: [], 5: []}
    tolerant = {1: [], 5: []}
    placements = sorted({c.placement for c in candidates})
    for placement in placements:
        mine = [c for c in candidates if c.placement == placement]
        if len(mine) < 2:
            continue
        pred = np.array([c.predicted_seconds for c in mine])
        meas = np.array([c.measured_seconds for c in mine])
        best = int(np.argmin(meas))
        for k in (1, 5):
            top = in_top(pred, k)
            hits[k].append(bool(top[best]))
            tolerant[k].append(bool((meas[top] <= meas[best] * (1 + tolerance)).any()))

    def fraction(values: list[bool]) -> float:
        return float(np.mean(values)) if values else 1.0

    return Accuracy(mape=mape, spearman=spearman(predicted, measured),
                    top1=fraction(hits[1]), top5=fraction(hits[5]),
                    top1_tolerant=fraction(tolerant[1]), top5_tolerant=fraction(tolerant[5]),
                    tolerance=tolerance, candidates=len(candidates), placements=len(hits[1]))
