"""The training DAG of a trace window's median iteration (issue 32, item 4; pure).

:func:`optimizer_service.syndicate.trace_dag.dag_from_traces` reads one
iteration. On a loaded host one iteration's compute is noisy — every compute
node is its slowest rank's (Syndicate §4.3's DAG, read as
:mod:`~optimizer_service.syndicate.trace_dag` does), so a rank that waited for
a core in that iteration sets it: on the emulated 2 × 4 cluster on 2 cores
the DLRM job's traced compute per iteration ranged 248–322 ms over ten
passthrough iterations, and a plan searched from one of them was judged
against that iteration's compute. :func:`window_dag` is the DAG of the last
complete iteration (its nodes and edges) with every compute node's seconds
the median over the window's complete iterations that have the same nodes,
and the measured time the median of those iterations' times. So the same
job gives the same DAG, give or take the median's noise, whichever
iteration the window happens to end on.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from optimizer_service.errors import InvalidInputError
from optimizer_service.syndicate.dag import TrainingDAG
from optimizer_service.syndicate.trace_dag import dag_from_traces, trace_iteration_seconds


def complete_iterations(traces: Sequence[Mapping]) -> list[int]:
    """The iterations every rank holds and follows with another one (ascending)."""
    held = None
    for trace in traces:
        indices = sorted({int(op["iteration"]) for op in trace.get("ops", ()) if int(op["iteration"]) >= 0})
        mine = set(indices[:-1])
        held = mine if held is None else held & mine
    return sorted(held or ())


def window_dag(traces: Sequence[Mapping], name: str = "trace") -> tuple[TrainingDAG, float, int]:
    """The window's median DAG (module docstring), its measured iteration time
    (the median) and how many iterations went into both."""
    reference = dag_from_traces(traces, None, name=name)
    shape = _shape(reference)
    seconds: dict[str, list[float]] = {}
    times = []
    for iteration in complete_iterations(traces):
        try:
            dag = dag_from_traces(traces, iteration, name=name)
        except InvalidInputError:
            continue            # an iteration the ranks disagree on, or one still running: not this job's shape
        if _shape(dag) != shape:
            continue
        for node in dag.nodes:
            seconds.setdefault(node.name, []).append(node.seconds)
        times.append(trace_iteration_seconds(traces, iteration))
    if not times:
        return reference, trace_iteration_seconds(traces, None), 1
    nodes = tuple(node if node.is_comm else replace(node, seconds=statistics.median(seconds[node.name]))
                  for node in reference.nodes)
    description = f"{reference.description}; compute: the median of {len(times)} iteration(s)"
    return TrainingDAG(reference.name, nodes, description), statistics.median(times), len(times)


def _shape(dag: TrainingDAG) -> tuple:
    """What iterations must share to be medianed together: every node's name, kind and op."""
    return tuple((node.name, node.comm) for node in dag.nodes)
