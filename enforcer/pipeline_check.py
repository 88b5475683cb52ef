"""What the pipeline runtime checks before it builds anything (Zhuang et al., MLSys 2023, §4).

:class:`~enforcer.pipeline.PipelineRuntime` refuses, on every rank alike and
before its first collective, a pipeline it could not run to the end — a
mistake here would otherwise show up as ranks waiting forever for a tensor
nobody sends. Each check raises :class:`InvalidInputError` with one line.

* **Schedule**: per stage and micro-batch one ``F``, and one whole backward
  ``B`` or one ``I`` and one ``W`` (backward weight delaying); ``F`` before the
  backward, ``I`` before ``W``. Then a dry run in unit steps, as the planner's
  validator does (:mod:`optimizer_service.resharding.pipeline_validate`, which
  the enforcer may not import): in each step every stage runs its next action
  if what it needs from another stage ran in an earlier step (``F(s, m)`` needs
  ``F(s-1, m)``; ``B``/``I`` of ``(s, m)`` needs the backward of ``(s+1, m)``);
  a step where no stage can run is a deadlock.
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
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.plan.resharding import ReshardProgram

F, B, IN, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


def check_structure(schedule: PipelineSchedule) -> None:
    """Every stage runs every micro-batch's forward once and its backward once, in a possible order."""
    for stage, actions in enumerate(schedule.stages):
        seen: set[tuple[ActionKind, int]] = set()
        for action in actions:
            kind, m = action.kind, action.microbatch
            where = f"schedule {schedule.name}: stage {stage}"
            if (kind, m) in seen:
                raise InvalidInputError(f"{where} runs {action} twice; each action runs once per iteration")
            if kind is not F and (F, m) not in seen:
                raise InvalidInputError(f"{where} runs {action} before {Action(stage, F, m)}")
            if kind is W and (IN, m) not in seen:
                raise InvalidInputError(f"{where} runs {action} before {Action(stage, IN, m)}")
            if kind is B and ((IN, m) in seen or (W, m) in seen) or kind in (IN, W) and (B, m) in seen:
                raise InvalidInputError(f"{where} mixes B with I/W for micro-batch {m}; use B, or I then W")
            seen.add((kind, m))
        for m in range(schedule.microbatches):
            missing = [Action(stage, F, m)] if (F, m) not in seen else []
            if (B, m) not in seen and (IN, m) not in seen:
                missing.append(Action(stage, B, m))
            if (IN, m) in seen and (W, m) not in seen:
                missing.append(Action(stage, W, m))
            if missing:
                raise InvalidInputError(f"schedule {schedule.name}: stage {stage} never runs {missing[0]}; every "
                                        f"stage runs each of the {schedule.microbatches} micro-batches forward "
                                        "and backward")


def _needs(action: Action, stages: int) -> tuple[int, str, int] | None:
    """What ``action`` waits for from another stage: ``(stage, "F" or "B", micro-batch)``."""
    if action.kind is F and action.stage > 0:
        return action.stage - 1, "F", action.microbatch
    if action.kind in (B, IN) and action.stage + 1 < stages:
        return action.stage + 1, "B", action.microbatch
    return None


def check_deadlock(schedule: PipelineSchedule) -> int:
    """Dry-run ``schedule`` in unit steps; return the steps it takes or raise on a deadlock."""
    stages = schedule.stage_count
    position = [0] * stages
    done: dict[tuple[int, str, int], int] = {}
    left, step = sum(len(actions) for actions in schedule.stages), 0
    while left:
        ran = []
        for stage, actions in enumerate(schedule.stages):
            if position[stage] < len(actions):
                action = actions[position[stage]]
                wanted = _needs(action, stages)
                if wanted is None or done.get(wanted, step) < step:
                    ran.append(action)
        if not ran:
            stuck = [schedule.stages[s][position[s]] for s in range(stages) if position[s] < len(schedule.stages[s])]
            waits = ", ".join(f"{a} waits for {_name(_needs(a, stages))}" for a in stuck)
            raise InvalidInputError(f"schedule {schedule.name} deadlocks after {step} steps: {waits}; reorder "
                                    "the stages' actions so each one's input is produced first")
        for action in ran:
            position[action.stage] += 1
            if action.kind is not W:
                done[(action.stage, "F" if action.kind is F else "B", action.microbatch)] = step
            left -= 1
        step += 1
    return step


def _name(wanted: tuple[int, str, int] | None) -> str:
    stage, kind, m = wanted if wanted is not None else (-1, "?", -1)
    return f"{stage}F{m}" if kind == "F" else f"the backward of micro-batch {m} on stage {stage}"


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
    """All of the above; returns the schedule's unit steps."""
    check_structure(schedule)
    steps = check_deadlock(schedule)
    check_meshes(meshes, schedule.stage_count, world)
    check_programs(meshes, forward, backward)
    return steps
