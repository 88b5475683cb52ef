"""What the inner backend runs for an op it is handed whole (passthrough; issue 32, item 3; pure).

The search prices an op that no plan enforces as its first option — the
library's own algorithm, whole, on channel 0 — and the telemetry fit prices
passthrough's samples the same way (:mod:`.telemetry_fit`). For one kind of op
gloo runs something else: torch's ProcessGroupGloo reduces and scatters by a
full AllReduce of the input followed by a local copy (which is why the
enforcer builds its own ring from sends and receives,
:mod:`enforcer.comm.sendrecv`), so it puts ``2(p−1)/p·n`` bytes on the wire
where a ReduceScatter needs ``(p−1)/p·n``. Both forms do: 4 ranks on loopback
(torch 2.13), 16.8 MB of input each, put 100.8 MB on ``lo`` for the tensor
form, the list form and an AllReduce of the input alike (a ReduceScatter's
minimum is 50.3). The list form is one the enforcer never plans, so it is
priced so where it passes through (:mod:`.trace_dag`). Priced as a ReduceScatter,
passthrough's reduce-scatters measured twice their price: on the emulated
2 × 4 cluster FSDP2's 2.1 MB gradient reduce-scatters took 171 ms against
74 ms of calibrated transfer (its 1 MB all-gathers 1.12× theirs), the first
window's fit read that as channel 0 running at half its calibrated rate,
and every plan (whose ReduceScatters are rings) was priced with that rate:
first plans predicted 14–27 % high.

Which backend ran a window's ops is in the traces (``inner_backends``: the
default group's backend per device). Our reading: a job whose ranks name a
CUDA backend reduce-scatters on it (NCCL and UCC have a real ReduceScatter);
otherwise, on gloo for the CPU (the default; also traces from before the
field) its reduce-scatters are AllReduces of the same input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from optimizer_service.plan.motif import Collective, Motif, comm_op
from optimizer_service.syndicate.dag import TrainingDAG

#: The inner backend whose ReduceScatter is a full AllReduce plus a local copy.
ALL_REDUCE_SCATTER_BACKEND = "gloo"


def reduce_scatter_by_all_reduce(traces: Sequence[Mapping]) -> bool:
    """Whether the window's passthrough reduce-scatters ran as gloo's AllReduces (module docstring)."""
    for trace in traces:
        backends = trace.get("inner_backends") or {}
        if "cuda" in backends or backends.get("cpu", ALL_REDUCE_SCATTER_BACKEND) != ALL_REDUCE_SCATTER_BACKEND:
            return False
    return True


def library_op(op: Motif, by_all_reduce: bool) -> Motif:
    """``op`` (a whole comm-op) as the inner backend runs it: a ReduceScatter on gloo is an
    AllReduce of its whole input; every other op is itself."""
    if not by_all_reduce or op.kind is not Collective.REDUCE_SCATTER:
        return op
    return comm_op(Collective.ALL_REDUCE, op.ranks, op.elements, op.element_bytes)


def library_dag(dag: TrainingDAG, by_all_reduce: bool) -> TrainingDAG | None:
    """``dag`` with every comm-op as the inner backend runs it passed through; None when that
    changes nothing (so the caller prices passthrough on ``dag`` itself)."""
    nodes = tuple(replace(node, comm=library_op(node.comm, by_all_reduce)) if node.is_comm else node
                  for node in dag.nodes)
    if nodes == dag.nodes:
        return None
    return TrainingDAG(dag.name, nodes, f"{dag.description}; passthrough's ops as the inner backend runs them")
