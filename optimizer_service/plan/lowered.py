"""Lowered programs: steps of ``(collective, device groups)`` over the whole
system (P² Figure 6's output), with a text form that round-trips
(``"AllReduce 1/2 {0,1} {2,3}"``). This is what the program executor runs and
what the cost model prices; :mod:`optimizer_service.p2.lowering` makes them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective

Groups = tuple[tuple[int, ...], ...]

@dataclass(frozen=True)
class LoweredStep:
    """One collective over disjoint groups of global devices."""

    collective: Collective
    groups: Groups
    input_fraction: Fraction

    def __str__(self) -> str:
        groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in self.groups)
        return f"{self.collective} {self.input_fraction} {groups}"

    @classmethod
    def parse(cls, text: str) -> LoweredStep:
        match = re.fullmatch(r"\s*([A-Za-z]+)\s+([0-9]+(?:/[0-9]+)?)\s+((?:\{[0-9,\s]*\}\s*)+)", text)
        if not match:
            raise InvalidInputError(f"lowered step {text!r} is not 'COLLECTIVE FRACTION {{0,1}} {{2,3}}'")
        groups = tuple(tuple(int(v) for v in g.split(",") if v.strip())
                       for g in re.findall(r"\{([0-9,\s]*)\}", match.group(3)))
        return cls(Collective.parse(match.group(1)), groups, Fraction(match.group(2)))



@dataclass(frozen=True)
class LoweredProgram:
    steps: tuple[LoweredStep, ...]

    def __str__(self) -> str:
        return "; ".join(str(step) for step in self.steps)

    @classmethod
    def parse(cls, text: str) -> LoweredProgram:
        return cls(tuple(LoweredStep.parse(part) for part in text.split(";") if part.strip()))



def flat_allreduce(groups: Sequence[Sequence[int]]) -> LoweredProgram:
    """The baseline every program is compared with: one AllReduce over every reduction group."""
    return LoweredProgram((LoweredStep(Collective.ALL_REDUCE, tuple(tuple(int(d) for d in g) for g in groups),
                                       Fraction(1)),))
