"""The C++ dispatcher's decision (``cpp_ext/enforcer/dispatch.cpp``) equals its Python twin
:func:`enforcer.runtime.dispatch.next_step` on random schedules and iterations: every slot position, ops
submitted in any order with any motifs already handed over, waited on or not, the iteration open or
closed, and a held-back time or none."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enforcer.group import native
from enforcer.runtime.dispatch import Cursor, Schedule, next_step
from tests.enforcer.test_dispatch import Iteration, Op

pytestmark = pytest.mark.skipif(not native.available(), reason=native.why_unavailable() or "built")


@st.composite
def situations(draw):
    orders = draw(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=4), min_size=1, max_size=4))
    submitted = draw(st.permutations(range(len(orders))))[:draw(st.integers(0, len(orders)))]
    ops = []
    for op in submitted:
        handed = [draw(st.booleans()) for _ in orders[op]]
        ops.append((op, handed, draw(st.booleans())))
    slots = sum(len(o) for o in orders)
    position = draw(st.integers(0, slots))
    since = draw(st.none() | st.floats(0.0, 10.0))
    now = draw(st.floats(0.0, 20.0))
    return orders, position, since, ops, draw(st.booleans()), now


@settings(max_examples=400, deadline=None)
@given(situations())
def test_next_step_in_cpp_equals_python(situation):
    from enforcer._native import testing

    orders, position, since, ops, closed, now = situation
    iteration = Iteration({op: Op({m for m, h in enumerate(handed) if h}, waited) for op, handed, waited in ops},
                          closed)
    want = next_step(Schedule.of(orders), Cursor(position, since), iteration, now)
    got = testing.next_step(orders, position, since, ops, closed, now)
    assert got == (want.cursor.position, want.cursor.since, list(want.hand_over), want.missing, want.waited,
                   want.blocked, want.finished)
