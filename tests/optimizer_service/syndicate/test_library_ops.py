"""What the inner backend runs for an op passed through whole (optimizer_service/syndicate/library_ops.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.motif import Collective, comm_op
from optimizer_service.service import search_record
from optimizer_service.syndicate.dag import Node, TrainingDAG
from optimizer_service.syndicate.library_ops import library_dag, library_op, reduce_scatter_by_all_reduce
from optimizer_service.syndicate.live_search import live_search
from optimizer_service.syndicate.telemetry_fit import fit_readings, passthrough_samples

#: The first live search of an FSDP2-bf16 loop run (2 x 4 ranks, two 200 Mbit/s NICs, lossless fabric, at
#: ``877b133``): passthrough's window (fp32 gradient reduce-scatters of 2.1 MB, bf16 all-gathers of 1 MB),
#: from traces older than their ``inner_backends`` field. Its first plan measured 0.306 s in the loop.
FSDP_FIRST_WINDOW = Path(__file__).parent / "data" / "fsdp-first-window.json"
FSDP_FIRST_PLAN_MEASURED = 0.306


def on_backend(traces: list[dict], backends: dict[str, str]) -> list[dict]:
    marked = copy.deepcopy(traces)
    for trace in marked:
        trace["inner_backends"] = backends
    return marked


def test_gloo_reduce_scatters_by_an_all_reduce_and_other_backends_do_not():
    assert reduce_scatter_by_all_reduce([{"inner_backends": {"cpu": "gloo"}}, {}])      # before the field: gloo
    assert not reduce_scatter_by_all_reduce([{"inner_backends": {"cpu": "ucc"}}])
    assert not reduce_scatter_by_all_reduce([{"inner_backends": {"cpu": "gloo", "cuda": "nccl"}}])
    scatter = comm_op(Collective.REDUCE_SCATTER, (0, 1, 2, 3), 1000, 2)
    as_run = library_op(scatter, True)
    assert (as_run.kind, as_run.ranks, as_run.ranges, as_run.element_bytes) == (
        Collective.ALL_REDUCE, (0, 1, 2, 3), ((0, 1000),), 2)
    assert library_op(scatter, False) == scatter
    gather = comm_op(Collective.ALL_GATHER, (0, 1, 2, 3), 1000, 2)
    assert library_op(gather, True) == gather


def test_a_dag_changes_only_where_a_reduce_scatter_is_passed_to_gloo():
    scatter = comm_op(Collective.REDUCE_SCATTER, (0, 1), 64)
    dag = TrainingDAG("t", (Node("fwd", 0.01), Node("rs", comm=scatter, after=("fwd",))))
    changed = library_dag(dag, True)
    assert changed is not None and changed.nodes[1].comm.kind is Collective.ALL_REDUCE
    assert changed.nodes[0] == dag.nodes[0] and changed.nodes[1].after == ("fwd",)
    assert library_dag(dag, False) is None
    gathers = TrainingDAG("g", (Node("ag", comm=comm_op(Collective.ALL_GATHER, (0, 1), 64)),))
    assert library_dag(gathers, True) is None


def test_passthroughs_reduce_scatters_on_gloo_no_longer_read_as_a_slow_channel():
    """gloo's 2.1 MB reduce-scatters measured about twice their ReduceScatter price; priced as the AllReduces
    gloo runs, the first window fits channel 0 near its calibrated rate, and the first plan (whose
    ReduceScatters are rings) is predicted within 15 % of what it measured, not 21 % high."""
    record = search_record.read(FSDP_FIRST_WINDOW)
    topology = Topology.from_yaml(record.topology_yaml)
    on_gloo, on_ucc = record.traces, on_backend(record.traces, {"cpu": "ucc"})
    gloo_samples, ucc_samples = passthrough_samples(topology, on_gloo), passthrough_samples(topology, on_ucc)
    assert len(gloo_samples) == len(ucc_samples)
    heaviest = max(gloo_samples, key=lambda sample: sample.transfer)
    as_scatter = max(ucc_samples, key=lambda sample: sample.transfer)
    assert heaviest.measured == as_scatter.measured
    assert heaviest.transfer == pytest.approx(2 * as_scatter.transfer, rel=0.01)     # 2(p-1)/p n against (p-1)/p n
    (gloo_fit,), (ucc_fit,) = fit_readings(topology, gloo_samples, (None,)), fit_readings(topology, ucc_samples, (None,))
    assert gloo_fit.channels[0].scale < 1.2 < 1.8 < ucc_fit.channels[0].scale
    gloo = live_search(on_gloo, topology, record.seed, record.evaluations)
    ucc = live_search(on_ucc, topology, record.seed, record.evaluations)
    assert abs(gloo.predicted_seconds / FSDP_FIRST_PLAN_MEASURED - 1) < 0.15
    assert ucc.predicted_seconds / FSDP_FIRST_PLAN_MEASURED - 1 > 0.15
    # passthrough, priced as gloo runs it, stays near what the window measured
    assert gloo.running_seconds == pytest.approx(gloo.measured_seconds, rel=0.1)
