"""Pipeline schedules as values (Zhuang et al., MLSys 2023, §4): what each
pipeline stage computes, in which order.

An :class:`Action` is ``(stage, kind, microbatch)`` with the text form
``"2F0"`` (stage 2, forward, micro-batch 0), as PyTorch's pipelining schedules
write it. Kinds: ``F`` forward; ``B`` the whole backward; ``I`` and ``W`` the
two halves of a backward that backward-weight delaying splits (§4: the
gradient of the activations, which the previous stage waits for, and the
gradient of the weights, which nothing downstream needs).

A :class:`PipelineSchedule` is one action list per stage. Both the planner
(which builds and simulates schedules, :mod:`optimizer_service.resharding`)
and the data plane (which runs one) read this value; its text form
round-trips::

    eager-1f1b stages=2 microbatches=3
    0: 0F0 0F1 0F2 0B0 0B1 0B2
    1: 1F0 1B0 1F1 1B1 1F2 1B2
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from optimizer_service.errors import InvalidInputError


class ActionKind(str, Enum):
    FORWARD = "F"
    BACKWARD = "B"           # input and weight gradients together
    BACKWARD_INPUT = "I"     # gradient of the stage's input (what the previous stage waits for)
    BACKWARD_WEIGHT = "W"    # gradient of the stage's weights (delayable)

    def __str__(self) -> str:
        return self.value


class Action(NamedTuple):
    stage: int
    kind: ActionKind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    def __repr__(self) -> str:
        return str(self)

    @classmethod
    def parse(cls, text: str) -> Action:
        match = re.fullmatch(r"\s*(\d+)([FBIW])(\d+)\s*", text)
        if not match:
            raise InvalidInputError(f"pipeline action {text!r} is not STAGE KIND MICROBATCH like '2F0' "
                                    "(kinds: F, B, I, W)")
        return cls(int(match.group(1)), ActionKind(match.group(2)), int(match.group(3)))


@dataclass(frozen=True)
class PipelineSchedule:
    """One ordered action list per stage; ``name`` says which schedule made it."""

    name: str
    microbatches: int
    stages: tuple[tuple[Action, ...], ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise InvalidInputError("a pipeline schedule needs at least one stage")
        if self.microbatches < 1:
            raise InvalidInputError(f"a pipeline schedule needs at least one micro-batch, got {self.microbatches}")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", self.name):
            raise InvalidInputError(f"pipeline schedule name {self.name!r} must be one word")
        for index, actions in enumerate(self.stages):
            for action in actions:
                if action.stage != index:
                    raise InvalidInputError(f"action {action} is listed under stage {index}")
                if not 0 <= action.microbatch < self.microbatches:
                    raise InvalidInputError(f"action {action}: micro-batch {action.microbatch} is outside "
                                            f"0..{self.microbatches - 1}")

    @property
    def stage_count(self) -> int:
        return len(self.stages)

    def __str__(self) -> str:
        head = f"{self.name} stages={self.stage_count} microbatches={self.microbatches}"
        return "\n".join([head, *(f"{i}: " + " ".join(map(str, actions)) for i, actions in enumerate(self.stages))])

    @classmethod
    def parse(cls, text: str) -> PipelineSchedule:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        head = re.fullmatch(r"(\S+)\s+stages=(\d+)\s+microbatches=(\d+)", lines[0]) if lines else None
        if not head:
            raise InvalidInputError("a pipeline schedule's text starts with 'NAME stages=S microbatches=M'")
        stage_count = int(head.group(2))
        if len(lines) - 1 != stage_count:
            raise InvalidInputError(f"schedule says stages={stage_count} but lists {len(lines) - 1} stage lines")
        stages = []
        for index, line in enumerate(lines[1:]):
            label, _, rest = line.partition(":")
            if label.strip() != str(index):
                raise InvalidInputError(f"stage line {line!r} should start with '{index}:'")
            stages.append(tuple(Action.parse(word) for word in rest.split()))
        return cls(head.group(1), int(head.group(3)), tuple(stages))
