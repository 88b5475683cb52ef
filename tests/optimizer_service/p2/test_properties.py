"""Property-based tests over random small hierarchies and axes."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer_service.hardware.topology import Topology
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.placement import ParallelismMatrix, count_matrices, enumerate_matrices
from optimizer_service.p2.planner import Planner
from optimizer_service.p2.program import Program
from optimizer_service.p2.semantics import DeviceState
from optimizer_service.plan.lowered import LoweredProgram

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def hierarchy_and_axes(draw, max_levels=3, max_axes=3):
    hierarchy = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=1, max_size=max_levels)))
    devices = math.prod(hierarchy)
    primes = []
    n = devices
    for p in (2, 3):
        while n % p == 0:
            primes.append(p)
            n //= p
    count = draw(st.integers(1, max_axes))
    assignment = draw(st.lists(st.integers(0, count - 1), min_size=len(primes), max_size=len(primes)))
    axes = [1] * count
    for p, a in zip(primes, assignment):
        axes[a] *= p
    return hierarchy, tuple(axes)


@SETTINGS
@given(hierarchy_and_axes())
def test_matrices_satisfy_the_product_constraints(case):
    hierarchy, axes = case
    matrices = list(enumerate_matrices(hierarchy, axes))
    assert len(matrices) == count_matrices(hierarchy, axes) >= 1
    assert len(set(matrices)) == len(matrices)
    for matrix in matrices:
        assert matrix.hierarchy == hierarchy and matrix.axes == axes
        assert ParallelismMatrix.parse(str(matrix)) == matrix
    assert matrices == list(enumerate_matrices(hierarchy, axes)), "deterministic"


def _topology(hierarchy):
    names = ["rack", "node", "gpu"][-len(hierarchy):]
    levels = [{"name": n, "cardinality": c} for n, c in zip(names, hierarchy)]
    links = [{"name": f"l{n}", "level": n, "bandwidth": f"{10 ** (i + 1)}GB/s", "latency": "5us"}
             for i, n in enumerate(names)]
    return Topology.from_dict({"name": "random", "levels": levels, "links": links})


@SETTINGS
@given(hierarchy_and_axes(), st.data())
def test_synthesis_is_deterministic_and_text_forms_round_trip(case, data):
    hierarchy, axes = case
    reduce = sorted(data.draw(st.sets(st.integers(0, len(axes) - 1), min_size=1)))
    topo = _topology(hierarchy)
    first = Planner().synthesize(topo, axes, reduce, nbytes=2**20)
    second = Planner().synthesize(topo, axes, reduce, nbytes=2**20)
    for a, b in zip(first.placements, second.placements):
        assert [str(r.program) for r in a.programs] == [str(r.program) for r in b.programs]
        assert SynthesisHierarchy.parse(str(a.hierarchy)) == a.hierarchy
        for ranked in a.programs[:5]:
            assert Program.parse(str(ranked.program)) == ranked.program
            assert LoweredProgram.parse(str(ranked.lowered)) == ranked.lowered


@SETTINGS
@given(st.integers(1, 8).flatmap(lambda k: st.lists(
    st.lists(st.integers(0, 1), min_size=k, max_size=k), min_size=k, max_size=k)))
def test_device_state_text_round_trips(matrix):
    state = DeviceState.from_matrix(matrix)
    assert DeviceState.parse(str(state)) == state
    assert state.to_matrix(len(matrix)) == [list(row) for row in matrix]
