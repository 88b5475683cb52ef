"""Rank-side bodies of the UCC lifecycle tests (imported by spawned ranks): a peer killed mid-job,
and backends and raw lib/context/team objects made and torn down again and again."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from enforcer.comm import ucc
from tests.ucc.ucc_ranks import TIMEOUT, store


def killed_peer(rank: int, size: int, port: int, seconds: float, results) -> None:
    """A spawned rank (no process group; the parent holds the store): after one good all-reduce the
    last rank kills itself; the others' next all-reduce must fail (not hang) once ``seconds`` have
    passed, and the backend refuses what follows. Puts ``(rank, report)`` on ``results``."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    client = dist.TCPStore("127.0.0.1", port, size, is_master=False)
    backend = ucc.create(dist.PrefixStore("killed/", client), rank, size, timedelta(seconds=seconds))
    t = torch.ones(8)
    backend.allreduce([t]).wait()
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        backend.allreduce([torch.ones(1 << 16)]).wait()
        first = "no error"
    except Exception as error:  # noqa: BLE001
        first = f"{type(error).__name__}: {error}"
    elapsed = time.monotonic() - start
    try:
        backend.allreduce([t]).wait()
        second = "no error"
    except Exception as error:  # noqa: BLE001
        second = f"{type(error).__name__}: {error}"
    backend.abort()
    results.put((rank, {"first": first, "elapsed": elapsed, "second": second}))


def process_resources() -> dict[str, int]:
    """Open file descriptors, threads and resident bytes of this process."""
    pid = os.getpid()
    with open(f"/proc/{pid}/statm") as statm:
        rss_pages = int(statm.read().split()[1])
    return {"fds": len(os.listdir(f"/proc/{pid}/fd")), "threads": len(os.listdir(f"/proc/{pid}/task")),
            "rss": rss_pages * os.sysconf("SC_PAGE_SIZE")}


def create_and_destroy(times: int) -> dict:
    """Make and tear down ``times`` UCC backends and as many raw lib/context/team triples (bindings),
    one collective on each; the process's fds, threads and RSS before (after one warm-up round) and after."""
    from enforcer import _ucc
    rank, size = dist.get_rank(), dist.get_world_size()

    def one_round(i: int) -> None:
        backend = ucc.create(store(f"churn/{i}/backend/"), rank, size, TIMEOUT)
        t = torch.full((1000,), float(rank))
        backend.allreduce([t]).wait()
        assert t[0].item() == size * (size - 1) / 2
        backend.shutdown()
        del backend
        lib = _ucc.Lib()
        context = _ucc.Context(lib, store(f"churn/{i}/ctx/"), rank, size, TIMEOUT)
        team = _ucc.Team(context, store(f"churn/{i}/team/"), rank, size, TIMEOUT)
        team.wait()
        request = _ucc.barrier(team)
        request.post()
        request.wait()
        del request, team, context, lib

    one_round(0)
    before = process_resources()
    for i in range(1, times + 1):
        one_round(i)
    after = process_resources()
    return {"before": before, "after": after}
