"""What each rank runs in the multiproc executor tests (imported by spawned ranks)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from enforcer.comm import sendrecv
from enforcer.programs.executor import ProgramExecutor
from optimizer_service.plan.lowered import LoweredProgram, flat_allreduce


def rank_input(rank: int, numel: int, dtype=torch.float32) -> torch.Tensor:
    """Integer-valued numbers, different on every rank, so sums are exact in floats."""
    gen = torch.Generator().manual_seed(1000 + rank)
    return torch.randint(-1000, 1000, (numel,), generator=gen).to(dtype)


def check_placements(cases: list[tuple[list[str], list[list[int]]]], sizes: list[int]) -> int:
    """``check_programs`` for every (programs, reduction groups) case."""
    return sum(check_programs(programs, groups, sizes) for programs, groups in cases)


def check_programs(programs: list[str], groups: list[list[int]], sizes: list[int]) -> int:
    """Every program's result equals gloo's flat AllReduce over ``groups`` and
    the exact sum; returns how many runs were checked."""
    rank = dist.get_rank()
    lowered = [LoweredProgram.parse(text) for text in programs]
    flat = flat_allreduce(groups)
    executor = ProgramExecutor()
    executor.prepare(lowered + [flat])
    mine = next(g for g in groups if rank in g)
    checked = 0
    for numel in sizes:
        expected = sum(rank_input(r, numel) for r in mine)
        reference = executor.run(flat, rank_input(rank, numel))
        assert torch.equal(reference, expected), f"flat AllReduce of {numel} elements is wrong"
        for text, program in zip(programs, lowered):
            result = executor.run(program, rank_input(rank, numel))
            if not torch.equal(result, reference):
                bad = (result != reference).nonzero().view(-1)[:5].tolist()
                raise AssertionError(f"'{text}' with {numel} elements differs from the flat "
                                     f"AllReduce at elements {bad}")
            checked += 1
    return checked


def _equal_or_fail(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    if not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()[:8]} want {want.tolist()[:8]}")


def check_p2p(members: list[int], sizes: list[int], dtype_name: str) -> None:
    """p2p ReduceScatter / AllGather / Reduce / Broadcast against gloo and exact sums."""
    dtype = getattr(torch, dtype_name)
    rank = dist.get_rank()
    group = dist.new_group(sorted(members))
    if rank not in members:
        return
    i = members.index(rank)
    total = sum(sizes)
    what = f"members {members} sizes {sizes} {dtype_name}"

    def inputs(r):
        return list(rank_input(r, total, dtype).split(sizes))

    exact = [sum(inputs(r)[j] for r in members) for j in range(len(members))]
    parts = inputs(rank)
    sendrecv.reduce_scatter(parts, members, group)
    _equal_or_fail(f"reduce_scatter {what}", parts[i], exact[i])
    if len(set(sizes)) == 1 and sizes[0] and members == sorted(members):
        gloo_out = torch.empty(sizes[0], dtype=dtype)
        dist.reduce_scatter(gloo_out, inputs(rank), group=group)
        _equal_or_fail(f"gloo reduce_scatter {what}", parts[i], gloo_out)

    parts = [torch.full((n,), -1, dtype=dtype) for n in sizes]
    parts[i].copy_(inputs(rank)[i])
    sendrecv.all_gather(parts, members, group)
    for j, r in enumerate(members):
        _equal_or_fail(f"all_gather part {j} {what}", parts[j], inputs(r)[j])
    if len(set(sizes)) == 1 and members == sorted(members):
        gathered = [torch.empty(sizes[0], dtype=dtype) for _ in members]
        dist.all_gather(gathered, inputs(rank)[i], group=group)
        for j in range(len(members)):
            _equal_or_fail(f"gloo all_gather {what}", parts[j], gathered[j])

    root = members[0]
    for segment_bytes in (sendrecv.CHAIN_SEGMENT_BYTES, max(4, total // 5)):
        data = rank_input(rank, total, dtype)
        sendrecv.reduce(data, members, group, segment_bytes=segment_bytes)
        gloo = rank_input(rank, total, dtype)
        dist.reduce(gloo, dst=root, group=group)
        if rank == root:
            _equal_or_fail(f"reduce {what}", data, sum(rank_input(r, total, dtype) for r in members))
            _equal_or_fail(f"gloo reduce {what}", data, gloo)
        data = rank_input(rank, total, dtype)
        sendrecv.broadcast(data, members, group, segment_bytes=segment_bytes)
        _equal_or_fail(f"broadcast {what}", data, rank_input(root, total, dtype))
