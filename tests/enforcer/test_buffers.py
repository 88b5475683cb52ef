"""The buffer adapters of planned ops, and a one-rank PlanRuntime's lifecycle, without processes."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from enforcer.runtime.buffers import BUFFERS, AllGatherBuffer, AllReduceBuffer, ReduceScatterBuffer
from enforcer.runtime.plan_runtime import PlanRuntime
from optimizer_service.plan import Collective, OpKey, OpPlan, Plan
from optimizer_service.plan.dtypes import DTYPE_BYTES
from optimizer_service.plan.motif import comm_op


def options(cls, op=dist.ReduceOp.SUM):
    opts = cls()
    opts.reduceOp = op
    return opts


def key(kind: str, nbytes: int, size: int = 2) -> OpKey:
    return OpKey(0, kind, nbytes, tuple(range(size)))


def test_one_adapter_per_plan_kind():
    assert sorted(BUFFERS) == ["all_gather", "all_reduce", "all_to_all", "broadcast", "reduce_scatter"]
    assert all(cls.kind == kind for kind, cls in BUFFERS.items())


def test_all_reduce_is_in_place_and_averages_floats_at_the_end():
    tensor = torch.arange(6.0).reshape(2, 3)
    io = AllReduceBuffer.adopt(([tensor], options(dist.AllreduceOptions, dist.ReduceOp.AVG)), key("all_reduce", 24),
                               2, 0)
    assert io is not None and (io.elements, io.nbytes) == (6, 24)
    io.begin()
    io.buffer += 1
    io.finish()
    assert torch.equal(tensor, (torch.arange(6.0).reshape(2, 3) + 1) / 2) and io.result == [tensor]


def test_unplannable_calls_pass_through():
    ints = torch.zeros(4, dtype=torch.int64)
    assert AllReduceBuffer.adopt(([ints], options(dist.AllreduceOptions, dist.ReduceOp.AVG)),
                                 key("all_reduce", 32), 2, 0) is None
    assert AllReduceBuffer.adopt(([ints, ints], options(dist.AllreduceOptions)), key("all_reduce", 32), 2, 0) is None
    assert AllReduceBuffer.adopt(([torch.zeros(4, 2).t()], options(dist.AllreduceOptions)),
                                 key("all_reduce", 32), 2, 0) is None
    broadcast = dist.BroadcastOptions()
    broadcast.rootRank = 1
    assert BUFFERS["broadcast"].adopt(([torch.zeros(4)], broadcast), key("broadcast", 16), 2, 0) is None
    assert AllGatherBuffer.adopt((torch.zeros(5), torch.zeros(2), None), key("all_gather", 20), 2, 0) is None


def test_all_gather_fills_its_own_block_first():
    output, input = torch.zeros(6), torch.tensor([7.0, 8.0, 9.0])
    io = AllGatherBuffer.adopt((output, input, None), key("all_gather", 24), 2, 1)
    assert io is not None and io.elements == 3
    io.begin()
    assert output.tolist() == [0, 0, 0, 7, 8, 9] and io.buffer.data_ptr() == output.data_ptr()


def test_reduce_scatter_works_on_a_copy_and_writes_its_block_back():
    output, input = torch.zeros(2), torch.arange(4.0)
    io = ReduceScatterBuffer.adopt((output, input, options(dist.ReduceScatterOptions, dist.ReduceOp.AVG)),
                                   key("reduce_scatter", 16), 2, 1)
    assert io is not None and (io.elements, io.nbytes) == (2, 16)
    io.begin()
    io.buffer *= 10
    assert input.tolist() == [0, 1, 2, 3]
    io.finish()
    assert output.tolist() == [10.0, 15.0]


def test_all_to_all_sees_blocks():
    output, input = torch.zeros(6), torch.arange(6.0)
    io = BUFFERS["all_to_all"].adopt((output, input, None), key("all_to_all", 24), 2, 0)
    io.begin()
    assert io.buffer.shape == (2, 3) and io.output.shape == (2, 3)
    assert BUFFERS["all_to_all"].adopt((output, torch.zeros(5), None), key("all_to_all", 20), 2, 0) is None


class Tracer:
    def __init__(self) -> None:
        self.completed: list[object] = []
        self.motifs: list[tuple[int, int]] = []

    def complete(self, record) -> None:
        self.completed.append(record)

    def wait(self, order: int, seconds: float) -> None:
        pass

    def now(self) -> float:
        return time.perf_counter()

    def motif(self, record, order: int, channel: int, waited: float, start: float, seconds: float) -> None:
        self.motifs.append((order, channel))


def one_rank_runtime(dtype: str = "", elements: int = 4) -> PlanRuntime:
    size = DTYPE_BYTES.get(dtype, 4)
    op = OpPlan.of(OpKey(0, "all_reduce", elements * size, (0,), 0, dtype),
                   comm_op(Collective.ALL_REDUCE, (0,), elements, size))
    plan = Plan(version=1, world_size=1, channels={0: None}, ops=(op,))
    group = SimpleNamespace(ranks=(0,), rank=lambda: 0, size=lambda: 1, installs=0, inner_names={"cpu": "gloo"},
                            store=None, timeout=timedelta(seconds=5), tracer=Tracer())
    return PlanRuntime(group, plan)


def test_the_runtime_starts_threads_only_when_started_and_stops_them_on_close():
    before = threading.active_count()
    runtime = one_rank_runtime()
    assert threading.active_count() == before
    runtime.start()
    assert threading.active_count() == before + 2      # one channel worker and the dispatcher
    tensor = torch.ones(4)
    record = SimpleNamespace(enforced=False, dtype="float32")
    work = runtime.submit("all_reduce", record, [tensor], options(dist.AllreduceOptions))
    assert work is not None and record.enforced
    work.wait()
    assert work.result() == [tensor] and runtime.group.tracer.completed == [record]
    assert runtime.group.tracer.motifs == [(0, 0)]          # the motif was timed
    runtime.close()
    assert threading.active_count() == before


@pytest.mark.parametrize("abort", [False, True])
def test_a_runtime_never_started_closes(abort):
    runtime = one_rank_runtime()
    runtime.close(abort=abort)
    assert runtime.submit("broadcast", SimpleNamespace(enforced=False), [torch.ones(4)], dist.BroadcastOptions()) \
        is None


def test_an_op_of_another_dtype_than_its_key_passes_through_logged_once(caplog):
    runtime = one_rank_runtime("bfloat16", elements=8)          # 16 bytes, as 8 float16 elements are
    runtime.start()
    for _ in range(2):
        record = SimpleNamespace(enforced=False, dtype="float16")
        tensor = torch.ones(8, dtype=torch.float16)
        assert runtime.submit("all_reduce", record, [tensor], options(dist.AllreduceOptions)) is None
        assert not record.enforced
        runtime.step()
    assert [r.getMessage() for r in caplog.records if "passing the op through" in r.getMessage()] == [
        "p2enforcer: plan op 0 (all_reduce of bfloat16 on group [0]) is for bfloat16 elements but the op's are "
        "float16; passing the op through"]
    record = SimpleNamespace(enforced=False, dtype="bfloat16")
    work = runtime.submit("all_reduce", record, [torch.ones(8, dtype=torch.bfloat16)], options(dist.AllreduceOptions))
    assert work is not None and record.enforced
    work.wait()
    runtime.close()
