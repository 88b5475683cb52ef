"""Explain one reduction program on a placement: its lowered steps, predicted
times and the device states after each step — or which step is invalid and why.

This is what ``p2 synth --explain "<program>"`` shows. States are those of the
synthesis hierarchy's devices (one reduction group; every other group does the
same thing on its own devices).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import Algorithm, CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.lowering import PlacementMap, active_step
from optimizer_service.p2.placement import ParallelismMatrix, check_axes, enumerate_matrices
from optimizer_service.p2.program import Program, Reduction
from optimizer_service.p2.semantics import (
    DeviceState,
    apply_step,
    final_context,
    initial_context,
    why_invalid,
)
from optimizer_service.plan.lowered import LoweredStep


@dataclass(frozen=True)
class ExplainedStep:
    reduction: Reduction
    lowered: LoweredStep
    predicted_seconds: float
    states_after: tuple[DeviceState, ...]
    changes_state: bool


@dataclass(frozen=True)
class Explanation:
    matrix: ParallelismMatrix
    hierarchy: SynthesisHierarchy
    program: Program
    initial_states: tuple[DeviceState, ...]
    steps: tuple[ExplainedStep, ...]
    error: str | None
    reaches_final: bool
    allreduce_seconds: float

    @property
    def valid(self) -> bool:
        return self.error is None and self.reaches_final

    @property
    def predicted_seconds(self) -> float:
        return sum(step.predicted_seconds for step in self.steps)


def explain_program(topology: Topology, axes: Sequence[int], reduce: Sequence[int], program: Program,
                    nbytes: int, algorithm: Algorithm = Algorithm.RING,
                    matrix: ParallelismMatrix | None = None) -> list[Explanation]:
    """Explain ``program`` on ``matrix``, or on every placement if none is given."""
    reduce_sorted = check_axes(topology.hierarchy, tuple(axes), tuple(reduce))
    if matrix is not None:
        if matrix.hierarchy != topology.hierarchy or matrix.axes != tuple(axes):
            raise InvalidInputError(
                f"matrix {matrix} has column products {list(matrix.hierarchy)} and row products "
                f"{list(matrix.axes)}; it must match the hierarchy {list(topology.hierarchy)} and axes {list(axes)}")
        matrices = [matrix]
    else:
        matrices = list(enumerate_matrices(topology.hierarchy, axes))
    model = CostModel(topology, algorithm)
    return [_explain_one(topology, m, reduce_sorted, program, nbytes, model) for m in matrices]


def _explain_one(topology: Topology, matrix: ParallelismMatrix, reduce: tuple[int, ...], program: Program,
                 nbytes: int, model: CostModel) -> Explanation:
    hierarchy = SynthesisHierarchy.for_reduction(matrix, topology.level_names, reduce)
    k = hierarchy.device_count
    placement = PlacementMap.build(matrix, reduce)
    allreduce = model.flat_allreduce_seconds(placement.reduction_groups, nbytes)
    context = initial_context(k)
    initial = tuple(DeviceState(s) for s in context)
    steps: list[ExplainedStep] = []
    error = None
    for number, reduction in enumerate(program.reductions, start=1):
        try:
            groups = hierarchy.groups_for(reduction)
        except InvalidInputError as exc:
            error = f"step {number} ({reduction}): {exc}"
            break
        after = apply_step(context, reduction.collective, groups)
        if after is None:
            error = f"step {number} ({reduction}) is invalid: {why_invalid(reduction.collective, context, groups)}"
            break
        lowered = placement.lower_step(active_step(reduction.collective, groups, context, k))
        steps.append(ExplainedStep(reduction, lowered, model.lowered_step_seconds(lowered, nbytes),
                                   tuple(DeviceState(s) for s in after), after != context))
        context = after
    return Explanation(matrix, hierarchy, program, initial, tuple(steps), error,
                       error is None and context == final_context(k), allreduce)
