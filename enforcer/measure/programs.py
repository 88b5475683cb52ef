"""Time lowered programs on a running job: ``python -m enforcer.measure.programs SPEC OUT``.

Started on every rank by ``p2 bench reduce`` and ``p2 calibrate`` through the
emulated cluster's launcher (torch's usual ``RANK``/``WORLD_SIZE``/
``MASTER_ADDR``… environment). ``SPEC`` is JSON::

    {"warmup": 1, "repeat": 3,
     "runs": [{"id": "...", "program": "<LoweredProgram text>",
               "groups": [[0, 1, 2, 3], ...], "bytes": 16777216, "channel": 0}]}

``groups`` are the reduction groups the program must reduce over: the result
is checked against the exact sum after the first run of every program (inputs
are small integers in float32, so sums are exact). ``channel`` ``c`` runs the
program over process groups bound to the ``c``-th interface of
``P2_CHANNEL_IFNAMES`` (the emulated cluster's ``nic0,nic1``).

One measurement: every rank copies its pristine input into a work buffer,
all meet at a barrier, each times its own run, and the run's time is the
slowest rank's (a reduction is done when the last rank is). Every program first
runs ``warmup`` times untimed (at least once: that run is the one checked);
then ``repeat`` rounds each time every program once, so slow drifts of the
machine (another process, page cache, CPU frequency) spread over all programs
instead of favouring whichever ran first. Rank 0 prints one progress line per
round and writes ``OUT``::

    {"world_size": 8, "runs": [{"id": "...", "seconds": [...], "median": ...}]}
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from enforcer.comm.subgroups import GroupCache
from enforcer.programs.executor import ProgramExecutor
from enforcer.settings import EnforcerSettings
from optimizer_service.plan.lowered import LoweredProgram

ELEMENT = torch.float32


def _inputs(numel: int, rank: int) -> torch.Tensor:
    return (torch.arange(numel, dtype=torch.int64) % 13 + rank).to(ELEMENT)


def _expected(numel: int, group: list[int]) -> torch.Tensor:
    return (torch.arange(numel, dtype=torch.int64) % 13 * len(group) + sum(group)).to(ELEMENT)


def _channel_interfaces() -> list[str | None]:
    return list(EnforcerSettings.from_env().channel_ifnames) or [None]


def measure(spec: dict) -> list[dict]:
    rank = dist.get_rank()
    interfaces = _channel_interfaces()
    runs = spec["runs"]
    programs = [LoweredProgram.parse(run["program"]) for run in runs]
    executors: dict[int, ProgramExecutor] = {}
    for channel in sorted({int(run.get("channel", 0)) for run in runs}):
        if channel >= len(interfaces):
            raise SystemExit(f"channel {channel} needs a second NIC; this cluster has "
                             f"{len(interfaces)} channel(s) (P2_CHANNEL_IFNAMES={','.join(map(str, interfaces))})")
        executors[channel] = ProgramExecutor(GroupCache(interfaces[channel] if channel else None))
        executors[channel].prepare(p for p, run in zip(programs, runs) if int(run.get("channel", 0)) == channel)
    warmup, repeat = int(spec.get("warmup", 1)), int(spec.get("repeat", 3))
    pristine: dict[int, torch.Tensor] = {}
    slowest = torch.zeros(1, dtype=torch.float64)
    started = time.perf_counter()

    def once(run: dict, program: LoweredProgram, check: bool) -> float:
        numel = int(run["bytes"]) // ELEMENT.itemsize
        if numel not in pristine:
            pristine[numel] = _inputs(numel, rank)
        work = pristine[numel].clone()
        dist.barrier()
        t0 = time.perf_counter()
        executors[int(run.get("channel", 0))].run(program, work)
        slowest[0] = time.perf_counter() - t0
        if check:
            group = next((g for g in run["groups"] if rank in g), [rank])
            if not torch.equal(work, _expected(numel, group)):
                raise SystemExit(f"rank {rank}: {run['id']} gave a wrong result (program {run['program']})")
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest[0])

    for run, program in zip(runs, programs):
        for attempt in range(max(1, warmup)):
            once(run, program, check=attempt == 0)
    if rank == 0:
        print(f"checked {len(runs)} programs against the exact sum ({time.perf_counter() - started:.0f} s)",
              flush=True)
    times: list[list[float]] = [[] for _ in runs]
    for number in range(repeat):
        for index, (run, program) in enumerate(zip(runs, programs)):
            times[index].append(once(run, program, check=False))
        if rank == 0:
            print(f"round {number + 1}/{repeat} of {len(runs)} programs done "
                  f"({time.perf_counter() - started:.0f} s elapsed)", flush=True)
    results = [{"id": run["id"], "seconds": seconds, "median": statistics.median(seconds)}
               for run, seconds in zip(runs, times)]
    return results


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m enforcer.measure.programs SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        results = measure(spec)
        if dist.get_rank() == 0:
            out = Path(argv[1])
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps({"world_size": dist.get_world_size(), "runs": results}, indent=1))
            tmp.replace(out)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
