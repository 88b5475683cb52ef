"""The C++ twin of optSched (Syndicate Pseudocode 1, §4.3.1) and of
:meth:`optimizer_service.evaluation.Problem.cost_of`.

``optimizer_service._schedule_cpp`` (sources and build in ``cpp_ext/``) runs
the same list scheduler as :meth:`optimizer_service.scheduler.Graph.run` with
the same tie-breaking and the same float operations, so its times are
bit-identical; the parity tests (``tests/optimizer_service/test_cpp_schedule.py``)
hold it to that. :class:`CompiledProblem` converts a :class:`Problem` once to
plain lists (the unrolled nodes, their dependencies, each distinct option
list's templates) and then prices a choice entirely in C++, 30 to 100 times
faster than the Python path (by policy) — the MCMC search's whole inner loop.

The extension is optional: where it was not built (no compiler at install
time) :data:`native` is ``None`` and the planner uses the Python scheduler.
Setting the environment variable ``P2_PURE_PYTHON=1`` forces the Python path
even where it was built (read once, at import).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from optimizer_service.errors import InvalidInputError
from optimizer_service.scheduler import Graph, Policy

if TYPE_CHECKING:
    from optimizer_service.evaluation import Problem


def _load():
    if os.environ.get("P2_PURE_PYTHON") == "1":
        return None
    try:
        from optimizer_service import _schedule_cpp
    except ImportError:
        return None
    return _schedule_cpp


native = _load()


def _policy_code(policy: Policy) -> int:
    """The extension's policy code, chosen by identity as ``Graph.run`` does."""
    if policy is Policy.CRITICAL_PATH:
        return 0
    return 2 if policy is Policy.FIFO else 1


class CompiledProblem:
    """A :class:`Problem` compiled for pricing choices in C++ (needs :data:`native`)."""

    def __init__(self, problem: Problem) -> None:
        sets: list[list[tuple]] = []
        set_of: dict[int, int] = {}          # option lists are shared by the ops of one key
        slot_set: list[int] = []
        for templates in problem.templates:
            if id(templates) not in set_of:
                set_of[id(templates)] = len(sets)
                sets.append([(t.seconds, t.channel, t.after, t.exits) for t in templates])
            slot_set.append(set_of[id(templates)])
        nodes = problem.unrolled.nodes
        self._graph = native.ProblemGraph(
            list(problem.unrolled.order), [n.is_comm for n in nodes], [n.seconds for n in nodes],
            [problem.slot[problem._base[i]] if n.is_comm else -1 for i, n in enumerate(nodes)],
            problem._data_after, problem._issue_after, sets, slot_set, problem.iterations, problem.slowdown)

    def cost(self, choice: Sequence[int], policy: Policy, framework_order: bool) -> float:
        """Exactly ``Problem.cost_of`` (iteration time of ``choice``)."""
        try:
            return self._graph.cost(choice, _policy_code(policy), bool(framework_order))
        except native.InvalidInput as error:
            raise InvalidInputError(str(error)) from None


def run(graph: Graph, seconds: Sequence[float], capacity: int = 1, policy: Policy = Policy.CRITICAL_PATH,
        slowdown: Mapping[int, float] | None = None) -> tuple[list[float], list[float], list[int]]:
    """Exactly ``graph.run(seconds, capacity, policy, slowdown)``, in C++ (needs :data:`native`)."""
    try:
        return native.run(graph.channel, graph.successors, graph.program, list(graph.topological), seconds,
                          capacity, _policy_code(policy), dict(slowdown or {}))
    except native.InvalidInput as error:
        raise InvalidInputError(str(error)) from None
