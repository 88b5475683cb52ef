"""Searched plans for every dtype (issue 32): a traced job's bf16, fp16, fp64, int64, int8, bool ...
ops are searched in their own elements, priced with their real bytes, and planned."""

from __future__ import annotations

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.catalog import load_topology
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DTYPE_BYTES
from optimizer_service.plan.motif import comm_op, motifs_of
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.proto_codec import plan_from_proto, plan_to_proto
from optimizer_service.plan.trace import COMM_KINDS, PLAN_KIND
from optimizer_service.syndicate.dag import TrainingDAG, comm, compute
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.motif_cost import MotifCostModel
from optimizer_service.syndicate.options import options_for, p2_programs
from optimizer_service.syndicate.passthrough import NOT_IN_PLAN, passed_through
from optimizer_service.syndicate.plan_import import running_choice
from optimizer_service.syndicate.problem import Problem
from optimizer_service.syndicate.rule_plan import plan_from_trace
from optimizer_service.syndicate.trace_dag import dag_from_traces
from optimizer_service.syndicate.transforms import moved_bytes
from tests.support.traces import op, trace

WORLD = (0, 1, 2, 3)
TOPOLOGY = load_topology("hgx2-4n")
#: Every op kind a plan carries, in many dtypes: (trace kind, dtype, buffer bytes, broadcast root).
OPS = [
    ("all_gather_into_tensor", "bfloat16", 4 * 1000 * 2, 0),     # output: 4 members x 1000 elements
    ("reduce_scatter_tensor", "bfloat16", 4 * 1000 * 2, 0),      # input: 4 x 1000
    ("all_to_all_single", "float64", 4 * 250 * 8, 0),            # 4 blocks of 250
    ("all_to_all_single", "int64", 4 * 100 * 8, 0),
    ("all_reduce", "int8", 1001, 0),
    ("all_reduce", "uint8", 64, 0),
    ("all_reduce", "bool", 7, 0),
    ("all_reduce", "int16", 2 * 300, 0),
    ("all_reduce", "int32", 4 * 300, 0),
    ("broadcast", "float16", 2 * 600, 2),
    ("all_reduce", "float32", 4 * 5000, 0),
    ("all_reduce", "float64", 8 * 2500, 0),
]


def traced(ops, group=WORLD, ranks=WORLD) -> list[dict]:
    """Every rank's trace of three iterations running ``ops`` one after the other."""
    def iteration(start: float) -> list[dict]:
        return [dict(op(kind, nbytes, start + 0.1 * k, start + 0.1 * k + 0.05, group, root), dtype=dtype)
                for k, (kind, dtype, nbytes, root) in enumerate(ops)]
    return [trace(iteration(0.0), iteration(10.0), iteration(20.0)[:1], rank=rank, world_size=len(ranks))
            for rank in ranks]


def runtime_elements(kind: str, nbytes: int, size: int, p: int) -> int:
    """The element count the enforcer's runtime hands to OpPlan.validate (the op_plan buffer model)."""
    return nbytes // size // p if kind in ("all_gather", "reduce_scatter") else nbytes // size


def frozen() -> float:
    return 0.0


def test_a_traced_job_of_every_dtype_gets_a_searched_plan_of_every_op():
    traces = traced(OPS)
    job = plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen)
    plan = job.plan
    assert [(o.key.seq, o.key.kind, o.key.dtype, o.key.nbytes, o.key.root) for o in plan.ops] == [
        (k, PLAN_KIND[kind], dtype, nbytes, root) for k, (kind, dtype, nbytes, root) in enumerate(OPS)
        if dtype != "int16"]        # gloo has no int16 collective: the enforcer runs it as traced
    for entry in plan.ops:
        size = DTYPE_BYTES[entry.key.dtype]
        assert {m.element_bytes for m in entry.motifs} == {size}, entry.key
        entry.validate(runtime_elements(entry.key.kind, entry.key.nbytes, size, len(WORLD)))
    (skipped,) = passed_through(traces, plan)
    assert "no int16 collective" in skipped.reason
    assert Plan.parse(plan.to_json()) == plan
    assert plan_from_proto(plan_to_proto(plan)) == plan
    assert running_choice(job.problem, plan) is not None        # the service prices the running plan back


def test_the_dag_counts_each_op_in_its_own_elements():
    dag = dag_from_traces(traced(OPS))
    for k, (kind, dtype, nbytes, root) in enumerate(OPS):
        node = dag.nodes[dag.index[f"{kind}#{k}"]]
        size = DTYPE_BYTES[dtype]
        blocks = len(WORLD) if COMM_KINDS[kind] is Collective.ALL_TO_ALL else 1
        assert (node.dtype, node.comm.element_bytes, node.comm.elements) == (dtype, size, nbytes // size // blocks)
        assert (node.passthrough != "") == (dtype == "int16")


def test_a_buffer_that_is_not_equal_blocks_of_whole_elements_passes_through():
    ops = [("all_to_all_single", "int64", 3 * 8, 0), ("all_reduce", "float32", 400, 0)]
    traces = traced(ops)
    a2a = dag_from_traces(traces).nodes[1]
    assert a2a.passthrough == "24 bytes are not 4 equal block(s) of whole int64 elements (8 bytes each)"
    job = plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen)
    assert [(o.key.kind, o.key.seq) for o in job.plan.ops] == [("all_reduce", 1)]
    assert [(p.kind, p.reason) for p in passed_through(traces, job.plan)] == [("all_to_all_single", NOT_IN_PLAN)]


def test_a_dtype_no_plan_names_is_priced_by_its_bytes_and_passes_through():
    traces = traced([("all_reduce", "complex64", 800, 0), ("all_reduce", "float32", 400, 0)])
    node = dag_from_traces(traces).nodes[1]
    assert (node.dtype, node.comm.element_bytes, node.comm.elements) == ("", 4, 200)
    assert node.passthrough.startswith("dtype 'complex64' is not one a plan carries")
    job = plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen)
    assert [(o.key.seq, o.key.dtype) for o in job.plan.ops] == [(1, "float32")]


# ----------------------------------------------------------------- pricing
@pytest.mark.parametrize("kind", list(Collective))
def test_a_2_byte_op_of_n_elements_costs_what_a_4_byte_op_of_n_over_2_does(kind):
    cost = MotifCostModel(TOPOLOGY)
    ranks = (0, 1, 8, 9, 16, 17, 24, 25)               # across the nodes: the NICs count
    n = 8 * 2 ** 14
    half, whole = comm_op(kind, ranks, n, 2), comm_op(kind, ranks, n // 2, 4)
    assert cost.seconds(half) == cost.seconds(whole) > cost.seconds(comm_op(kind, ranks, n // 2, 2))
    assert moved_bytes(half) == moved_bytes(whole)


def test_every_option_of_a_2_byte_op_costs_what_the_same_option_of_the_4_byte_op_does():
    """Same bytes, same options (segment counts, splines, channels, P² programs), same prices."""
    topology = Topology.from_yaml(cluster_topology("t", 2, 4, 25e6, 25e6, 1e9))
    cost = MotifCostModel(topology)
    ops = {size: comm_op(Collective.ALL_REDUCE, range(8), 2 ** 20 * 4 // size, size) for size in (1, 2, 4, 8)}
    priced = {}
    for size, whole in ops.items():
        problem = Problem(TrainingDAG("one", (compute("c", 0.0), comm("ar", Collective.ALL_REDUCE, range(8),
                                                                        whole.elements, "c",
                                                                        dtype={1: "int8", 2: "bfloat16", 4: "float32",
                                                                               8: "float64"}[size]))), cost)
        options = problem.options[0]
        assert all(m.element_bytes == size for o in options for m in motifs_of(o.plan))
        assert any(o.base.startswith("p2-") for o in options)
        priced[size] = [(o.name, t.isolated) for o, t in zip(options, problem.templates[0])]
    assert priced[1] == priced[2] == priced[4] == priced[8]


def test_a_1_byte_op_is_not_cut_into_more_segments_than_a_4_byte_op_of_its_bytes():
    for fp32_elements in (1, 2, 3, 5, 8, 100):
        names = {size: [o.name for o in options_for(comm_op(Collective.ALL_REDUCE, range(4), fp32_elements * 4 // size,
                                                            size), TOPOLOGY)]
                 for size in (1, 4)}
        assert names[1] == names[4], fp32_elements


def test_p2_programs_are_synthesized_for_the_op_real_bytes():
    topology = Topology.from_yaml(cluster_topology("t", 2, 4, 25e6, 25e6, 1e9))
    programs = p2_programs(comm_op(Collective.ALL_REDUCE, range(8), 4096, 2), topology)
    assert programs and all(m.element_bytes == 2 for plan in programs for m in motifs_of(plan))
    # The same programs as for the fp32 op of as many bytes, on twice the elements.
    fp32 = p2_programs(comm_op(Collective.ALL_REDUCE, range(8), 2048), topology)
    shape = [[(m.kind, m.ranks, tuple((2 * a, 2 * b) for a, b in m.ranges)) for m in motifs_of(plan)] for plan in fp32]
    assert shape == [[(m.kind, m.ranks, m.ranges) for m in motifs_of(plan)] for plan in programs]


# ------------------------------------------------------------- rule plans
def test_the_rule_plan_keys_each_op_with_its_dtype_and_counts_its_elements():
    traces = traced(OPS)
    plan = plan_from_trace(traces[0], segments=2, channels=2)
    assert [(o.key.kind, o.key.dtype, o.key.nbytes) for o in plan.ops] == [
        (PLAN_KIND[kind], dtype, nbytes) for kind, dtype, nbytes, _ in OPS if dtype != "int16"]
    for entry in plan.ops:
        size = DTYPE_BYTES[entry.key.dtype]
        assert {m.element_bytes for m in entry.motifs} == {size}
        entry.validate(runtime_elements(entry.key.kind, entry.key.nbytes, size, len(WORLD)))


def test_the_rule_plan_leaves_out_what_no_plan_carries():
    traces = traced([("all_reduce", "complex64", 800, 0), ("all_to_all_single", "int64", 24, 0),
                     ("all_reduce", "int8", 5, 0)])
    assert [(o.key.seq, o.key.dtype) for o in plan_from_trace(traces[0]).ops] == [(2, "int8")]
