"""The C++ motifs (cpp_ext/enforcer/motifs.cpp) and op buffers (op_buffer.cpp) against their Python twins.

* Multiproc (loopback gloo, 2, 3, 4 and 8 ranks): every motif of
  enforcer/comm/sendrecv.py, on all ranks and on a proper subset in shuffled order, in
  float32/float64/int64, empty, one element, uneven and empty parts, many
  segments and > 1 MiB: the C++ result equals sendrecv.py's bit for bit, and C++
  and Python ranks run one motif together (same tags, same message order).
* In process: a rank that is not a member and a wrong number of parts are
  one-line ValueErrors, as in sendrecv.py; every buffer adapter (incl. the calls
  that pass through) behaves as enforcer/runtime/buffers.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from enforcer.comm import sendrecv

from enforcer.group import native
from enforcer.runtime import buffers
from optimizer_service.plan import OpKey
from tests.enforcer import native_motif_ranks
from tests.support.multiproc import run_world

testing = getattr(native._native, "testing", None) if native.available() else None
pytestmark = pytest.mark.skipif(testing is None, reason=native.why_unavailable()
                                or "enforcer._native has no testing submodule; rebuild: cpp_ext/build_native.py")


# ----------------------------------------------------------------------------------------------- motifs, multiproc
@pytest.fixture(scope="module", params=[2, 3, 4, 8], ids=lambda world: f"{world}ranks")
def world_report(request) -> tuple[int, list[dict]]:
    """Every rank's report of native_motif_ranks.compare_motifs on a world of that size (run once per size)."""
    return request.param, run_world(request.param, native_motif_ranks.compare_motifs)


@pytest.mark.multiproc
@pytest.mark.slow
def test_every_cpp_motif_equals_p2p_bit_for_bit(world_report):
    world, reports = world_report
    sets = native_motif_ranks.member_sets(world)
    for rank, report in enumerate(reports):
        assert report["checked"] == sum(len(native_motif_ranks.cases(len(m))) for m in sets if rank in m) > 0
        assert report["exact"] > 0
    assert [line for report in reports for line in report["differences"]
            if "C++ differs" in line or "not the exact" in line] == []


@pytest.mark.multiproc
@pytest.mark.slow
def test_cpp_and_python_ranks_interoperate(world_report):
    world, reports = world_report
    assert sum(report["mixed"] for report in reports) > 0
    assert [line for report in reports for line in report["differences"] if "mixed" in line] == []


# --------------------------------------------------------------------------------------------- errors, in process
@pytest.fixture(scope="module")
def alone() -> dist.Backend:
    """A one-rank gloo backend on loopback (this process is rank 0 of it)."""
    options = dist.ProcessGroupGloo._Options()
    options._timeout = timedelta(seconds=10)
    options._devices = [dist.ProcessGroupGloo.create_device(interface="lo")]
    backend = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, options)
    yield backend
    backend.shutdown()


MOTIF_CALLS: dict[str, tuple[Callable, Callable]] = {     # (C++, Python) on (members, backend, rank)
    "reduce_scatter": (lambda m, b, r: testing.reduce_scatter([torch.ones(2)], m, b, r),
                       lambda m, b, r: sendrecv.reduce_scatter([torch.ones(2)], m, sendrecv.BackendPeers(b, m, r))),
    "all_gather": (lambda m, b, r: testing.all_gather([torch.ones(2)], m, b, r),
                   lambda m, b, r: sendrecv.all_gather([torch.ones(2)], m, sendrecv.BackendPeers(b, m, r))),
    "reduce": (lambda m, b, r: testing.reduce(torch.ones(2), m, b, r),
               lambda m, b, r: sendrecv.reduce(torch.ones(2), m, sendrecv.BackendPeers(b, m, r))),
    "broadcast": (lambda m, b, r: testing.broadcast(torch.ones(2), m, b, r),
                  lambda m, b, r: sendrecv.broadcast(torch.ones(2), m, sendrecv.BackendPeers(b, m, r))),
    "all_to_all": (lambda m, b, r: testing.all_to_all(torch.ones(1, 2), torch.zeros(1, 2), (0, 2), (0, 1), m, b, r),
                   lambda m, b, r: sendrecv.all_to_all(torch.ones(1, 2), torch.zeros(1, 2), (0, 2), (0, 1), m,
                                                  sendrecv.BackendPeers(b, m, r))),
}


def error_line(call: Callable, *args) -> str:
    with pytest.raises(ValueError) as caught:
        call(*args)
    return str(caught.value)


@pytest.mark.parametrize("motif", sorted(MOTIF_CALLS))
def test_a_rank_that_is_not_a_member_is_one_line_as_in_p2p(alone, motif):
    cpp, python = MOTIF_CALLS[motif]
    message = error_line(cpp, [5], alone, 0)
    assert message == error_line(python, [5], alone, 0) == "rank 0 is not a member of [5]"


@pytest.mark.parametrize("motif", ["reduce_scatter", "all_gather"])
def test_a_wrong_number_of_parts_is_one_line_as_in_p2p(alone, motif):
    parts = [torch.ones(2), torch.ones(2)]
    message = error_line(getattr(testing, motif), parts, [0], alone, 0)
    assert message == error_line(getattr(sendrecv, motif), parts, [0], sendrecv.BackendPeers(alone, [0], 0))
    assert message == f"{motif} needs one part per member (1), got 2"


def test_a_backend_not_made_for_the_members_is_one_line(alone):
    message = error_line(testing.broadcast, torch.ones(2), [0, 1], alone, 0)
    assert "\n" not in message and "the backend has 1 ranks" in message and "[0, 1]" in message


def test_one_member_motifs_run_alone(alone):
    buffer = torch.arange(5.0)
    testing.reduce(buffer, [0], alone, 0)
    testing.broadcast(buffer, [0], alone, 0)
    inputs, outputs = torch.arange(6.0).reshape(1, 6), torch.zeros(1, 6)
    testing.all_to_all(inputs, outputs, (1, 4), (0, 1), [0], alone, 0)
    assert buffer.tolist() == [0, 1, 2, 3, 4] and outputs.tolist() == [[0, 1, 2, 3, 0, 0]]


# ------------------------------------------------------------------------------------------ op buffers, in process
def options(cls, reduce_op=None, root=None):
    opts = cls()
    if reduce_op is not None:
        opts.reduceOp = reduce_op
    if root is not None:
        opts.rootRank = root
    return opts


def values(numel: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(numel)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=gen).bool()
    if not dtype.is_floating_point and not dtype.is_complex:
        return torch.randint(-50, 50, (numel,), generator=gen).to(dtype)
    return torch.randn(numel, generator=gen, dtype=dtype)


def strided(numel: int, dtype=torch.float32) -> torch.Tensor:
    """A non-contiguous tensor of ``numel`` elements (every other one of a longer tensor)."""
    return values(2 * numel, dtype)[::2]


# name -> (plan kind, make the call's (tensors, output, input, reduce_op, root), key root, size, rank)
SUM, AVG, MAX = dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX
BUFFER_CASES = {
    "all_reduce sum": ("all_reduce", lambda: ([values(6).reshape(2, 3)], None, None, SUM, 0), 0, 3, 1),
    "all_reduce avg float64": ("all_reduce", lambda: ([values(7, torch.float64)], None, None, AVG, 0), 0, 3, 2),
    "all_reduce sum int64": ("all_reduce", lambda: ([values(5, torch.int64)], None, None, SUM, 0), 0, 2, 0),
    "all_reduce empty": ("all_reduce", lambda: ([values(0)], None, None, SUM, 0), 0, 2, 0),
    "all_reduce avg int64 passes": ("all_reduce", lambda: ([values(4, torch.int64)], None, None, AVG, 0), 0, 2, 0),
    "all_reduce max passes": ("all_reduce", lambda: ([values(4)], None, None, MAX, 0), 0, 2, 0),
    "all_reduce premul passes": ("all_reduce", lambda: ([values(4)], None, None, dist._make_nccl_premul_sum(2.0), 0),
                                 0, 2, 0),
    "all_reduce two tensors passes": ("all_reduce", lambda: ([values(4), values(4)], None, None, SUM, 0), 0, 2, 0),
    "all_reduce strided passes": ("all_reduce", lambda: ([strided(4)], None, None, SUM, 0), 0, 2, 0),
    "broadcast": ("broadcast", lambda: ([values(6, torch.int64)], None, None, SUM, 1), 1, 3, 0),
    "broadcast other root passes": ("broadcast", lambda: ([values(6)], None, None, SUM, 2), 1, 3, 0),
    "broadcast strided passes": ("broadcast", lambda: ([strided(6)], None, None, SUM, 0), 0, 3, 0),
    "all_gather": ("all_gather", lambda: ([], torch.zeros(9), values(3), SUM, 0), 0, 3, 1),
    "all_gather 2-d": ("all_gather", lambda: ([], torch.zeros(3, 2, dtype=torch.int64), values(2, torch.int64), SUM, 0),
                       0, 3, 2),
    "all_gather wrong size passes": ("all_gather", lambda: ([], torch.zeros(8), values(3), SUM, 0), 0, 3, 1),
    "all_gather strided input passes": ("all_gather", lambda: ([], torch.zeros(6), strided(3), SUM, 0), 0, 2, 1),
    "reduce_scatter sum": ("reduce_scatter", lambda: ([], torch.zeros(2), values(6), SUM, 0), 0, 3, 1),
    "reduce_scatter avg": ("reduce_scatter", lambda: ([], torch.zeros(3, dtype=torch.float64),
                                                      values(9, torch.float64), AVG, 0), 0, 3, 2),
    "reduce_scatter strided input": ("reduce_scatter", lambda: ([], torch.zeros(2), strided(4), SUM, 0), 0, 2, 1),
    "reduce_scatter avg int64 passes": ("reduce_scatter", lambda: ([], torch.zeros(2, dtype=torch.int64),
                                                                   values(4, torch.int64), AVG, 0), 0, 2, 0),
    "reduce_scatter max passes": ("reduce_scatter", lambda: ([], torch.zeros(2), values(4), MAX, 0), 0, 2, 0),
    "reduce_scatter wrong size passes": ("reduce_scatter", lambda: ([], torch.zeros(3), values(4), SUM, 0), 0, 2, 0),
    "reduce_scatter strided output passes": ("reduce_scatter", lambda: ([], strided(2), values(4), SUM, 0), 0, 2, 0),
    "all_to_all": ("all_to_all", lambda: ([], torch.zeros(6), values(6), SUM, 0), 0, 3, 0),
    "all_to_all strided input": ("all_to_all", lambda: ([], torch.zeros(4, dtype=torch.int64),
                                                        strided(4, torch.int64), SUM, 0), 0, 2, 1),
    "all_to_all uneven passes": ("all_to_all", lambda: ([], torch.zeros(5), values(5), SUM, 0), 0, 2, 0),
    "all_to_all wrong output passes": ("all_to_all", lambda: ([], torch.zeros(4), values(6), SUM, 0), 0, 2, 0),
    "all_to_all strided output passes": ("all_to_all", lambda: ([], strided(4), values(4), SUM, 0), 0, 2, 0),
    # Dtypes (buffers.py: every dtype a plan names but int16; bool as its bytes; one dtype per call).
    "all_reduce sum bool": ("all_reduce", lambda: ([values(7, torch.bool)], None, None, SUM, 0), 0, 3, 1),
    "all_reduce sum bfloat16": ("all_reduce", lambda: ([values(7, torch.bfloat16)], None, None, SUM, 0), 0, 3, 1),
    "all_reduce avg float16": ("all_reduce", lambda: ([values(8, torch.float16)], None, None, AVG, 0), 0, 4, 3),
    "all_reduce sum uint8": ("all_reduce", lambda: ([values(5, torch.uint8)], None, None, SUM, 0), 0, 2, 0),
    "all_reduce avg bool passes": ("all_reduce", lambda: ([values(4, torch.bool)], None, None, AVG, 0), 0, 2, 0),
    "all_reduce avg int8 passes": ("all_reduce", lambda: ([values(4, torch.int8)], None, None, AVG, 0), 0, 2, 0),
    "all_reduce sum int16 passes": ("all_reduce", lambda: ([values(4, torch.int16)], None, None, SUM, 0), 0, 2, 0),
    "all_reduce sum complex64 passes": ("all_reduce", lambda: ([values(4, torch.complex64)], None, None, SUM, 0),
                                        0, 2, 0),
    "broadcast bool": ("broadcast", lambda: ([values(6, torch.bool)], None, None, SUM, 0), 0, 3, 2),
    "broadcast int16 passes": ("broadcast", lambda: ([values(6, torch.int16)], None, None, SUM, 0), 0, 3, 2),
    "all_gather bool": ("all_gather", lambda: ([], torch.zeros(6, dtype=torch.bool), values(3, torch.bool), SUM, 0),
                        0, 2, 1),
    "all_gather int16 passes": ("all_gather", lambda: ([], torch.zeros(6, dtype=torch.int16),
                                                       values(3, torch.int16), SUM, 0), 0, 2, 1),
    "all_gather two dtypes passes": ("all_gather", lambda: ([], torch.zeros(6, dtype=torch.float64), values(3), SUM, 0),
                                     0, 2, 1),
    "reduce_scatter sum bool": ("reduce_scatter", lambda: ([], torch.zeros(3, dtype=torch.bool),
                                                           values(9, torch.bool), SUM, 0), 0, 3, 1),
    "reduce_scatter sum int8": ("reduce_scatter", lambda: ([], torch.zeros(2, dtype=torch.int8),
                                                           values(4, torch.int8), SUM, 0), 0, 2, 1),
    "reduce_scatter avg bfloat16": ("reduce_scatter", lambda: ([], torch.zeros(2, dtype=torch.bfloat16),
                                                               values(4, torch.bfloat16), AVG, 0), 0, 2, 1),
    "reduce_scatter avg uint8 passes": ("reduce_scatter", lambda: ([], torch.zeros(2, dtype=torch.uint8),
                                                                   values(4, torch.uint8), AVG, 0), 0, 2, 0),
    "reduce_scatter two dtypes passes": ("reduce_scatter", lambda: ([], torch.zeros(2, dtype=torch.float64),
                                                                    values(4), SUM, 0), 0, 2, 0),
    "all_to_all bool": ("all_to_all", lambda: ([], torch.zeros(6, dtype=torch.bool), values(6, torch.bool), SUM, 0),
                        0, 3, 1),
    "all_to_all int16 passes": ("all_to_all", lambda: ([], torch.zeros(4, dtype=torch.int16),
                                                       values(4, torch.int16), SUM, 0), 0, 2, 0),
}


def python_args(kind: str, tensors, output, input, reduce_op, root) -> tuple:
    """The call's arguments as the Python group hands them to enforcer.runtime.buffers."""
    if kind == "all_reduce":
        return tensors, options(dist.AllreduceOptions, reduce_op=reduce_op)
    if kind == "broadcast":
        return tensors, options(dist.BroadcastOptions, root=root)
    if kind == "reduce_scatter":
        return output, input, options(dist.ReduceScatterOptions, reduce_op=reduce_op)
    return output, input, None


def call_tensors(call: tuple) -> list[torch.Tensor]:
    """The tensors of a call made by a BUFFER_CASES factory: its tensors, then output and input."""
    return call[0] + [t for t in call[1:3] if t is not None]


def bits(tensor: torch.Tensor | None):
    return None if tensor is None else (tensor.dtype, tuple(tensor.shape), tensor.contiguous().view(torch.uint8).tolist())


@pytest.mark.parametrize("name", sorted(BUFFER_CASES))
def test_op_buffers_equal_enforcer_buffers(name):
    kind, make, key_root, size, rank = BUFFER_CASES[name]
    cpp_call, py_call = make(), make()
    key = OpKey(0, kind, 0, tuple(range(size)), key_root)
    want = buffers.BUFFERS[kind].adopt(python_args(kind, *py_call), key, size, rank)
    got = testing.adopt_buffer(kind, *cpp_call, key_root, size, rank)
    assert (got is None) == (want is None) == name.endswith("passes")
    if want is None:
        return
    assert (got.elements, got.nbytes, got.size, got.rank) == (want.elements, want.nbytes, want.size, want.rank)
    assert got.buffer is None and got.output is None        # nothing readied before begin()
    # The Work's result is the call's tensor (all_reduce, broadcast) or its output, not a copy.
    assert [t.data_ptr() for t in got.result] == [(cpp_call[0] or [cpp_call[1]])[0].data_ptr()]
    got.begin()
    want.begin()
    assert bits(got.buffer) == bits(want.buffer) and bits(got.output) == bits(want.output)
    dtype = call_tensors(py_call)[0].dtype      # bool travels as its bytes (gloo sums bool bytewise)
    assert want.buffer.dtype == (torch.uint8 if dtype == torch.bool else dtype)
    # Where the buffer is (a view of) a call tensor in Python, it is the same one in C++.
    for got_t, want_t in ((got.buffer, want.buffer), (got.output, want.output)):
        if want_t is None:
            continue
        py_views = [i for i, t in enumerate(call_tensors(py_call)) if t.data_ptr() == want_t.data_ptr()]
        cpp_views = [i for i, t in enumerate(call_tensors(cpp_call)) if t.data_ptr() == got_t.data_ptr()]
        assert cpp_views == py_views
    for buffer in (got.buffer, want.buffer):                # what the motifs would do: a new value in every element
        buffer.mul_(3).add_(1)
    got.finish()
    want.finish()
    assert [bits(t) for t in call_tensors(cpp_call)] == [bits(t) for t in call_tensors(py_call)]
    assert [bits(t) for t in got.result] == [bits(t) for t in want.result]


def test_an_unknown_plan_kind_is_one_line():
    with pytest.raises(ValueError, match="^no buffer adapter for plan kind 'gather'; expected all_reduce"):
        testing.adopt_buffer("gather", [torch.ones(2)], None, None, SUM, 0, 0, 2, 0)
