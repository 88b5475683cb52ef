"""Every c10d op on the current world, recorded, for differential tests (imported by spawned ranks).

:func:`exercise` runs the whole torch.distributed API surface the enforcer
intercepts — on the world and on a subgroup, sync and async, for several sizes
and dtypes — and returns every result (or the error type, where gloo rejects a
combination). Running it once on ``gloo`` and once on ``p2enforcer`` and
comparing the two is the passthrough test.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

SIZES = (0, 1, 37, 1 << 16)
DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")
REDUCE_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG")


def data(rank: int, numel: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Small integer values, different per rank, exact in every dtype."""
    gen = torch.Generator().manual_seed(7919 * rank + 104729 * salt + numel)
    low, high = (0, 3) if dtype in (torch.uint8, torch.int8) else (-4, 5)
    return torch.randint(low, high, (numel,), generator=gen).to(dtype)


class Recorder:
    def __init__(self) -> None:
        self.results: dict[str, object] = {}

    def run(self, name: str, fn) -> None:
        if os.environ.get("P2_TEST_VERBOSE"):
            print(dist.get_rank(), name, flush=True)
        try:
            value = fn()
        except Exception as error:  # noqa: BLE001 — the error type is part of the behaviour
            value = ("error", type(error).__name__)
        self.results[name] = _plain(value)


def _plain(value):
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), value.tolist())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _wait(work, async_op: bool):
    if async_op:
        work.wait()
        return work.get_future().value() if hasattr(work, "get_future") else None
    return work


def exercise(group_ranks: list[int] | None = None, sizes=SIZES, dtypes=DTYPES) -> dict:
    """Every op on the world, then on a subgroup (``group_ranks``, made with
    ``new_group``); the results by name."""
    record = Recorder()
    _all_ops(record, None, sizes, dtypes, "world")
    if group_ranks is not None:
        group = dist.new_group(group_ranks)
        if dist.get_rank() in group_ranks:
            _all_ops(record, group, sizes[:3], dtypes[:2], "sub")
    record.run("barrier", lambda: dist.barrier())
    record.run("monitored_barrier", lambda: dist.monitored_barrier(timeout=timedelta(seconds=60)))
    return record.results


def _all_ops(record: Recorder, group, sizes, dtypes, label: str) -> None:
    rank = dist.get_rank()
    me = dist.get_group_rank(group, rank) if group is not None else rank
    size = dist.get_world_size(group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(size))
    last = ranks[-1]
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for numel in sizes:
            tag = f"{label}/{dtype_name}/{numel}"
            for op in REDUCE_OPS:
                for async_op in (False, True):
                    def all_reduce(op=op, async_op=async_op):
                        t = data(rank, numel, dtype)
                        work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=group, async_op=async_op)
                        return [t, _wait(work, async_op)]
                    record.run(f"{tag}/all_reduce/{op}/{async_op}", all_reduce)

            for async_op in (False, True):
                def broadcast(async_op=async_op):
                    t = data(rank, numel, dtype, 1)
                    work = dist.broadcast(t, src=last, group=group, async_op=async_op)
                    return [t, _wait(work, async_op)]
                record.run(f"{tag}/broadcast/{async_op}", broadcast)

                def reduce(async_op=async_op):
                    t = data(rank, numel, dtype, 2)
                    work = dist.reduce(t, dst=last, group=group, async_op=async_op)
                    _wait(work, async_op)
                    return t if rank == last else None
                record.run(f"{tag}/reduce/{async_op}", reduce)

                def all_gather(async_op=async_op):
                    out = [torch.empty(numel, dtype=dtype) for _ in range(size)]
                    work = dist.all_gather(out, data(rank, numel, dtype, 3), group=group, async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/all_gather/{async_op}", all_gather)

                def all_gather_into_tensor(async_op=async_op):
                    out = torch.empty(numel * size, dtype=dtype)
                    work = dist.all_gather_into_tensor(out, data(rank, numel, dtype, 4), group=group,
                                                       async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/all_gather_into_tensor/{async_op}", all_gather_into_tensor)

                def reduce_scatter(async_op=async_op):
                    out = torch.empty(numel, dtype=dtype)
                    inputs = [data(rank, numel, dtype, 5 + j) for j in range(size)]
                    work = dist.reduce_scatter(out, inputs, group=group, async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/reduce_scatter/{async_op}", reduce_scatter)

                def reduce_scatter_tensor(async_op=async_op):
                    out = torch.empty(numel, dtype=dtype)
                    work = dist.reduce_scatter_tensor(out, data(rank, numel * size, dtype, 6), group=group,
                                                      async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/reduce_scatter_tensor/{async_op}", reduce_scatter_tensor)

                def all_to_all(async_op=async_op):
                    out = [torch.empty(numel, dtype=dtype) for _ in range(size)]
                    inputs = [data(rank, numel, dtype, 7 + j) for j in range(size)]
                    work = dist.all_to_all(out, inputs, group=group, async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/all_to_all/{async_op}", all_to_all)

                def all_to_all_single(async_op=async_op):
                    out = torch.empty(numel * size, dtype=dtype)
                    work = dist.all_to_all_single(out, data(rank, numel * size, dtype, 8), group=group,
                                                  async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/all_to_all_single/{async_op}", all_to_all_single)

                def all_to_all_single_splits(async_op=async_op):
                    # member j sends (j + me) % 3 elements to member k... any consistent pattern:
                    send = [(me + k) % 3 + numel % 2 for k in range(size)]
                    receive = [(k + me) % 3 + numel % 2 for k in range(size)]
                    out = torch.empty(sum(receive), dtype=dtype)
                    work = dist.all_to_all_single(out, data(rank, sum(send), dtype, 9), receive, send,
                                                  group=group, async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/all_to_all_single_splits/{async_op}", all_to_all_single_splits)

                def gather(async_op=async_op):
                    out = [torch.empty(numel, dtype=dtype) for _ in range(size)] if rank == last else None
                    work = dist.gather(data(rank, numel, dtype, 10), out, dst=last, group=group, async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/gather/{async_op}", gather)

                def scatter(async_op=async_op):
                    inputs = [data(rank, numel, dtype, 11 + j) for j in range(size)] if rank == last else None
                    out = torch.empty(numel, dtype=dtype)
                    work = dist.scatter(out, inputs, src=last, group=group, async_op=async_op)
                    _wait(work, async_op)
                    return out
                record.run(f"{tag}/scatter/{async_op}", scatter)

            # A one-member ring would send to itself; gloo's own empty p2p
            # messages can hang (seen with batch_isend_irecv of 0 elements).
            if size > 1 and numel:
                record.run(f"{tag}/p2p", lambda: _ring_p2p(rank, ranks, numel, dtype, group))
                record.run(f"{tag}/batch_isend_irecv", lambda: _batch(rank, ranks, numel, dtype, group))
            record.run(f"{tag}/all_reduce_coalesced", lambda: _coalesced(rank, numel, dtype, group))



def _ring_p2p(rank: int, ranks: list[int], numel: int, dtype, group):
    """send/recv and isend/irecv around the ring; recv from any source on the last hop."""
    i = ranks.index(rank)
    right, left = ranks[(i + 1) % len(ranks)], ranks[(i - 1) % len(ranks)]
    got = torch.empty(numel, dtype=dtype)
    if i % 2 == 0:
        dist.send(data(rank, numel, dtype, 20), right, group=group)
        dist.recv(got, left, group=group)
    else:
        dist.recv(got, left, group=group)
        dist.send(data(rank, numel, dtype, 20), right, group=group)
    second = torch.empty(numel, dtype=dtype)
    works = [dist.isend(data(rank, numel, dtype, 21), right, group=group, tag=3),
             dist.irecv(second, left, group=group, tag=3)]
    for work in works:
        work.wait()
    third = torch.empty(numel, dtype=dtype)
    if i == 0:
        source = dist.recv(third, group=group, tag=4)            # any source
    else:
        source = None
        if i == len(ranks) - 1:
            dist.send(data(rank, numel, dtype, 22), ranks[0], group=group, tag=4)
    return [got, second, third if i == 0 else None, source]


def _batch(rank: int, ranks: list[int], numel: int, dtype, group):
    i = ranks.index(rank)
    right, left = ranks[(i + 1) % len(ranks)], ranks[(i - 1) % len(ranks)]
    got = torch.empty(numel, dtype=dtype)
    ops = [dist.P2POp(dist.isend, data(rank, numel, dtype, 23), right, group),
           dist.P2POp(dist.irecv, got, left, group)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return got


def _coalesced(rank: int, numel: int, dtype, group):
    tensors = [data(rank, numel, dtype, 24), data(rank, numel + 1, dtype, 25)]
    dist.all_reduce_coalesced(tensors, group=group)
    return tensors
