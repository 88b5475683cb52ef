"""Run a function on N local ranks of a real torch.distributed world (tests, benchmarks).

The parent process starts a ``TCPStore`` server on a free port (``port=0``);
each rank is a spawned process that joins it, calls
``init_process_group(backend)`` (gloo by default) over loopback, runs ``target(*args)`` and sends
back its return value or its traceback. A rank that fails or hangs fails the
test with that rank's traceback; the others are killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import traceback
from collections.abc import Callable
from typing import Any

DEFAULT_TIMEOUT = 180.0


def _entry(rank: int, world_size: int, port: int, target: Callable, args: tuple, results, backend: str,
           env: dict[str, str]) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), **env})
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size)
        try:
            value = target(*args)
            dist.barrier()      # nobody closes its connections while a peer still reads
        finally:
            dist.destroy_process_group()
        results.put((rank, True, value))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, False, traceback.format_exc()))


def run_world(world_size: int, target: Callable, *args: Any, timeout: float = DEFAULT_TIMEOUT,
              backend: str = "gloo", env: dict[str, str] | None = None) -> list[Any]:
    """``target(*args)`` on every rank of a ``backend`` world (``env`` in each
    rank's environment from its start); returns the values in rank order."""
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_entry, args=(r, world_size, server.port, target, args, results, backend, env or {}), daemon=True)
             for r in range(world_size)]
    # Spawned ranks inherit the environment at start: set ``env`` there too, so
    # settings read when a rank imports its modules (before ``_entry`` runs) see it.
    saved = {name: os.environ.get(name) for name in env or {}}
    os.environ.update(env or {})
    try:
        for proc in procs:
            proc.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    values: dict[int, Any] = {}
    try:
        while len(values) < world_size:
            try:
                rank, ok, value = results.get(timeout=timeout)
            except queue.Empty:
                missing = sorted(set(range(world_size)) - set(values))
                raise AssertionError(f"ranks {missing} did not finish within {timeout:.0f} s") from None
            if not ok:
                raise AssertionError(f"rank {rank} failed:\n{value}")
            values[rank] = value
    finally:
        for proc in procs:
            proc.join(timeout=10 if len(values) == world_size else 0.1)
            if proc.is_alive():
                proc.kill()
                proc.join()
        del server
    return [values[r] for r in range(world_size)]
