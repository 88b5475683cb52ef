"""The reduction language of P² §3.3.

::

    program   ∈ [reduction]
    reduction ∈ slice × form × C
    slice     := e
    form      := InsideGroup | Parallel(e) | Master(e)

``e`` names a level of the synthesis hierarchy. Text forms (round-trip):

* reduction: ``"node Parallel(root) AllReduce"`` — slice, form, collective;
* program: reductions joined by ``"; "``.

**Program size** (our reading of §3.5 and §4.2's "program size limit", which
the paper does not define): the size of the program's syntax tree, where a
reduction with form ``InsideGroup`` counts 1 and one with ``Parallel(e)`` or
``Master(e)`` counts 2 (the form carries a level argument). With the paper's
limit of 5 this reading reproduces its program counts exactly: 3 programs for
every one-level synthesis hierarchy and 47 for every two-level one (Appendix A,
e.g. ``[4 16]`` reduce ``[0]``: 3 + 47 + 3 = 53). Counting one per reduction
gives 122 for two levels instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective


class FormKind(str, Enum):
    INSIDE_GROUP = "InsideGroup"
    PARALLEL = "Parallel"
    MASTER = "Master"


@dataclass(frozen=True)
class Form:
    """How a slice's groups communicate: within themselves, or position-wise
    across the groups under one instance of ``level`` (all positions for
    Parallel, only the first for Master)."""

    kind: FormKind
    level: str | None = None

    def __post_init__(self) -> None:
        if (self.kind is FormKind.INSIDE_GROUP) != (self.level is None):
            raise InvalidInputError(f"form {self.kind.value} {'takes no' if self.level else 'needs a'} level")

    @property
    def size(self) -> int:
        return 1 if self.kind is FormKind.INSIDE_GROUP else 2

    def __str__(self) -> str:
        return self.kind.value if self.level is None else f"{self.kind.value}({self.level})"

    @classmethod
    def parse(cls, text: str) -> Form:
        match = re.fullmatch(r"\s*(InsideGroup|Parallel|Master)\s*(?:\(\s*([A-Za-z][\w-]*)\s*\))?\s*", text)
        if not match:
            raise InvalidInputError(
                f"form {text!r} is not InsideGroup, Parallel(level) or Master(level)")
        kind = FormKind(match.group(1))
        return cls(kind, match.group(2))


INSIDE_GROUP = Form(FormKind.INSIDE_GROUP)


@dataclass(frozen=True)
class Reduction:
    """One instruction: ``(slice, form, collective)``."""

    slice: str
    form: Form
    collective: Collective

    @property
    def size(self) -> int:
        return self.form.size

    def __str__(self) -> str:
        return f"{self.slice} {self.form} {self.collective}"

    @classmethod
    def parse(cls, text: str) -> Reduction:
        match = re.fullmatch(r"\s*([A-Za-z][\w-]*)\s+(\S+(?:\s*\([^)]*\))?)\s+([A-Za-z]+)\s*", text)
        if not match:
            raise InvalidInputError(
                f"reduction {text.strip()!r} is not 'SLICE FORM COLLECTIVE', "
                f"e.g. 'node Parallel(root) AllReduce'")
        return cls(match.group(1), Form.parse(match.group(2)), Collective.parse(match.group(3)))


@dataclass(frozen=True)
class Program:
    """A reduction strategy: reductions applied in order."""

    reductions: tuple[Reduction, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.reductions)

    def __len__(self) -> int:
        return len(self.reductions)

    def __str__(self) -> str:
        return "; ".join(str(r) for r in self.reductions)

    @classmethod
    def parse(cls, text: str) -> Program:
        parts = [p for p in text.split(";") if p.strip()]
        if not parts:
            raise InvalidInputError("a program needs at least one reduction, e.g. 'root InsideGroup AllReduce'")
        return cls(tuple(Reduction.parse(p) for p in parts))
