"""State-matrix semantics of collectives (P² §3.2, Figure 8).

A device's state is a boolean ``k × k`` matrix over the ``k`` devices of the
synthesis hierarchy: row ``i`` is the ``i``-th chunk of the data, and
``s[i][j] = 1`` means device ``j``'s original chunk ``i`` has been summed into
what this device holds for chunk ``i``. The non-empty rows are the chunks the
device holds. We store a state compactly as pairs ``(rows, contributors)`` of
bitmasks: the rows in ``rows`` all have exactly the contributor set
``contributors``. Pairs have disjoint rows and distinct contributor sets and are
kept sorted, so equal states have equal representations.

The rules of Figure 8 (``⊎`` adds matrices; the root is the group's first device):

* R-ALLREDUCE — all devices hold the same rows, and for every row the
  contributor sets of different devices are disjoint; every device gets ``⊎ sᵢ``.
* R-REDUCESCATTER — same premises; the non-empty rows of ``⊎ sᵢ`` are split in
  order into as many equal blocks as devices (an error if they do not divide),
  device ``i`` gets block ``i``.
* R-ALLGATHER — the devices' row sets are pairwise disjoint and equally large;
  every device gets ``⊎ sᵢ``.
* R-REDUCE — premises of R-ALLREDUCE; the root gets ``⊎ sᵢ``, the others
  become empty.
* R-BROADCAST — every ``sᵢ ≤ s₀`` and some ``sᵢ < s₀`` (information
  increase); every device gets ``s₀``.

A step applies one collective to disjoint groups at once; devices outside the
groups keep their state (§3.3). Invalid steps are rejected, which is what rules
out Figure 4's programs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective

#: One device's state: sorted ``(rows, contributors)`` bitmask pairs.
RawState = tuple[tuple[int, int], ...]
#: The states of all devices of the synthesis hierarchy, by device id.
Context = tuple[RawState, ...]

EMPTY: RawState = ()


def canonical(entries) -> RawState:
    """Merge pairs with equal contributors and sort (the unique representation)."""
    by_contributors: dict[int, int] = {}
    for rows, contributors in entries:
        if rows:
            by_contributors[contributors] = by_contributors.get(contributors, 0) | rows
    return tuple(sorted((rows, contributors) for contributors, rows in by_contributors.items()))


def rows_of(state: RawState) -> int:
    mask = 0
    for rows, _ in state:
        mask |= rows
    return mask


def initial_state(device: int, k: int) -> RawState:
    """Device ``device`` holds only its own data in every chunk (P² §3.5)."""
    return (((1 << k) - 1, 1 << device),)


def final_state(k: int) -> RawState:
    """Every chunk reduced over all ``k`` devices of the synthesis hierarchy."""
    full = (1 << k) - 1
    return ((full, full),)


def initial_context(k: int) -> Context:
    return tuple(initial_state(d, k) for d in range(k))


def final_context(k: int) -> Context:
    return (final_state(k),) * k


def _sum_disjoint(states: Sequence[RawState]) -> RawState | None:
    """``⊎ sᵢ`` for states with equal rows; ``None`` if some row would count a
    contributor twice."""
    accumulated = list(states[0])
    for state in states[1:]:
        merged = []
        for rows_a, contrib_a in accumulated:
            for rows_b, contrib_b in state:
                common = rows_a & rows_b
                if common:
                    if contrib_a & contrib_b:
                        return None
                    merged.append((common, contrib_a | contrib_b))
        accumulated = merged
    return canonical(accumulated)


def _less_or_equal(small: RawState, large: RawState) -> bool:
    """Elementwise ``small ≤ large`` of the boolean matrices."""
    large_rows = rows_of(large)
    for rows, contributors in small:
        if rows & ~large_rows:
            return False
        for rows_l, contrib_l in large:
            if rows & rows_l and contributors & ~contrib_l:
                return False
    return True


_split_cache: dict[tuple[int, int], tuple[int, ...] | None] = {}


def clear_caches() -> None:
    """Forget memoized row splits (benchmarks measure cold runs)."""
    _split_cache.clear()


def split_rows(mask: int, parts: int) -> tuple[int, ...] | None:
    """Split the set bits of ``mask`` in ascending order into ``parts`` equal
    blocks (``scatter`` in Figure 8); ``None`` if they do not divide."""
    key = (mask, parts)
    if key in _split_cache:
        return _split_cache[key]
    count = mask.bit_count()
    result: tuple[int, ...] | None
    if count % parts:
        result = None
    else:
        per_block = count // parts
        blocks = []
        rest = mask
        for _ in range(parts):
            block = 0
            for _ in range(per_block):
                low = rest & -rest
                block |= low
                rest ^= low
            blocks.append(block)
        result = tuple(blocks)
    if len(_split_cache) < 100_000:
        _split_cache[key] = result
    return result


def apply_collective(collective: Collective, states: Sequence[RawState]) -> list[RawState] | None:
    """Post-states of one group under Figure 8, or ``None`` if the rule's premises fail."""
    size = len(states)
    if collective is Collective.BROADCAST:
        root = states[0]
        strictly_more = False
        for state in states[1:]:
            if state != root:
                if not _less_or_equal(state, root):
                    return None
                strictly_more = True
        return [root] * size if strictly_more else None
    if collective is Collective.ALL_GATHER:
        seen = 0
        count = None
        for state in states:
            rows = rows_of(state)
            if rows & seen:
                return None
            if count is None:
                count = rows.bit_count()
            elif rows.bit_count() != count:
                return None
            seen |= rows
        gathered = canonical(entry for state in states for entry in state)
        return [gathered] * size
    first_rows = rows_of(states[0])
    for state in states[1:]:
        if rows_of(state) != first_rows:
            return None
    total = _sum_disjoint(states)
    if total is None:
        return None
    if collective is Collective.ALL_REDUCE:
        return [total] * size
    if collective is Collective.REDUCE:
        return [total] + [EMPTY] * (size - 1)
    blocks = split_rows(rows_of(total), size)
    if blocks is None:
        return None
    return [canonical((rows & block, contrib) for rows, contrib in total) for block in blocks]


def apply_step(context: Context, collective: Collective, groups) -> Context | None:
    """Apply ``collective`` to every group at once; ``None`` if any group is invalid."""
    new = list(context)
    for group in groups:
        result = apply_collective(collective, [context[d] for d in group])
        if result is None:
            return None
        for device, state in zip(group, result):
            new[device] = state
    return tuple(new)


def why_invalid(collective: Collective, context: Context, groups) -> str | None:
    """A one-line reason why ``collective`` over ``groups`` violates Figure 8, or ``None``."""
    for group in groups:
        states = [context[d] for d in group]
        if apply_collective(collective, states) is not None:
            continue
        label = f"group {{{', '.join(map(str, group))}}}"
        rows = [rows_of(s) for s in states]
        if collective is Collective.BROADCAST:
            for device, state in zip(group[1:], states[1:]):
                if not _less_or_equal(state, states[0]):
                    return (f"{label}: device {device} holds data the root {group[0]} lacks "
                            f"(R-BROADCAST needs every state <= the root's)")
            return f"{label}: the root {group[0]} knows nothing new (R-BROADCAST needs an information increase)"
        if collective is Collective.ALL_GATHER:
            if len({r.bit_count() for r in rows}) > 1:
                return f"{label}: devices hold different numbers of chunks (R-ALLGATHER)"
            return f"{label}: devices hold overlapping chunks (R-ALLGATHER needs disjoint rows)"
        for device, r in zip(group[1:], rows[1:]):
            if r != rows[0]:
                return (f"{label}: devices {group[0]} and {device} hold different chunks "
                        f"(R-{collective.value.upper()} needs equal non-empty rows)")
        if _sum_disjoint(states) is None:
            return (f"{label}: some chunk would sum a device's data twice "
                    f"(R-{collective.value.upper()} needs disjoint contributors)")
        return (f"{label}: {rows[0].bit_count()} chunks cannot be scattered over {len(group)} devices "
                f"(R-REDUCESCATTER)")
    return None


def execute(k: int, steps) -> list[Context]:
    """Run ``(collective, groups)`` steps from the initial state; return the
    context before each step and after the last. An invalid step raises
    :class:`InvalidInputError` saying which step and why."""
    contexts = [initial_context(k)]
    for number, (collective, groups) in enumerate(steps, start=1):
        after = apply_step(contexts[-1], collective, groups)
        if after is None:
            reason = why_invalid(collective, contexts[-1], groups)
            raise InvalidInputError(f"step {number} ({collective}) is invalid: {reason}")
        contexts.append(after)
    return contexts


# ------------------------------------------------------------------ text form
def _format_set(mask: int) -> str:
    items = [i for i in range(mask.bit_length()) if mask >> i & 1]
    parts = []
    start = prev = None
    for i in items + [None]:
        if start is not None and (i is None or i != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if i is not None and start is None:
            start = i
        prev = i
    return ",".join(parts)


def _parse_set(text: str) -> int:
    mask = 0
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise InvalidInputError(f"{text!r} is not a set like 0-3,8")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        if high < low:
            raise InvalidInputError(f"range {part!r} runs backwards")
        for i in range(low, high + 1):
            mask |= 1 << i
    return mask


@dataclass(frozen=True)
class DeviceState:
    """A device's state matrix with a compact text form.

    ``"0-1:0-3 2:1,2"`` — rows (chunks) 0 and 1 hold the sum over devices 0–3,
    chunk 2 the sum over devices 1 and 2; ``"-"`` is the empty state.
    """

    entries: RawState

    @property
    def chunks(self) -> int:
        """Number of non-empty rows: the chunks this device holds."""
        return rows_of(self.entries).bit_count()

    def to_matrix(self, k: int) -> list[list[int]]:
        matrix = [[0] * k for _ in range(k)]
        for rows, contributors in self.entries:
            for r in range(k):
                if rows >> r & 1:
                    for c in range(k):
                        if contributors >> c & 1:
                            matrix[r][c] = 1
        return matrix

    @classmethod
    def from_matrix(cls, matrix: Sequence[Sequence[int]]) -> DeviceState:
        entries = []
        for r, row in enumerate(matrix):
            contributors = sum(1 << c for c, bit in enumerate(row) if bit)
            if contributors:
                entries.append((1 << r, contributors))
        return cls(canonical(entries))

    def __str__(self) -> str:
        if not self.entries:
            return "-"
        ordered = sorted(self.entries, key=lambda e: (e[0] & -e[0]))
        return " ".join(f"{_format_set(rows)}:{_format_set(contrib)}" for rows, contrib in ordered)

    @classmethod
    def parse(cls, text: str) -> DeviceState:
        text = text.strip()
        if text == "-":
            return cls(EMPTY)
        entries = []
        seen = 0
        for item in text.split():
            if ":" not in item:
                raise InvalidInputError(f"device state item {item!r} is not ROWS:DEVICES, e.g. 0-1:0-3")
            rows_text, contrib_text = item.split(":", 1)
            rows = _parse_set(rows_text)
            if rows & seen:
                raise InvalidInputError(f"device state {text!r} lists a chunk twice")
            seen |= rows
            entries.append((rows, _parse_set(contrib_text)))
        return cls(canonical(entries))
