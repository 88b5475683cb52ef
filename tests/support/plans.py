"""Plans for tests: a sample with every op kind, and hypothesis strategies for random ones."""

from __future__ import annotations

from hypothesis import strategies as st

from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op, on_channel, rewrite
from optimizer_service.plan.op_plan import OpKey, OpPlan, whole_op
from optimizer_service.plan.plan import Plan
from optimizer_service.syndicate.transforms import segment, spline_all_to_all, spline_ring, spline_tree


def pieces(d):
    """Segments of at most ``d`` elements (per part), ``d`` at least 1."""
    return lambda m: segment(m, max(1, d))


def sample_plan() -> Plan:
    """Every op kind, two channels (one bound to an interface), topology and prediction set."""
    tree = spline_tree(comm_op(Collective.ALL_REDUCE, range(4), 10), 2)
    a2a = on_channel(spline_all_to_all(comm_op(Collective.ALL_TO_ALL, range(3), 5), 2), 1)
    ops = (OpPlan.of(OpKey(0, "all_reduce", 40, (4, 5, 6, 7)), tree),
           OpPlan.of(OpKey(1, "all_reduce", 40, (4, 5, 6, 7)),
                     rewrite(segment(comm_op(Collective.ALL_REDUCE, range(4), 10), 4), spline_ring), base=4),
           OpPlan.of(OpKey(0, "all_to_all", 60, (2, 0, 1)), a2a, base=2),
           whole_op(OpKey(0, "broadcast", 28, (1, 3), root=1), 7, base=9),
           whole_op(OpKey(0, "all_gather", 0, (6,)), 0))
    return Plan(2, 8, {0: None, 1: "eth1"}, ops, topology="emulated-2x4", predicted_iteration_seconds=0.5)


@st.composite
def op_plans(draw, seq: int) -> OpPlan:
    """One all_reduce or all_to_all op on a random group of a world of 8, split at random."""
    p = draw(st.integers(1, 5))
    group = tuple(draw(st.permutations(range(8)))[:p])
    elements = draw(st.integers(0, 10 ** 6))
    kind = draw(st.sampled_from(["all_reduce", "all_to_all"]))
    motif = comm_op(Collective.ALL_REDUCE if kind == "all_reduce" else Collective.ALL_TO_ALL, range(p), elements)
    if kind == "all_reduce":
        step = draw(st.sampled_from([spline_ring, lambda m: spline_tree(m, 2), pieces(elements // 3)]))
    else:
        step = draw(st.sampled_from([lambda m: spline_all_to_all(m, 2), pieces(elements // 3)]))
    plan = rewrite(motif, step)
    plan = on_channel(plan, draw(st.integers(0, 2)))
    return OpPlan.of(OpKey(seq, kind, elements * 4, group), plan, base=draw(st.integers(0, 50)))


@st.composite
def plans(draw) -> Plan:
    """A whole plan for a world of 8: up to four ops, channels 0-2 (some bound), optional fields at random."""
    ops = tuple(draw(op_plans(seq)) for seq in range(draw(st.integers(0, 4))))
    interfaces = st.one_of(st.none(), st.sampled_from(["nic1", "eth0", "ib0"]))
    channels = {channel: draw(interfaces) for channel in range(3)}
    topology = draw(st.one_of(st.none(), st.text(min_size=1, max_size=20)))
    seconds = draw(st.one_of(st.none(), st.floats(0, 1e4, allow_nan=False, allow_infinity=False)))
    return Plan(draw(st.integers(1, 2 ** 40)), 8, channels, ops, topology=topology,
                predicted_iteration_seconds=seconds)
