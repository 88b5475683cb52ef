"""Checking a pipeline schedule (Zhuang et al., MLSys 2023, §4) before anything
runs it: structure first, then a dependency-aware dry run that finds
deadlocks.

It lives in the contract package because both planes check with it: the
planner (:mod:`optimizer_service.resharding`: the schedule generators, the
simulator, ``p2 pipeline``), Syndicate's pipeline DAG (its program order is
the dry run's) and the data plane's pipeline runtime
(:mod:`enforcer.pipeline.check`, which may import only this package) — so a
schedule the planner accepts is one the runtime accepts, with the same
message.

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
is a deadlock; the message names what every waiting stage waits for.

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

    def __reduce__(self) -> tuple[type[ScheduleError], tuple[str, str]]:
        # picklable with its grid (a pipeline rank's error may cross a process boundary)
        return type(self), (str(self), self.grid)


@dataclass(frozen=True)
class ScheduleFacts:
    """What the dry run found: how many unit steps the schedule takes, how
    many of them each stage runs nothing (its bubble in steps), and the order
    it ran the actions in (step by step, stage by stage within a step: a
    topological order of the schedule's dependencies)."""

    steps: int
    idle_steps: tuple[int, ...]
    split_backward: bool       # some backward is split into I and W
    order: tuple[Action, ...] = ()


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
                fail(position, f"stage {stage} runs {action} twice (positions {seen[key]} and {position}); "
                               "each action runs once per iteration", f"{action} again")
            if action.kind is not F and (F, m) not in seen:
                fail(position, f"stage {stage} runs {action} before {Action(stage, F, m)}",
                     f"{Action(stage, F, m)} has not run")
            if action.kind is W and (I, m) not in seen:
                fail(position, f"stage {stage} runs {action} before {Action(stage, I, m)}",
                     f"{Action(stage, I, m)} has not run")
            if action.kind is B and ((I, m) in seen or (W, m) in seen) or \
                    action.kind in (I, W) and (B, m) in seen:
                fail(position, f"stage {stage} mixes a whole backward B with I/W for micro-batch {m}; "
                               "use B, or I then W", "B or I+W, not both")
            seen[key] = position
        end = len(actions)
        fix = f"; every stage runs each of the {schedule.microbatches} micro-batches forward and backward"
        for m in range(schedule.microbatches):
            if (F, m) not in seen:
                fail(end, f"stage {stage} never runs {Action(stage, F, m)}{fix}", f"{Action(stage, F, m)} missing")
            if (B, m) not in seen and (I, m) not in seen:
                fail(end, f"stage {stage} never runs the backward of micro-batch {m} "
                          f"({Action(stage, B, m)} or {Action(stage, I, m)} + {Action(stage, W, m)}){fix}",
                     f"backward of {m} missing")
            if (I, m) in seen and (W, m) not in seen:
                fail(end, f"stage {stage} never runs {Action(stage, W, m)}{fix}", f"{Action(stage, W, m)} missing")


def needs(action: Action, stage_count: int) -> Action | None:
    """The action of another stage ``action`` waits for (its kind ``B`` stands
    for whichever of ``B``/``I`` that stage runs), or None."""
    stage, kind, m = action
    if kind is F and stage > 0:
        return Action(stage - 1, F, m)
    if kind in GRADIENT_KINDS and stage + 1 < stage_count:
        return Action(stage + 1, B, m)
    return None


def _run(schedule: PipelineSchedule) -> tuple[list[list[str]], int, int | None, list[Action]]:
    """Unit-step dry run: the grid of what each stage ran in each step, the
    steps taken, the stage stuck first when it deadlocks (else None), and the
    actions in the order they ran."""
    count = schedule.stage_count
    position = [0] * count
    finished: dict[tuple[int, ActionKind, int], int] = {}     # (stage, F or gradient, m) -> step
    rows: list[list[str]] = [[] for _ in range(count)]
    order: list[Action] = []
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
            return rows, step, stuck, order
        for action in ran:
            position[action.stage] += 1
            if action.kind is not W:
                finished[(action.stage, F if action.kind is F else B, action.microbatch)] = step
            left -= 1
        order += ran
        step += 1
    return rows, step, None, order


def _waits_for(wanted: Action) -> str:
    if wanted.kind is F:
        return str(wanted)
    return f"the backward of micro-batch {wanted.microbatch} on stage {wanted.stage}"


def check_schedule(schedule: PipelineSchedule) -> ScheduleFacts:
    """Check ``schedule`` (module docstring); raise :class:`ScheduleError` with
    the grid, or return what the dry run found."""
    _structure(schedule)
    rows, steps, stuck, order = _run(schedule)
    if stuck is not None:
        # Every stage not finished waits for another's action (a stage whose
        # next action needs nothing would have run): name each wait.
        waiting: dict[int, tuple[Action, Action]] = {}
        for stage, (actions, row) in enumerate(zip(schedule.stages, rows)):
            ran = sum(1 for cell in row if cell not in (".", ""))
            wanted = needs(actions[ran], schedule.stage_count) if ran < len(actions) else None
            if wanted is not None:
                waiting[stage] = (actions[ran], wanted)
        waits = ", ".join(f"{action} waits for {_waits_for(wanted)}" for action, wanted in waiting.values())
        action, wanted = waiting[stuck]
        rows[stuck].append(str(action))
        raise ScheduleError(f"schedule {schedule.name} deadlocks at step {steps}: {waits}; reorder the stages' "
                            "actions so each one's input is produced first",
                            render_grid(rows, (stuck, steps, f"{action} waits for {wanted}")))
    idle = tuple(steps - len(actions) for actions in schedule.stages)
    split = any(a.kind is I for actions in schedule.stages for a in actions)
    return ScheduleFacts(steps, idle, split, tuple(order))
