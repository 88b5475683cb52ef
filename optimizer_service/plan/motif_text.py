"""The text form of motifs and their compositions, and its parser (pure).

``str`` of a :class:`~optimizer_service.plan.motif.Motif`, ``Seq`` or ``Par``
prints what logs, tests and installed plans show; :func:`parse_composition`
reads it back (``parse_composition(str(c)) == c``), :func:`parse_motif` a
single motif.
"""

from __future__ import annotations

import re

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES
from optimizer_service.plan.motif import Composition, Motif, Par, Range, Seq, check_motif

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<word>[A-Za-z]+)|(?P<sym>->|\|\||[()\[\]:,+])|(?P<bad>\S))")

_SEPARATORS = {"->": Seq, "||": Par}



def parse_composition(text: str) -> Composition:
    """Read a plan from its text form (what ``str`` prints; Syndicate §4.2's
    ``→`` is ``->``, ``∥`` is ``||``).

    Grammar (whitespace between tokens is free)::

        plan   := motif | "(" plan ( ("->" plan)+ | ("||" plan)+ )? ")"
        motif  := Collective "(" int ("," int)* ")" range+ ["dst" "+" range] ["ch" int] [int "B"]
        range  := "[" int ":" int "]"

    The motif's last part, ``<n>B``, is its element size in bytes (4 when
    absent; :mod:`optimizer_service.plan.motif`). Parentheses around a single
    plan only group it, so a one-part ``Seq`` or ``Par`` (which no operator
    produces) has no text form of its own. Every
    motif must be well formed (:func:`check_motif`). Malformed text raises
    :class:`InvalidInputError` naming the column and the offending part.
    """
    return _PlanParser(text).parse()



class _PlanParser:
    """Recursive descent over the tokens of :func:`parse_composition`'s grammar."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = list(self._tokenize(text))
        self.at = 0

    @staticmethod
    def _tokenize(text: str):
        position = 0
        while (match := _TOKEN.match(text, position)) and match.lastgroup:
            if match.lastgroup == "bad":
                raise InvalidInputError(f"cannot parse plan at column {match.start('bad') + 1} "
                                        f"{_excerpt(text, match.start('bad'))}: unexpected character "
                                        f"{match.group('bad')!r}")
            yield match.lastgroup, match.group(match.lastgroup), match.start(match.lastgroup)
            position = match.end()

    def parse(self) -> Composition:
        if not self.tokens:
            raise InvalidInputError("empty plan text")
        plan = self._plan()
        if self.at < len(self.tokens):
            self._fail("unexpected text after the end of the plan")
        return plan

    # -- grammar
    def _plan(self) -> Composition:
        if self._peek() != "(":
            return self._motif()
        self._expect("(")
        parts, separator = [self._plan()], None
        while self._peek() in _SEPARATORS:
            if separator is not None and self._peek() != separator:
                self._fail("'->' and '||' mixed in one parenthesis; parenthesize the inner part")
            separator = self._take()
            parts.append(self._plan())
        self._expect(")", "'->', '||' or ')'")
        return parts[0] if separator is None else _SEPARATORS[separator](tuple(parts))

    def _motif(self) -> Motif:
        start = self.at
        name = self._expect_kind("word", "a motif kind")
        try:
            kind = Collective(name)
        except ValueError:
            self.at = start
            self._fail(f"unknown motif kind {name!r} (expected one of {', '.join(k.value for k in Collective)})")
        self._expect("(")
        ranks = [self._int()]
        while self._peek() == ",":
            self._take()
            ranks.append(self._int())
        self._expect(")", "',' or ')'")
        ranges = [self._range()]
        while self._peek() == "[":
            ranges.append(self._range())
        window = None
        if self._peek() == "dst":
            self._take()
            self._expect("+")
            window = self._range()
        channel = 0
        if self._peek() == "ch":
            self._take()
            channel = self._int()
        element_bytes = DEFAULT_ELEMENT_BYTES
        if self.at < len(self.tokens) and self.tokens[self.at][0] == "int":
            element_bytes = self._int()
            self._expect("B", "'B' after the element size (e.g. '2B')")
        if (window is None) == (kind is Collective.ALL_TO_ALL):
            self.at = start
            self._fail("AllToAll needs a destination window 'dst+[start:stop]'" if window is None
                       else f"only AllToAll has a destination window, not {kind}")
        motif = Motif(kind, tuple(ranks), tuple(ranges), window or (0, 0), channel, element_bytes)
        try:
            check_motif(motif)
        except InvalidInputError as error:
            self.at = start
            self._fail(str(error))
        return motif

    def _range(self) -> Range:
        self._expect("[")
        lo = self._int()
        self._expect(":")
        hi = self._int()
        self._expect("]")
        return lo, hi

    # -- tokens
    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self) -> str:
        value = self.tokens[self.at][1]
        self.at += 1
        return value

    def _int(self) -> int:
        return int(self._expect_kind("int", "a number"))

    def _expect(self, symbol: str, wanted: str | None = None) -> None:
        if self._peek() != symbol:
            self._fail(f"expected {wanted or repr(symbol)}")
        self.at += 1

    def _expect_kind(self, kind: str, wanted: str) -> str:
        if self.at >= len(self.tokens) or self.tokens[self.at][0] != kind:
            self._fail(f"expected {wanted}")
        return self._take()

    def _fail(self, what: str):
        if self.at >= len(self.tokens):
            raise InvalidInputError(f"cannot parse plan: the text ends early: {what}")
        column = self.tokens[self.at][2]
        raise InvalidInputError(f"cannot parse plan at column {column + 1} {_excerpt(self.text, column)}: {what}")



def _excerpt(text: str, column: int, width: int = 32) -> str:
    """``near '...'``: the text from ``column``, cut to one short line."""
    piece = text[column:column + width]
    return f"near {piece!r}" + ("..." if len(text) > column + width else "")


def parse_motif(text: str) -> Motif:
    """The motif ``str(motif)`` printed (see :func:`parse_composition`)."""
    composition = parse_composition(text)
    if not isinstance(composition, Motif):
        raise InvalidInputError(f"expected one motif, got a composition: {_excerpt(text.strip(), 0)}")
    return composition
