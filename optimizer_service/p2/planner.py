"""The planner facade: (topology, axes, reduction) → ranked placements and programs.

For every parallelism matrix (P² §3.1) it builds the synthesis hierarchy
(§3.4), synthesizes every valid program (§3.5), lowers each to the full system
(Figure 6) and predicts its time with the simulator (§5), next to the flat
AllReduce over the same reduction groups. Work that does not depend on the
placement is shared: programs and their traces depend only on the synthesis
hierarchy's shape, and a step's predicted time only on its groups and size.

Bounds (:class:`Limits`) are checked before work starts, so an oversized
request fails at once with one line saying which bound and how to raise it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from optimizer_service.errors import InvalidInputError, SearchBoundError
from optimizer_service.hardware.cost_model import Algorithm, CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.lowering import ActiveStep, PlacementMap, active_step
from optimizer_service.p2.placement import ParallelismMatrix, check_axes, count_matrices, enumerate_matrices
from optimizer_service.p2.program import Program
from optimizer_service.p2.semantics import apply_step, initial_context
from optimizer_service.p2.synthesis import (
    DEFAULT_MAX_SIZE,
    DEFAULT_MAX_STATES,
    SynthesisCache,
    SynthesisResult,
)
from optimizer_service.plan.collective import P2_COLLECTIVES
from optimizer_service.plan.lowered import LoweredProgram, LoweredStep

#: Default per-device input: large enough that bandwidth dominates, as in the paper's runs.
DEFAULT_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Limits:
    """Bounds on one request; the CLI fills them from ``P2_*`` settings."""

    max_devices: int = 65_536
    max_placements: int = 10_000
    max_synthesis_devices: int = 4_096
    max_program_size: int = 8
    max_states: int = DEFAULT_MAX_STATES


def speedup(reference_seconds: float, seconds: float) -> float:
    """How many times faster ``seconds`` is than ``reference_seconds`` (1.0 for a zero time)."""
    return reference_seconds / seconds if seconds > 0 else 1.0


@dataclass(frozen=True)
class RankedProgram:
    program: Program
    lowered: LoweredProgram
    predicted_seconds: float
    step_seconds: tuple[float, ...]


@dataclass(frozen=True)
class PlacementReport:
    matrix: ParallelismMatrix
    hierarchy: SynthesisHierarchy
    allreduce_seconds: float
    programs: tuple[RankedProgram, ...]  # fastest first; ties keep enumeration order

    @property
    def best(self) -> RankedProgram | None:
        return self.programs[0] if self.programs else None

    @property
    def speedup(self) -> float:
        """Flat AllReduce time over the best program's (1.0 if nothing to reduce)."""
        return speedup(self.allreduce_seconds, self.best.predicted_seconds) if self.best else 1.0


@dataclass(frozen=True)
class SynthesisReport:
    topology: Topology
    axes: tuple[int, ...]
    reduce: tuple[int, ...]
    nbytes: int
    algorithm: Algorithm
    max_size: int
    placements: tuple[PlacementReport, ...]
    synthesis_seconds: float
    simulation_seconds: float

    @property
    def best(self) -> tuple[PlacementReport, RankedProgram] | None:
        candidates = [(p.best.predicted_seconds, i) for i, p in enumerate(self.placements) if p.best]
        if not candidates:
            return None
        _, index = min(candidates)
        placement = self.placements[index]
        assert placement.best is not None
        return placement, placement.best


@dataclass
class _ShapePlan:
    """Placement-independent work for one synthesis-hierarchy shape."""

    result: SynthesisResult
    active: list[list[tuple[tuple, ActiveStep]]] = field(default_factory=list)


def _trace_shape(result: SynthesisResult) -> _ShapePlan:
    """Active steps of every program, sharing the semantics of common prefixes."""
    k = result.hierarchy.device_count
    contexts = {(): initial_context(k)}
    by_prefix: dict[tuple, tuple[tuple, ActiveStep]] = {}  # last step of each program prefix
    interned: dict[tuple, tuple[tuple, ActiveStep]] = {}
    plan = _ShapePlan(result)
    for sequence in result.sequences:
        for depth, (i, c) in enumerate(sequence):
            prefix = sequence[:depth + 1]
            if prefix in by_prefix:
                continue
            before = contexts[sequence[:depth]]
            collective = P2_COLLECTIVES[c]
            groups = result.instructions[i].groups
            step = active_step(collective, groups, before, k)
            kept = tuple(groups.index(g) for g in step.groups) if len(step.groups) != len(groups) else None
            key = (i, c, kept, step.input_fraction)
            by_prefix[prefix] = interned.setdefault(key, (key, step))
            after = apply_step(before, collective, groups)
            assert after is not None, "synthesized programs are valid"
            contexts[prefix] = after
        plan.active.append([by_prefix[sequence[:depth + 1]] for depth in range(len(sequence))])
    return plan


class Planner:
    """Synthesizes and ranks placements and programs; reusable across requests."""

    def __init__(self, limits: Limits | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.limits = limits or Limits()
        self._clock = clock
        self._cache = SynthesisCache()
        self._shapes: dict[tuple[tuple[int, ...], int], _ShapePlan] = {}

    def check(self, topology: Topology, axes: Sequence[int], reduce: Sequence[int], max_size: int) -> tuple[int, ...]:
        """Validate a request and its size against the limits; return sorted reduce axes."""
        limits = self.limits
        if topology.device_count > limits.max_devices:
            raise SearchBoundError(
                f"topology {topology.name!r} has {topology.device_count} devices, more than the bound of "
                f"{limits.max_devices}; raise P2_MAX_DEVICES")
        reduce_sorted = check_axes(topology.hierarchy, tuple(axes), tuple(reduce))
        if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
            raise InvalidInputError(f"program size limit {max_size!r} must be a whole number >= 1")
        if max_size > limits.max_program_size:
            raise SearchBoundError(
                f"program size limit {max_size} exceeds the bound of {limits.max_program_size} "
                f"(the search grows exponentially with it); raise P2_MAX_PROGRAM_SIZE")
        placements = count_matrices(topology.hierarchy, axes)
        if placements > limits.max_placements:
            raise SearchBoundError(
                f"axes {list(axes)} on hierarchy {list(topology.hierarchy)} have {placements} parallelism "
                f"matrices, more than the bound of {limits.max_placements}; raise P2_MAX_PLACEMENTS")
        k = math.prod(axes[a] for a in reduce_sorted)
        if k > limits.max_synthesis_devices:
            raise SearchBoundError(
                f"the reduction group has {k} devices, more than the synthesis bound of "
                f"{limits.max_synthesis_devices}; raise P2_MAX_SYNTHESIS_DEVICES")
        return reduce_sorted

    def synthesize(self, topology: Topology, axes: Sequence[int], reduce: Sequence[int],
                   nbytes: int = DEFAULT_BYTES, algorithm: Algorithm = Algorithm.RING,
                   max_size: int = DEFAULT_MAX_SIZE,
                   progress: Callable[[int, int], None] | None = None) -> SynthesisReport:
        """Every placement with every valid program, ranked by predicted time."""
        axes = tuple(axes)
        reduce_sorted = self.check(topology, axes, reduce, max_size)
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
            raise InvalidInputError(f"bytes per device {nbytes!r} must be a whole number >= 1")
        model = CostModel(topology, algorithm)
        matrices = list(enumerate_matrices(topology.hierarchy, axes))
        synth_time = sim_time = 0.0
        reports = []
        for done, matrix in enumerate(matrices, start=1):
            start = self._clock()
            hierarchy = SynthesisHierarchy.for_reduction(matrix, topology.level_names, reduce_sorted)
            shape = self._shape(hierarchy, max_size)
            placement = PlacementMap.build(matrix, reduce_sorted)
            middle = self._clock()
            report = self._rank(matrix, hierarchy, shape, placement, model, nbytes)
            end = self._clock()
            synth_time += middle - start
            sim_time += end - middle
            reports.append(report)
            if progress is not None:
                progress(done, len(matrices))
        return SynthesisReport(topology, axes, reduce_sorted, nbytes, algorithm, max_size, tuple(reports),
                               synth_time, sim_time)

    def _shape(self, hierarchy: SynthesisHierarchy, max_size: int) -> _ShapePlan:
        key = (hierarchy.cardinalities, max_size)
        if key not in self._shapes:
            result = self._cache.synthesize(hierarchy, max_size, self.limits.max_states)
            self._shapes[key] = _trace_shape(result)
        shape = self._shapes[key]
        if shape.result.hierarchy != hierarchy:  # same shape, other level names
            shape = _ShapePlan(SynthesisResult(hierarchy, shape.result.instructions, shape.result.sequences,
                                               shape.result.max_size, shape.result.states_explored), shape.active)
        return shape

    def _rank(self, matrix: ParallelismMatrix, hierarchy: SynthesisHierarchy, shape: _ShapePlan,
              placement: PlacementMap, model: CostModel, nbytes: int) -> PlacementReport:
        allreduce = model.flat_allreduce_seconds(placement.reduction_groups, nbytes)
        lowered_steps: dict[tuple, tuple[LoweredStep, float]] = {}
        ranked = []
        for index, steps in enumerate(shape.active):
            lowered, seconds = [], []
            for key, step in steps:
                if key not in lowered_steps:
                    lowered_step = placement.lower_step(step)
                    lowered_steps[key] = (lowered_step, model.lowered_step_seconds(lowered_step, nbytes))
                lowered_step, cost = lowered_steps[key]
                lowered.append(lowered_step)
                seconds.append(cost)
            ranked.append((sum(seconds), index, RankedProgram(shape.result.program(index),
                                                              LoweredProgram(tuple(lowered)),
                                                              sum(seconds), tuple(seconds))))
        ranked.sort(key=lambda item: (item[0], item[1]))
        return PlacementReport(matrix, hierarchy, allreduce, tuple(item[2] for item in ranked))


def synthesize_placements(topology: Topology, axes: Sequence[int], reduce: Sequence[int],
                          nbytes: int = DEFAULT_BYTES, algorithm: Algorithm = Algorithm.RING,
                          max_size: int = DEFAULT_MAX_SIZE, limits: Limits | None = None,
                          progress: Callable[[int, int], None] | None = None) -> SynthesisReport:
    """One-shot form of :meth:`Planner.synthesize` (fresh caches)."""
    return Planner(limits).synthesize(topology, axes, reduce, nbytes, algorithm, max_size, progress)
