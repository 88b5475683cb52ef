"""What one pipeline iteration did on one rank, as values (Zhuang et al., MLSys 2023, §4, §5.3.2).

Times are seconds from the iteration's start on this rank (after the optional
barrier that lines the ranks up), so they compare with the planner's
simulator (:mod:`optimizer_service.resharding.pipeline_sim`), whose timelines
start at 0 too.

* :class:`ActionTime` — one action of the schedule: ``"1F3 0.0125..0.019"``,
  from when its input was there (the training thread waited for it before) to
  when its compute ended and its output was handed to a communication thread
  — the simulator's action span;
* :class:`TransferTime` — one cross-mesh resharding this rank took part in,
  on its communication thread: ``"send F 1>2 m3 0.019..0.031"`` (the
  activation of micro-batch 3 leaving stage 1 for stage 2; ``B`` is a
  gradient, going from the higher stage to the lower);
* :class:`IterationRecord` — the rank, its stage, the iteration's seconds
  (until its last action, gradient all-reduce and outgoing transfer ended), the
  actions and transfers, and the last stage's per-micro-batch losses. The text
  form is a head line and one line per action and transfer; it round-trips.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from optimizer_service.plan import InvalidInputError
from optimizer_service.plan.pipeline import Action


def _span(text: str, what: str) -> tuple[float, float]:
    start, _, end = text.partition("..")
    try:
        return float(start), float(end)
    except ValueError:
        raise InvalidInputError(f"{what} time span {text!r} is not START..END in seconds") from None


class _Span:
    """``seconds`` of a record with ``start`` and ``end``."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class ActionTime(_Span):
    action: Action
    start: float
    end: float

    def __str__(self) -> str:
        return f"{self.action} {self.start!r}..{self.end!r}"

    @classmethod
    def parse(cls, text: str) -> ActionTime:
        parts = text.split()
        if len(parts) != 2:
            raise InvalidInputError(f"action time {text!r} is not like '1F3 0.01..0.02'")
        return cls(Action.parse(parts[0]), *_span(parts[1], "action"))


@dataclass(frozen=True)
class TransferTime(_Span):
    role: str            # "send" or "recv"
    kind: str            # "F" (activation) or "B" (its gradient)
    from_stage: int
    to_stage: int
    microbatch: int
    start: float
    end: float

    def __str__(self) -> str:
        return (f"{self.role} {self.kind} {self.from_stage}>{self.to_stage} m{self.microbatch} "
                f"{self.start!r}..{self.end!r}")

    @classmethod
    def parse(cls, text: str) -> TransferTime:
        match = re.fullmatch(r"\s*(send|recv) ([FB]) (\d+)>(\d+) m(\d+) (\S+)\s*", text)
        if not match:
            raise InvalidInputError(f"transfer time {text!r} is not like 'send F 1>2 m3 0.01..0.02'")
        return cls(match.group(1), match.group(2), int(match.group(3)), int(match.group(4)), int(match.group(5)),
                   *_span(match.group(6), "transfer"))


@dataclass(frozen=True)
class IterationRecord:
    rank: int
    stage: int | None                     # None: a rank in no stage's mesh
    seconds: float
    actions: tuple[ActionTime, ...] = ()
    transfers: tuple[TransferTime, ...] = ()
    losses: tuple[float, ...] = ()        # the last stage: each micro-batch's loss on this rank

    @property
    def busy_seconds(self) -> float:
        """Seconds this rank's training thread computed (the sum of its actions)."""
        return sum(a.seconds for a in self.actions)

    @property
    def loss(self) -> float:
        return sum(self.losses)

    def __str__(self) -> str:
        stage = "-" if self.stage is None else str(self.stage)
        losses = ",".join(repr(v) for v in self.losses)
        lines = [f"pipeline-iteration rank={self.rank} stage={stage} seconds={self.seconds!r} losses={losses}"]
        lines += [f"action {a}" for a in self.actions]
        lines += [f"transfer {t}" for t in self.transfers]
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str) -> IterationRecord:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        head = re.fullmatch(r"pipeline-iteration rank=(\d+) stage=(\d+|-) seconds=(\S+) losses=(\S*)",
                            lines[0]) if lines else None
        if not head:
            raise InvalidInputError("a pipeline iteration record starts with "
                                    "'pipeline-iteration rank=R stage=S seconds=T losses=L,...'")
        actions, transfers = [], []
        for line in lines[1:]:
            word, _, rest = line.partition(" ")
            if word == "action":
                actions.append(ActionTime.parse(rest))
            elif word == "transfer":
                transfers.append(TransferTime.parse(rest))
            else:
                raise InvalidInputError(f"pipeline iteration record line {line!r} is not 'action ...' "
                                        "nor 'transfer ...'")
        losses = tuple(float(v) for v in head.group(4).split(",") if v)
        stage = None if head.group(2) == "-" else int(head.group(2))
        return cls(int(head.group(1)), stage, float(head.group(3)), tuple(actions), tuple(transfers), losses)
