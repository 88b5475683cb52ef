"""Rank-side bodies of the raw-bindings tests (imported by spawned ranks): UCC's C API through
``enforcer._ucc`` — the Store all-gather, library, context, team and collective requests."""

from __future__ import annotations

import time
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT = timedelta(seconds=60)


def _store(prefix: str) -> dist.Store:
    return dist.PrefixStore(prefix, dist.distributed_c10d._get_default_store())


def oob_rounds(rounds: int) -> dict:
    """``rounds`` all-gathers on one StoreAllgather, members arriving at different moments; each
    round must return that round's payloads (never an earlier round's keys), and old keys go."""
    from enforcer import _ucc
    rank, size = dist.get_rank(), dist.get_world_size()
    root = dist.distributed_c10d._get_default_store()
    dist.barrier()
    keys_before = root.num_keys()
    dist.barrier()
    oob = _ucc.StoreAllgather(_store("oob-rounds/"), "ag", rank, size, TIMEOUT)
    wrong = []
    for r in range(rounds):
        time.sleep(((rank + r) % 3) * 0.002)            # members come in different orders every round
        got = oob.allgather(f"{r:04d}:{rank:02d}".encode())
        want = [f"{r:04d}:{m:02d}".encode() for m in range(size)]
        if got != want:
            wrong.append(f"round {r}: {got}")
    dist.barrier()
    return {"wrong": wrong, "rounds": oob.rounds, "new_keys": root.num_keys() - keys_before}


def _wait(team, request) -> None:
    request.post()
    while not request.test():
        pass
    request.finalize()


def raw_collectives(local_context: bool) -> list[str]:
    """Each collective of the bindings on a team of the world; what differs from the expected values.
    ``local_context``: a context made without a store (addresses then go through the team's OOB)."""
    from enforcer import _ucc
    rank, size = dist.get_rank(), dist.get_world_size()
    lib = _ucc.Lib()
    context = _ucc.Context(lib) if local_context else _ucc.Context(lib, _store("raw/ctx/"), rank, size, TIMEOUT)
    team = _ucc.Team(context, _store("raw/team/"), rank, size, TIMEOUT)
    while not team.test():          # non-blocking creation: post in the constructor, then test
        pass
    wrong = []

    def expect(name, got, want):
        if not torch.equal(got, want):
            wrong.append(f"rank {rank} {name}: {got.tolist()} != {want.tolist()}")

    t = torch.arange(5, dtype=torch.int64) + rank
    _wait(team, _ucc.allreduce(team, t, dist.ReduceOp.SUM))
    expect("allreduce", t, sum(torch.arange(5, dtype=torch.int64) + r for r in range(size)))
    t = torch.full((3,), float(rank))
    _wait(team, _ucc.allreduce(team, t, dist.ReduceOp.MAX, timeout=30.0))
    expect("allreduce MAX", t, torch.full((3,), float(size - 1)))
    t = torch.full((4,), rank, dtype=torch.int32)
    _wait(team, _ucc.broadcast(team, t, size - 1))
    expect("broadcast", t, torch.full((4,), size - 1, dtype=torch.int32))
    out = torch.empty(2 * size)
    _wait(team, _ucc.allgather(team, torch.full((2,), float(rank)), out))
    expect("allgather", out, torch.arange(size, dtype=torch.float32).repeat_interleave(2))
    out = torch.empty(2, dtype=torch.float64)
    _wait(team, _ucc.reduce_scatter(team, torch.arange(2 * size, dtype=torch.float64), out, dist.ReduceOp.SUM))
    expect("reduce_scatter", out, torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float64) * size)
    out = torch.empty(size, dtype=torch.int64)
    _wait(team, _ucc.alltoall(team, torch.arange(size, dtype=torch.int64) + 10 * rank, out))
    expect("alltoall", out, torch.arange(size, dtype=torch.int64) * 10 + rank)
    _wait(team, _ucc.barrier(team))
    return wrong
