"""Lowering reduction programs to the full system (P² §3.4, Figure 6).

A program synthesized over hierarchy (d) speaks of the ``k`` devices of one
reduction group. Lowering turns it into steps of ``(collective, device groups)``
over global device ids, in three small passes:

1. ``synthesis_steps`` — each reduction's groups in the synthesis hierarchy;
2. ``trace`` — run the Figure 8 semantics to get the state before every step,
   then for each step keep the groups that hold data and note how much data each
   device passes in (``input_fraction`` of the full buffer, from the number of
   chunks the group's root holds). Groups whose devices are all empty — the
   non-roots after a Reduce — are dropped: the semantics say they hold nothing,
   so running the collective would only move stale bytes. (The paper's XLA
   lowering runs them anyway; we don't, which can only make such programs
   cheaper.)
3. ``place`` — repeat each group on every reduction group of the placement:
   with the numbering of :mod:`optimizer_service.p2.placement` a global id is
   ``base + offset``, ``base`` fixed by the non-reduction axes and ``offset``
   by the synthesis device.

**Chunk layout.** Figure 8 says *which* chunks (rows) a device holds, not where
they sit in memory, and valid programs can give a device a non-contiguous set:
after ``root InsideGroup ReduceScatter; node Parallel(root) AllGather`` device 0
holds chunks {0, 2}. An executor therefore tracks the chunk labels of every
device's buffer and, after an AllGather, lays the gathered chunks out in label
order (one local copy); ``tests/support/numeric_oracle.py`` executes programs
that way.

Text form of a step (round-trip): ``"ReduceScatter 1 {0,1,2,3} {4,5,6,7}"`` —
collective, input fraction, groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from optimizer_service.errors import InvalidInputError
from optimizer_service.p2.hierarchy import Groups, SynthesisHierarchy
from optimizer_service.p2.placement import ParallelismMatrix
from optimizer_service.p2.program import Program
from optimizer_service.p2.semantics import Context, execute, rows_of
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.lowered import LoweredProgram, LoweredStep

SynthesisStep = tuple[Collective, Groups]


# ------------------------------------------------------------------ pass 1
def synthesis_steps(hierarchy: SynthesisHierarchy, program: Program) -> list[SynthesisStep]:
    """The groups each reduction derives in the synthesis hierarchy."""
    return [(r.collective, hierarchy.groups_for(r)) for r in program.reductions]


# ------------------------------------------------------------------ pass 2
@dataclass(frozen=True)
class ActiveStep:
    """A synthesis step restricted to the groups that hold data."""

    collective: Collective
    groups: Groups
    input_fraction: Fraction


def active_step(collective: Collective, groups: Groups, before: Context, k: int) -> ActiveStep:
    """Drop groups whose devices are all empty; the input size is the chunks
    the root holds (equal for all members, by the rule premises, except
    Broadcast where receivers take the root's size)."""
    kept = []
    chunks = set()
    for group in groups:
        root_rows = rows_of(before[group[0]])
        if root_rows == 0 and all(rows_of(before[d]) == 0 for d in group):
            continue
        kept.append(group)
        chunks.add(root_rows.bit_count())
    if len(chunks) != 1:
        # Not reachable for programs the synthesizer produces (tested over many
        # hierarchies); a hand-written program could in principle get here.
        raise InvalidInputError(
            f"{collective} step has groups with different data sizes ({sorted(chunks)} chunks); "
            f"such a step cannot be lowered to one collective call per group")
    return ActiveStep(collective, tuple(kept), Fraction(chunks.pop(), k))


def trace(k: int, steps: Sequence[SynthesisStep]) -> list[ActiveStep]:
    """States through the program, and each step's active groups and size."""
    contexts = execute(k, steps)
    return [active_step(c, g, contexts[i], k) for i, (c, g) in enumerate(steps)]


# ------------------------------------------------------------------ pass 3
@dataclass(frozen=True)
class PlacementMap:
    """Where the synthesis devices of every reduction group live globally."""

    offsets: np.ndarray  # (k,)  global offset of synthesis device s
    bases: np.ndarray    # (N/k,) global id of synthesis device 0 of each reduction group

    @classmethod
    def build(cls, matrix: ParallelismMatrix, reduce: Sequence[int]) -> PlacementMap:
        weights = matrix.digit_weights()
        levels = len(matrix.hierarchy)
        reduce_set = set(reduce)
        # Synthesis devices enumerate the reduction digits level by level,
        # outer level first, axis order within a level (most significant first).
        reduction_digits = [(a, j) for j in range(levels) for a in sorted(reduce_set)]
        other_digits = [(a, j) for j in range(levels) for a in range(len(matrix.rows)) if a not in reduce_set]
        return cls(offsets=_mixed_radix_sum(matrix, weights, reduction_digits),
                   bases=np.sort(_mixed_radix_sum(matrix, weights, other_digits)))

    @property
    def reduction_groups(self) -> np.ndarray:
        """(N/k, k): every reduction group's devices, synthesis order."""
        return self.bases[:, None] + self.offsets[None, :]

    def place(self, groups: Groups) -> np.ndarray:
        """(groups × reduction groups, p) global device ids, sorted by first device."""
        pattern = np.asarray(groups, dtype=np.int64)  # (G, p)
        placed = (self.bases[:, None, None] + self.offsets[pattern][None, :, :]).reshape(-1, pattern.shape[1])
        return placed[np.argsort(placed[:, 0], kind="stable")]

    def lower_step(self, step: ActiveStep) -> LoweredStep:
        """``step`` repeated on every reduction group, over global device ids."""
        return LoweredStep(step.collective, tuple(map(tuple, self.place(step.groups).tolist())), step.input_fraction)


def _mixed_radix_sum(matrix: ParallelismMatrix, weights, digits) -> np.ndarray:
    values = np.zeros(1, dtype=np.int64)
    for a, j in digits:
        radix = matrix.rows[a][j]
        if radix == 1:
            continue
        values = (values[:, None] + np.arange(radix, dtype=np.int64)[None, :] * weights[a][j]).reshape(-1)
    return values


def lower_active_steps(active: Sequence[ActiveStep], placement: PlacementMap) -> LoweredProgram:
    """Place every active step on the whole system."""
    return LoweredProgram(tuple(placement.lower_step(step) for step in active))


def lower_program(program: Program, hierarchy: SynthesisHierarchy, matrix: ParallelismMatrix,
                  reduce: Sequence[int]) -> LoweredProgram:
    """All three passes for one program (the planner caches the pieces instead)."""
    steps = synthesis_steps(hierarchy, program)
    return lower_active_steps(trace(hierarchy.device_count, steps), PlacementMap.build(matrix, reduce))


