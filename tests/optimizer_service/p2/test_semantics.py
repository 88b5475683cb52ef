"""The Hoare rules of P² Figure 8, its worked examples, and Figure 4's invalid programs."""

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Level
from optimizer_service.p2.hierarchy import SynthesisHierarchy
from optimizer_service.p2.program import Form
from optimizer_service.p2.semantics import (
    DeviceState,
    apply_collective,
    apply_step,
    execute,
    final_context,
    initial_context,
    why_invalid,
)
from optimizer_service.plan.collective import Collective

S = DeviceState.parse
AR, RS, AG, RD, BC = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                      Collective.REDUCE, Collective.BROADCAST)


def run_on(collective, *states):
    result = apply_collective(collective, [S(s).entries for s in states])
    return None if result is None else [str(DeviceState(r)) for r in result]


# Figure 8's examples: 4 devices, the collective runs between devices 0 and 1.
def test_allreduce_adds_disjoint_contributions():
    assert run_on(AR, "0-3:0", "0-3:1") == ["0-3:0-1", "0-3:0-1"]


def test_reducescatter_splits_the_sum():
    assert run_on(RS, "0-3:0", "0-3:1") == ["0-1:0-1", "2-3:0-1"]


def test_allgather_unions_disjoint_rows():
    assert run_on(AG, "0-1:0-1", "2-3:0-1") == ["0-3:0-1", "0-3:0-1"]


def test_reduce_puts_the_sum_on_the_root_and_clears_the_rest():
    assert run_on(RD, "0-3:0", "0-3:1") == ["0-3:0-1", "-"]


def test_broadcast_copies_the_root():
    assert run_on(BC, "0-3:0-1", "-") == ["0-3:0-1", "0-3:0-1"]


@pytest.mark.parametrize("collective,states", [
    (AR, ("0-3:0", "0-1:1")),            # different rows
    (AR, ("0-3:0-1", "0-3:1")),          # device 1's data twice (Figure 4b)
    (RS, ("0-2:0", "0-2:1")),            # 3 chunks do not scatter over 2 devices
    (AG, ("0-1:0", "1-2:1")),            # overlapping rows
    (AG, ("0:0", "1-2:1")),              # different numbers of rows
    (RD, ("0-1:0", "2-3:1")),
    (BC, ("0-3:0", "0-3:1")),            # receiver has data the root lacks
    (BC, ("0-3:0-1", "0-3:0-1")),        # no information increase
])
def test_premises_reject(collective, states):
    assert run_on(collective, *states) is None
    context = tuple(S(s).entries for s in states)
    reason = why_invalid(collective, context, [(0, 1)])
    assert reason and "group {0, 1}" in reason


def test_figure_7_state():
    # 4 devices; 3 chunks: chunk 0 summed over devices 0,1; chunk 1 over 1,2; chunk 2 over 2,3.
    matrix = [[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1], [0, 0, 0, 0]]
    state = DeviceState.from_matrix(matrix)
    assert state.chunks == 3
    assert str(state) == "0:0-1 1:1-2 2:2-3"
    assert DeviceState.parse(str(state)) == state
    assert state.to_matrix(4) == matrix


# Figure 4, on the running example: [[1 1 2 2] [1 2 1 2]] reduced over parameter shards
# (axis 1) gives the synthesis hierarchy [(root,1), (server,2), (GPU,2)]; A0, A1 are GPUs of one CPU.
HIERARCHY = SynthesisHierarchy((Level("root", 1), Level("server", 2), Level("GPU", 2)))


def steps(*reductions):
    result = []
    for slice_name, form, collective in reductions:
        result.append((collective, HIERARCHY.groups(slice_name, Form.parse(form))))
    return result


def test_figure_4a_reducescatter_then_allreduce_is_invalid():
    with pytest.raises(InvalidInputError, match="step 2 .*different chunks"):
        execute(4, steps(("server", "InsideGroup", RS), ("server", "InsideGroup", AR)))


def test_figure_4b_allreduce_twice_is_invalid():
    with pytest.raises(InvalidInputError, match="step 2 .*twice"):
        execute(4, steps(("root", "InsideGroup", AR), ("server", "Parallel(root)", AR)))


def test_figure_3_programs_are_valid():
    final = final_context(4)
    for program in [
        steps(("root", "InsideGroup", AR)),                                                   # 3a
        steps(("server", "InsideGroup", AR), ("server", "Parallel(root)", AR)),               # 3b
        steps(("server", "InsideGroup", RD), ("server", "Master(root)", AR), ("server", "InsideGroup", BC)),  # 3c
    ]:
        assert execute(4, program)[-1] == final


def test_devices_outside_the_groups_keep_their_state():
    context = initial_context(4)
    after = apply_step(context, AR, [(0, 1)])
    assert after[2:] == context[2:]
