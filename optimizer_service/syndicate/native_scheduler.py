"""The C++ twin of optSched (Syndicate Pseudocode 1, §4.3.1) and of
:meth:`optimizer_service.syndicate.problem.Problem.cost_of`.

``optimizer_service.syndicate._schedule_cpp`` (sources and build in ``cpp_ext/``) runs
the same list scheduler as :meth:`optimizer_service.syndicate.scheduler.Graph.run` with
the same tie-breaking and the same float operations, so its times are
bit-identical; the parity tests (``tests/optimizer_service/syndicate/test_native_scheduler.py``)
hold it to that. :class:`CompiledProblem` takes a problem as plain lists (the
unrolled nodes, their dependencies, each distinct option list's templates:
``Problem._compile`` (:mod:`optimizer_service.syndicate.problem`) builds
them) and then prices a choice entirely in C++, 30 to 100 times faster than
the Python path (by policy) — the MCMC search's whole inner loop.

The extension is optional: where it was not built (no compiler at install
time) :data:`native` is ``None`` and the planner uses the Python scheduler.
A caller can also ask for the Python path where it was built (the setting
``P2_PURE_PYTHON=1``, read by the shell and passed down as ``native=False``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optimizer_service.errors import InvalidInputError
from optimizer_service.syndicate.scheduler import Graph, Policy

#: One option's template as the extension takes it: (seconds, channel, after, exits).
TemplateRow = tuple[Sequence[float], Sequence[int], Sequence[Sequence[int]], Sequence[int]]


def _load():
    try:
        from optimizer_service.syndicate import _schedule_cpp
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
    """A search problem compiled for pricing choices in C++ (needs :data:`native`).

    ``order`` is a topological order of the unrolled nodes; per node:
    ``is_comm``, ``seconds`` (compute), ``slot`` (the comm-op whose option it
    takes, -1 for compute), ``data_after`` and ``issue_after`` (node indices),
    ``streams``, a compute node's compute stream, and ``lanes``, a comm-op's
    lane (empty: all 0; lane ``l`` of channel ``c`` is the channel
    ``scheduler.lane_channel(c, l)``, slowing compute as ``c`` does);
    ``template_sets`` are the distinct option lists (each option a
    :data:`TemplateRow`), ``slot_set`` the list each slot chooses from.
    """

    def __init__(self, order: Sequence[int], is_comm: Sequence[bool], seconds: Sequence[float],
                 slot: Sequence[int], data_after: Sequence[Sequence[int]], issue_after: Sequence[Sequence[int]],
                 template_sets: Sequence[Sequence[TemplateRow]], slot_set: Sequence[int], iterations: int,
                 slowdown: Mapping[int, float], streams: Sequence[int] = (), lanes: Sequence[int] = ()) -> None:
        self._graph = native.ProblemGraph(list(order), list(is_comm), list(seconds), list(slot), data_after,
                                          issue_after, template_sets, list(slot_set), iterations, dict(slowdown),
                                          list(streams), list(lanes))

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
