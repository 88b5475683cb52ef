"""Schedule problems the solver tests share."""

from __future__ import annotations

from hypothesis import strategies as st

from optimizer_service.resharding.schedule import ScheduleProblem


def problem(tasks: list[tuple[tuple[int, ...], tuple[float, ...], tuple[int, ...]]]) -> ScheduleProblem:
    """From ``(sender hosts, durations, receiver hosts)`` per task; devices = 1 + receivers."""
    return ScheduleProblem(tuple(t[0] for t in tasks), tuple(t[1] for t in tasks), tuple(t[2] for t in tasks),
                           tuple(1 + len(t[2]) for t in tasks))


#: Case 3's shape: each slice on one sender host, two receiver hosts, unit durations.
CASE3 = problem([((0,), (1.0,), (2,)), ((1,), (1.0,), (2,)), ((0,), (1.0,), (3,)), ((1,), (1.0,), (3,))])
#: Case 5's shape: every slice on both sender hosts.
CASE5 = problem([((0, 1), (1.0, 1.0), (2,)), ((0, 1), (1.0, 1.0), (2,)), ((0, 1), (1.0, 1.0), (3,)),
                 ((0, 1), (1.0, 1.0), (3,))])


@st.composite
def small_problems(draw, max_tasks: int = 5):
    """Random problems: 1..max_tasks tasks over 3 sender and 3 receiver hosts,
    durations from a small set (so ties happen)."""
    n = draw(st.integers(1, max_tasks))
    tasks = []
    for _ in range(n):
        senders = tuple(sorted(draw(st.sets(st.integers(0, 2), min_size=1, max_size=2))))
        durations = tuple(draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])) for _ in senders)
        receivers = tuple(sorted(draw(st.sets(st.integers(10, 12), min_size=1, max_size=2))))
        tasks.append((senders, durations, receivers))
    return problem(tasks)
