"""Topological order of a DAG given as successor lists (Kahn's algorithm)."""

from __future__ import annotations

from collections.abc import Sequence


def topological_order(successors: Sequence[Sequence[int]]) -> tuple[list[int], int | None]:
    """A topological order of nodes ``0..n-1``, and a node on a cycle (``None`` if acyclic).

    ``successors[i]`` lists the nodes that wait for ``i`` (each edge once)."""
    waiting = [0] * len(successors)
    for targets in successors:
        for s in targets:
            waiting[s] += 1
    order = [i for i, count in enumerate(waiting) if count == 0]
    for i in order:
        for s in successors[i]:
            waiting[s] -= 1
            if waiting[s] == 0:
                order.append(s)
    stuck = next((i for i, count in enumerate(waiting) if count > 0), None)
    return order, stuck
