"""Time resharding programs on a running job: ``python -m enforcer.measure.reshard SPEC OUT``.

Started on every rank by ``p2 reshard --measure`` and ``benchmarks/resharding.py``
through the emulated cluster's launcher (torch's ``RANK``/``WORLD_SIZE``/
``MASTER_ADDR``… environment). ``SPEC`` is JSON::

    {"warmup": 1, "repeat": 3, "backend": "p2enforcer",
     "runs": [{"id": "...", "program": "<ReshardProgram text>"}]}

Every rank builds one :class:`enforcer.reshard.resharder.Resharder` per program first (its
subgroups are made once, in the same order everywhere). The global tensor is a
fixed function of the index, so every source rank cuts its shard from it and
every destination rank checks what it received, bit for bit, after the first
run of each program. Programs of one shape share one global tensor and one
shard per box (20 ranks × 45 programs of a 32 MiB tensor do not fit otherwise). One measurement: all ranks meet at a barrier, each times
its own run, and the run's time is the slowest rank's (a resharding is done
when its last receiver is). Programs run ``warmup`` times untimed (at least
once: that run is checked), then ``repeat`` rounds time every program once, so
drifts of the machine spread over all programs. Rank 0 prints a line per round
and writes ``OUT``::

    {"world_size": 16, "runs": [{"id": "...", "seconds": [...], "median": ...}]}
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from enforcer.reshard.resharder import Resharder
from optimizer_service.plan.resharding import Box, ReshardProgram

DTYPES = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32, 8: torch.float64}


def global_tensor(shape: tuple[int, ...], element_bytes: int) -> torch.Tensor:
    """The tensor every run reshards: a fixed function of the flat index."""
    values = torch.arange(math.prod(shape), dtype=torch.int64) % 251
    return values.to(DTYPES[element_bytes]).reshape(shape)


def _cut(tensor: torch.Tensor, box: Box) -> torch.Tensor:
    return tensor[tuple(slice(a, b) for a, b in zip(box.starts, box.stops))]


def _timed(resharder: Resharder, local: torch.Tensor | None, clock_group) -> float:
    """One run's time: the slowest rank's, from the barrier that starts it."""
    (seconds,) = resharder.run_timed(local, 1, dtype=DTYPES[resharder.program.element_bytes])
    elapsed = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=clock_group)
    return elapsed.item()


def measure(spec: dict) -> list[dict]:
    rank = dist.get_rank()
    clock_group = dist.new_group(backend="gloo")
    tensors: dict[tuple, torch.Tensor] = {}      # one global tensor per shape, one shard per box: programs share them
    runs = []
    for run in spec["runs"]:
        program = ReshardProgram.parse(run["program"])
        key = (program.shape, program.element_bytes)
        if key not in tensors:
            tensors[key] = global_tensor(program.shape, program.element_bytes)
        full = tensors[key]
        local = None
        if rank in program.sources:
            box = program.sources[rank]
            if (key, str(box)) not in tensors:
                tensors[(key, str(box))] = _cut(full, box).contiguous()
            local = tensors[(key, str(box))]
        expected = _cut(full, program.destinations[rank]) if rank in program.destinations else None
        runs.append((run["id"], Resharder(program), local, expected))
    for run_id, resharder, local, expected in runs:
        out = resharder(local, dtype=DTYPES[resharder.program.element_bytes])
        if expected is not None and not torch.equal(out, expected):
            raise AssertionError(f"{run_id}: rank {rank} received a wrong slice")
        for _ in range(spec["warmup"] - 1):
            resharder(local, dtype=DTYPES[resharder.program.element_bytes])
    seconds: dict[str, list[float]] = {run_id: [] for run_id, *_ in runs}
    for round_index in range(spec["repeat"]):
        for run_id, resharder, local, _ in runs:
            seconds[run_id].append(_timed(resharder, local, clock_group))
        if rank == 0:
            print(f"measure_reshard: round {round_index + 1}/{spec['repeat']} done", flush=True)
    return [{"id": run_id, "seconds": values, "median": statistics.median(values)}
            for run_id, values in seconds.items()]


def main(argv: list[str]) -> int:
    spec_path, out_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_path.read_text())
    dist.init_process_group(spec.get("backend", "p2enforcer"))
    try:
        runs = measure(spec)
        if dist.get_rank() == 0:
            out_path.write_text(json.dumps({"world_size": dist.get_world_size(), "runs": runs}))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
