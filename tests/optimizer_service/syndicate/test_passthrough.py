"""Which ops of a traced iteration a plan leaves to the inner backend, and why (optimizer_service.syndicate.passthrough)."""

from __future__ import annotations

from optimizer_service.catalog import load_topology
from optimizer_service.plan.motif import Collective, motifs_of
from optimizer_service.plan.plan import Plan
from optimizer_service.plan.trace import passthrough_reason
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.passthrough import NOT_IN_PLAN, PassedThrough, passed_through, summary
from optimizer_service.syndicate.plan_import import running_choice
from tests.support.traces import op, trace

TOPOLOGY = load_topology("hgx2-4n")
WORLD = (0, 1, 2, 3)
REDUCE = "reduce is not one the enforcer plans (all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor, " \
         "all_to_all_single)"
BARRIER = "not a collective the search decomposes (timed as compute)"


def frozen() -> float:
    return 0.0


def hybrid_traces() -> list[dict]:
    """4 ranks on ``new_group`` subgroups: a reduce then a bucket all-reduce on the replica group
    ([0,1] / [2,3]), a gradient all-reduce on the peer group ([0,2] / [1,3]), a barrier, an int64
    sample count and the loss on the world."""
    def ops_of(rank: int, start: float) -> list[dict]:
        replica, peer = ((0, 1) if rank < 2 else (2, 3)), ((0, 2) if rank % 2 == 0 else (1, 3))
        barrier = dict(op("barrier", 0, start + 2.5, start + 2.75, WORLD), dtype="")
        count = dict(op("all_reduce", 8, start + 3.0, start + 3.25, WORLD), dtype="int64")
        return [op("reduce", 4096, start, start + 0.5, replica), op("all_reduce", 400_000, start + 0.75, start + 1.5,
                                                                     replica),
                op("all_reduce", 800_000, start + 1.75, start + 2.5, peer), barrier, count,
                op("all_reduce", 4, start + 3.5, start + 3.75, WORLD)]
    return [trace(ops_of(rank, 0.0), ops_of(rank, 10.0), ops_of(rank, 20.0)[:1], rank=rank, world_size=4)
            for rank in range(4)]


def test_the_reason_of_each_op_kind_and_dtype():
    assert passthrough_reason("all_reduce", "float32") == passthrough_reason("all_to_all_single", "int32") == ""
    assert passthrough_reason("all_gather", "float32") == (
        "all_gather is not one the enforcer plans (all_reduce, broadcast, all_gather_into_tensor, "
        "reduce_scatter_tensor, all_to_all_single)")
    assert passthrough_reason("barrier", "") == BARRIER
    for dtype in ("bfloat16", "float16", "float64", "int64", "int8", "uint8", "bool"):
        assert passthrough_reason("all_to_all_single", dtype) == passthrough_reason("all_reduce", dtype) == ""
    assert passthrough_reason("all_reduce", "int16") == (
        "the inner backend has no int16 collective, so the enforcer runs it as traced")
    assert passthrough_reason("all_reduce", "complex64") == (
        "dtype 'complex64' is not one a plan carries (float64, float32, float16, bfloat16, int64, int32, int16, int8, "
        "uint8, bool)")


def test_a_searched_plan_names_every_group_and_leaves_the_rest_with_its_reason():
    traces = hybrid_traces()
    job = plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen)
    # One key per parallel subgroup; a key's seq counts the group's collectives (the reduce is seq 0).
    # The int64 sample count is planned in its own 8-byte elements, like the float32 ops in theirs.
    assert sorted((op.key.group, op.key.seq, op.key.kind, op.key.dtype) for op in job.plan.ops) == [
        ((0, 1), 1, "all_reduce", "float32"), ((0, 1, 2, 3), 0, "all_reduce", "int64"),
        ((0, 1, 2, 3), 1, "all_reduce", "float32"), ((0, 2), 0, "all_reduce", "float32"),
        ((1, 3), 0, "all_reduce", "float32"), ((2, 3), 1, "all_reduce", "float32")]
    passed = passed_through(traces, job.plan)
    assert [(p.seq, p.kind, p.group, p.reason) for p in passed] == [
        (0, "reduce", (0, 1), REDUCE), (0, "reduce", (2, 3), REDUCE), (3, "barrier", WORLD, BARRIER)]
    assert passed[0].to_dict() == {"seq": 0, "kind": "reduce", "dtype": "float32", "bytes": 4096, "group": [0, 1],
                                   "reason": REDUCE}
    assert str(passed[2]) == f"barrier#3 on [0,1,2,3] (0 B): {BARRIER}"
    assert str(passed[0]) == f"reduce#0 on [0,1] (4,096 B float32): {REDUCE}"
    assert running_choice(job.problem, job.plan) is not None    # the reduces have no key, and no option to read


def test_ops_a_plan_has_no_entry_for_pass_through_too():
    passed = passed_through(hybrid_traces(), Plan(1, 4, {0: None}, ()))
    assert [(p.seq, p.group) for p in passed if p.reason == NOT_IN_PLAN] == [
        (1, (0, 1)), (1, (2, 3)), (2, (0, 2)), (2, (1, 3)), (4, WORLD), (5, WORLD)]
    assert len(passed) == 9


def test_the_summary_names_the_first_ops_and_counts_the_rest():
    entries = [PassedThrough(k, "reduce", "float32", 4, (0, 1), REDUCE).to_dict() for k in range(6)]
    assert summary([]) == "no op passes through"
    assert summary(entries[:1]) == f"1 op(s) pass through: reduce#0 on [0,1] (4 B float32): {REDUCE}"
    text = summary(entries, limit=2)
    assert text.startswith("6 op(s) pass through: reduce#0 on") and "reduce#1 on" in text
    assert text.endswith("; and 4 more") and "reduce#2" not in text


def test_a_broadcast_from_another_root_is_planned_under_its_own_group_and_root():
    ops = [op("broadcast", 40_000, 0.0, 0.5, root=1), op("all_reduce", 400, 1.0, 1.5)]
    later = [dict(o, issued=o["issued"] + 5, completed=o["completed"] + 5) for o in ops]
    traces = [trace(ops, later, ops[:1], rank=rank) for rank in (0, 1)]
    job = plan_job(traces, TOPOLOGY, budget=1, seed=0, clock=frozen)
    assert [(op.key.seq, op.key.kind, op.key.group, op.key.root) for op in job.plan.ops] == [
        (0, "broadcast", (0, 1), 1), (1, "all_reduce", (0, 1), 0)]
    job.plan.ops[0].validate(10_000)            # the motifs broadcast from group position 1
    assert passed_through(traces, job.plan) == []
    assert running_choice(job.problem, job.plan) is not None    # read back, as the service prices a running plan


def passed_and_planned_traces(backends: dict[str, str] | None = None) -> list[dict]:
    """4 ranks: a list-form reduce-scatter (no plan carries it), then an all-reduce of the same bytes."""
    def ops_of(start: float) -> list[dict]:
        return [op("reduce_scatter", 4_000_000, start, start + 1.0, WORLD),
                op("all_reduce", 4_000_000, start + 1.25, start + 2.25, WORLD)]
    traces = [trace(ops_of(0.0), ops_of(10.0), ops_of(20.0)[:1], rank=rank, world_size=4) for rank in range(4)]
    for one in traces:
        if backends is not None:
            one["inner_backends"] = backends
    return traces


def test_an_op_passed_through_is_priced_as_the_library_runs_it_and_offered_nothing_else():
    """The search cannot give a passed-through op a plan (the export leaves it to the inner backend), so
    it offers it one option, the library's own algorithm whole on channel 0 (as passthrough is priced);
    on gloo a list-form reduce-scatter is an AllReduce of its input (:mod:`.library_ops`)."""
    assert len(TOPOLOGY.channels) > 1
    job = plan_job(passed_and_planned_traces(), TOPOLOGY, budget=1, seed=0, clock=frozen)
    problem = job.problem
    passed, planned = (problem.dag.nodes[i] for i in problem.comm_nodes)
    assert passed.passthrough and not planned.passthrough
    assert passed.comm.kind is Collective.ALL_REDUCE and passed.comm.ranks == planned.comm.ranks
    assert passed.comm.elements == planned.comm.elements
    (only,), offered = problem.options[0], problem.options[1]
    assert only.name == offered[0].name == "ring@ch0" and only.plan == offered[0].plan
    assert len(offered) > 1 and {m.channel for o in offered for m in motifs_of(o.plan)} == set(TOPOLOGY.channels)
    assert all(result.choice[0] == 0 for result in job.results)
    assert [o.key.kind for o in job.plan.ops] == ["all_reduce"]         # the export still leaves it out
    on_ucc = plan_job(passed_and_planned_traces({"cpu": "ucc"}), TOPOLOGY, budget=1, seed=0, clock=frozen)
    scatter = on_ucc.problem.dag.nodes[on_ucc.problem.comm_nodes[0]].comm
    assert scatter.kind is Collective.REDUCE_SCATTER and len(on_ucc.problem.options[0]) == 1
