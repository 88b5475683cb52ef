"""Checking a pipeline schedule (Zhuang et al., MLSys 2023, §4) before anything
runs it: structure first, then a dependency-aware dry run that finds
deadlocks.

Structure, per stage and micro-batch: exactly one forward ``F``, and either
one whole backward ``B`` or one input-gradient ``I`` and one weight-gradient
``W`` (backward weight delaying, §4); ``F`` before the backward, ``I`` before
``W``; every action listed under its own stage (the value
:class:`~optimizer_service.plan.pipeline.PipelineSchedule` checks that).

Dependencies across stages (the model is a chain; skip edges of a U-shaped
model add nothing, since stage ``i``'s output reaches stage ``S-1-i`` through
the chain too): ``F`` of micro-batch ``m`` on stage ``s`` needs ``F`` of ``m``
on stage ``s-1``; the backward (``B`` or ``I``) of ``m`` on stage ``s`` needs
the backward of ``m`` on stage ``s+1``. The dry run advances in unit steps:
in each step every stage runs its next action if what it needs ran in an
earlier step. A step in which no stage can run while some still have actions
is a deadlock.

A failure raises :class:`ScheduleError`: its message is one line naming the
action, and its ``grid`` renders the stage × step grid (for structural errors
the stage's list) with ``<-- ERROR HERE`` at the failing action, as PyTorch's
pipelining schedules do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT
#: Kinds whose end releases the previous stage's backward (what it sends upstream).
GRADIENT_KINDS = (B, I)


class ScheduleError(InvalidInputError):
    """An invalid schedule: one line in the message, the grid in ``grid``."""

    def __init__(self, message: str, grid: str) -> None:
        super().__init__(message)
        self.grid = grid

    def explain(self) -> str:
        """The message and the grid below it."""
        return f"{self}\n{self.grid}"


@dataclass(frozen=True)
class ScheduleFacts:
    """What the dry run found: how many unit steps the schedule takes, and how
    many of them each stage runs nothing (its bubble in steps)."""

    steps: int
    idle_steps: tuple[int, ...]
    split_backward: bool       # some backward is split into I and W


def render_grid(rows: Sequence[Sequence[str]], error: tuple[int, int, str] | None = None,
                header: str = "step") -> str:
    """``rows[stage][column]`` as a table; ``error = (stage, column, note)``
    puts ``<-- ERROR HERE`` after that cell (the cell may be one past the
    row's end: the action that could not run)."""
    columns = max((len(r) for r in rows), default=0)
    if error is not None:
        columns = max(columns, error[1] + 1)
    width = max([4] + [len(cell) for row in rows for cell in row])
    lines = [f"{header:<8}" + " ".join(f"{c:<{width}}" for c in range(columns)).rstrip()]
    for stage, row in enumerate(rows):
        cells = list(row)
        if error is not None and error[0] == stage:
            cells = cells[:error[1] + 1]
            line = f"stage {stage:<2}" + " ".join(f"{c:<{width}}" for c in cells)
            lines.append(f"{line} <-- ERROR HERE ({error[2]})")
        else:
            lines.append((f"stage {stage:<2}" + " ".join(f"{c:<{width}}" for c in cells)).rstrip())
    return "\n".join(lines)


def _listing(schedule: PipelineSchedule) -> list[list[str]]:
    return [[str(a) for a in actions] for actions in schedule.stages]


def _structure(schedule: PipelineSchedule) -> None:
    for stage, actions in enumerate(schedule.stages):
        seen: dict[tuple[ActionKind, int], int] = {}

        def fail(position: int, message: str, note: str, stage: int = stage) -> None:
            raise ScheduleError(f"schedule {schedule.name}: {message}",
                                render_grid(_listing(schedule), (stage, position, note), header="position"))

        for position, action in enumerate(actions):
            key = (action.kind, action.microbatch)
            m = action.microbatch
            if key in seen:
                fail(position, f"stage {stage} runs {action} twice (positions {seen[key]} and {position})",
                     f"{action} again")
            if action.kind is not F and (F, m) not in seen:
                fail(position, f"stage {stage} runs {action} before {Action(stage, F, m)}",
                     f"{Action(stage, F, m)} has not run")
            if action.kind is W and (I, m) not in seen:
                fail(position, f"stage {stage} runs {action} before {Action(stage, I, m)}",
                     f"{Action(stage, I, m)} has not run")
            if action.kind is B and ((I, m) in seen or (W, m) in seen) or \
                    action.kind in (I, W) and (B, m) in seen:
                fail(position, f"stage {stage} mixes a whole backward B with I/W for micro-batch {m}",
                     "B or I+W, not both")
            seen[key] = position
        end = len(actions)
        for m in range(schedule.microbatches):
            if (F, m) not in seen:
                fail(end, f"stage {stage} never runs {Action(stage, F, m)}", f"{Action(stage, F, m)} missing")
            if (B, m) not in seen and (I, m) not in seen:
                fail(end, f"stage {stage} never runs the backward of micro-batch {m} "
                          f"({Action(stage, B, m)} or {Action(stage, I, m)} + {Action(stage, W, m)})",
                     f"backward of {m} missing")
            if (I, m) in seen and (W, m) not in seen:
                fail(end, f"stage {stage} never runs {Action(stage, W, m)}", f"{Action(stage, W, m)} missing")


def needs(action: Action, stage_count: int) -> Action | None:
    """The action of another stage ``action`` waits for (its kind ``B`` stands
    for whichever of ``B``/``I`` that stage runs), or None."""
    stage, kind, m = action
    if kind is F and stage > 0:
        return Action(stage - 1, F, m)
    if kind in GRADIENT_KINDS and stage + 1 < stage_count:
        return Action(stage + 1, B, m)
    return None


def dry_run(schedule: PipelineSchedule) -> tuple[list[list[str]], int, int | None]:
    """Unit-step dry run: the grid of what each stage ran in each step, the
    steps taken, and the stage stuck first when it deadlocks (else None)."""
    count = schedule.stage_count
    position = [0] * count
    finished: dict[tuple[int, ActionKind, int], int] = {}     # (stage, F or gradient, m) -> step
    rows: list[list[str]] = [[] for _ in range(count)]
    step, left = 0, sum(len(a) for a in schedule.stages)
    while left:
        ran = []
        for stage, actions in enumerate(schedule.stages):
            if position[stage] == len(actions):
                rows[stage].append("")
                continue
            action = actions[position[stage]]
            wanted = needs(action, count)
            key = None if wanted is None else (wanted.stage, F if wanted.kind is F else B, wanted.microbatch)
            if key is None or finished.get(key, step) < step:
                ran.append(action)
                rows[stage].append(str(action))
            else:
                rows[stage].append(".")
        if not ran:
            stuck = next(s for s in range(count) if position[s] < len(schedule.stages[s]))
            for row in rows:
                row.pop()
            return rows, step, stuck
        for action in ran:
            position[action.stage] += 1
            if action.kind is not W:
                finished[(action.stage, F if action.kind is F else B, action.microbatch)] = step
            left -= 1
        step += 1
    return rows, step, None


def check_schedule(schedule: PipelineSchedule) -> ScheduleFacts:
    """Check ``schedule`` (module docstring); raise :class:`ScheduleError` with
    the grid, or return what the dry run found."""
    _structure(schedule)
    rows, steps, stuck = dry_run(schedule)
    if stuck is not None:
        action = schedule.stages[stuck][sum(1 for c in rows[stuck] if c not in (".", ""))]
        wanted = needs(action, schedule.stage_count)
        assert wanted is not None
        theirs = schedule.stages[wanted.stage]
        ran = sum(1 for c in rows[wanted.stage] if c not in (".", ""))
        blocker = f"stage {wanted.stage} waits at {theirs[ran]}" if ran < len(theirs) else \
            f"stage {wanted.stage} has finished"
        rows[stuck].append(str(action))
        what = f"{wanted}" if wanted.kind is F else f"the backward of micro-batch {wanted.microbatch} on " \
                                                    f"stage {wanted.stage}"
        raise ScheduleError(f"schedule {schedule.name} deadlocks at step {steps}: {action} waits for {what}, "
                            f"which never comes ({blocker})",
                            render_grid(rows, (stuck, steps, f"{action} waits for {wanted}")))
    idle = tuple(steps - len(actions) for actions in schedule.stages)
    split = any(a.kind is I for actions in schedule.stages for a in actions)
    return ScheduleFacts(steps, idle, split)
