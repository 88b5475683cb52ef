"""What the pipeline runtime checks before it builds anything (Zhuang et al., MLSys 2023, §4).

:class:`~enforcer.pipeline.runtime.PipelineRuntime` refuses, on every rank alike and
before its first collective, a pipeline it could not run to the end — a
mistake here would otherwise show up as ranks waiting forever for a tensor
nobody sends. Each check raises :class:`InvalidInputError` with one line.

* **Schedule**: the planner's own validator,
  :func:`optimizer_service.plan.pipeline_validate.check_schedule` (in the
  contract package, so both planes accept the same schedules with the same
  messages): per stage and micro-batch one ``F``, and one whole backward
  ``B`` or one ``I`` and one ``W`` (backward weight delaying); ``F`` before the
  backward, ``I`` before ``W``. Then a dry run in unit steps: in each step
  every stage runs its next action if what it needs from another stage ran in
  an earlier step (``F(s, m)`` needs ``F(s-1, m)``; ``B``/``I`` of ``(s, m)``
  needs the backward of ``(s+1, m)``); a step where no stage can run is a
  deadlock. Its :class:`~optimizer_service.plan.pipeline_validate.ScheduleError`
  is an :class:`InvalidInputError` whose message is one line (the stage ×
  step grid rides along in ``grid``).
* **Meshes**: one per stage, non-empty, disjoint, ranks inside the world.
* **Boundary programs**: ``S-1`` forward and ``S-1`` backward programs; the
  forward program of boundary ``s`` moves the activation from the ranks of
  mesh ``s`` to those of mesh ``s+1``, the backward one its gradient back:
  same global shape, the backward's source boxes are the forward's
  destination boxes and its destination boxes the forward's source boxes (a
  gradient is laid out as the tensor it belongs to).
"""

from __future__ import annotations

from collections.abc import Sequence

from optimizer_service.plan import InvalidInputError
from optimizer_service.plan.pipeline import PipelineSchedule
from optimizer_service.plan.pipeline_validate import check_schedule
from optimizer_service.plan.resharding import ReshardProgram


def check_meshes(meshes: Sequence[Sequence[int]], stages: int, world: int) -> None:
    """One non-empty mesh per stage, disjoint, inside the world."""
    if len(meshes) != stages:
        raise InvalidInputError(f"the schedule has {stages} stages but {len(meshes)} stage meshes were given; "
                                "give one mesh (list of global ranks) per stage")
    owner: dict[int, int] = {}
    for stage, mesh in enumerate(meshes):
        if not mesh:
            raise InvalidInputError(f"stage {stage}'s mesh is empty; every stage needs at least one rank")
        for rank in mesh:
            if not 0 <= rank < world:
                raise InvalidInputError(f"stage {stage}'s mesh names rank {rank}, outside the world of {world} ranks")
            if rank in owner:
                raise InvalidInputError(f"rank {rank} is in the meshes of stages {owner[rank]} and {stage}; "
                                        "stage meshes must be disjoint")
            owner[rank] = stage


def check_programs(meshes: Sequence[Sequence[int]], forward: Sequence[ReshardProgram],
                   backward: Sequence[ReshardProgram]) -> None:
    """The boundary programs match the meshes and each other (module docstring)."""
    boundaries = len(meshes) - 1
    for what, programs in (("forward", forward), ("backward", backward)):
        if len(programs) != boundaries:
            raise InvalidInputError(f"{len(meshes)} stages have {boundaries} boundaries, but {len(programs)} "
                                    f"{what} resharding programs were given; give one per boundary")
    for s, (ahead, back) in enumerate(zip(forward, backward)):
        for what, program, src, dst in (("forward", ahead, s, s + 1), ("backward", back, s + 1, s)):
            for role, boxes, stage in (("source", program.sources, src), ("destination", program.destinations, dst)):
                if set(boxes) != set(meshes[stage]):
                    raise InvalidInputError(f"boundary {s}'s {what} program has {role} ranks {sorted(boxes)}, but "
                                            f"stage {stage}'s mesh is {sorted(meshes[stage])}; plan it from mesh "
                                            f"{src} to mesh {dst}")
        if tuple(back.shape) != tuple(ahead.shape):
            raise InvalidInputError(f"boundary {s}: the backward program moves a {tuple(back.shape)} tensor, the "
                                    f"forward one a {tuple(ahead.shape)} activation; the gradient has its shape")
        for rank, box in ahead.destinations.items():
            if back.sources[rank] != box:
                raise InvalidInputError(f"boundary {s}: rank {rank} receives [{box}] of the activation but sends "
                                        f"[{back.sources[rank]}] of its gradient; plan the backward program with "
                                        "the specs reversed")
        for rank, box in ahead.sources.items():
            if back.destinations[rank] != box:
                raise InvalidInputError(f"boundary {s}: rank {rank} sends [{box}] of the activation but receives "
                                        f"[{back.destinations[rank]}] of its gradient; plan the backward program "
                                        "with the specs reversed")


def check_pipeline(schedule: PipelineSchedule, meshes: Sequence[Sequence[int]], forward: Sequence[ReshardProgram],
                   backward: Sequence[ReshardProgram], world: int) -> int:
    """All of the above; returns the schedule's unit steps (its dry run's)."""
    steps = check_schedule(schedule).steps
    check_meshes(meshes, schedule.stage_count, world)
    check_programs(meshes, forward, backward)
    return steps
