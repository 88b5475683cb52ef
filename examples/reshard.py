"""Move a sharded tensor from one device mesh to another (cross-mesh resharding,
Zhuang et al., MLSys 2023): plan it with the optimizer's planner, run the plan
with the enforcer on real ranks, check every destination's slice bit for bit,
and time it.

    .venv/bin/python examples/reshard.py                          # 8 local ranks on loopback
    .venv/bin/python examples/reshard.py --shape 64,48,32 --src "S^0RR@[[0,1],[2,3]]" \
        --dst "RS^01R@[[4,5],[6,7]]" --strategy local-allgather --algo naive
    p2 cluster run --name demo -- python examples/reshard.py --json reshard.json

Without a launcher (no ``RANK`` in the environment) it starts as many local
ranks as the meshes need (gloo on loopback); under ``torchrun`` or ``p2
cluster run`` each process is one rank of the job. Every rank plans the same
program — the planner is deterministic without a clock — and builds one
:class:`enforcer.reshard.resharder.Resharder` (collective: all ranks, subgroups made once).
The tensor is a fixed function of the element index, so each source rank cuts
its shard from it and each destination rank checks what it received. A run's
time is the slowest rank's; rank 0 prints the plan and the times, and with
``--json OUT`` writes ``{"shape", "src", "dst", "strategy", "algorithm",
"world_size", "tasks", "predicted_seconds", "seconds", "median_seconds"}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from enforcer.reshard.resharder import Resharder
from optimizer_service.catalog import load_topology
from optimizer_service.cli.reshard import default_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.resharding import Box, ReshardProgram, Strategy
from optimizer_service.resharding.planner import ALGORITHMS, plan_resharding
from optimizer_service.resharding.spec import parse_endpoint


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="512,512", help="global tensor shape (default 512,512)")
    parser.add_argument("--src", default="S^0R@2x2", help="source SPEC@MESH (default S^0R@2x2: a host per row)")
    parser.add_argument("--dst", default="RS^1@2x2", help="destination SPEC@MESH (default RS^1@2x2)")
    parser.add_argument("--topology", help="preset or YAML file (default: the emulated cluster fitting both meshes)")
    parser.add_argument("--algo", choices=ALGORITHMS, default="ensemble")
    parser.add_argument("--strategy", choices=[s.value for s in Strategy], default=Strategy.BROADCAST.value)
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "int64"], default="float32")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs after one checked run (default 3)")
    parser.add_argument("--backend", default=os.environ.get("P2_EXAMPLE_BACKEND", "gloo"))
    parser.add_argument("--json", dest="json_out", help="rank 0 writes the results here")
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> ReshardProgram:
    """The program every rank runs (the same on every rank: no clock, bounded by nodes only)."""
    shape = tuple(int(v) for v in args.shape.split(","))
    src_spec, src_mesh = parse_endpoint(args.src)
    dst_spec, dst_mesh = parse_endpoint(args.dst)
    topology = load_topology(args.topology) if args.topology else default_topology(src_mesh, dst_mesh)
    return plan_resharding(shape, src_spec, src_mesh, dst_spec, dst_mesh, topology, algorithm=args.algo,
                           strategy=args.strategy, element_bytes=getattr(torch, args.dtype).itemsize).program


def global_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return (torch.arange(math.prod(shape), dtype=torch.int64) % 251).to(dtype).reshape(shape)


def run_rank(program_text: str, dtype_name: str, repeats: int) -> dict:
    """One rank: reshard once and check, then ``repeats`` timed runs (the slowest rank's time each)."""
    program = ReshardProgram.parse(program_text)
    rank, dtype = dist.get_rank(), getattr(torch, dtype_name)
    full = global_tensor(program.shape, dtype)
    whole = Box.whole(program.shape)

    def cut(box: Box) -> torch.Tensor:
        return full[box.relative_to(whole)]

    local = cut(program.sources[rank]).contiguous() if rank in program.sources else None
    resharder = Resharder(program)
    out = resharder(local, dtype=dtype)
    if rank in program.destinations and not torch.equal(out, cut(program.destinations[rank])):
        raise AssertionError(f"rank {rank} received a wrong slice of [{program.destinations[rank]}]")
    seconds = []
    for elapsed in resharder.run_timed(local, repeats, out=out, dtype=dtype):
        slowest = torch.tensor([elapsed], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        seconds.append(slowest.item())
    return {"seconds": seconds, "role": "source" if local is not None else
            "destination" if out is not None else "idle"}


def report(args: argparse.Namespace, program: ReshardProgram, world: int, result: dict) -> None:
    print(f"{args.src} -> {args.dst}, shape {args.shape}, {args.strategy}, {args.algo}: {len(program.tasks)} unit "
          f"tasks on {world} ranks, predicted {program.predicted_seconds * 1e3:.3f} ms")
    for task in program.tasks:
        print(f"  {task}")
    median = statistics.median(result["seconds"]) if result["seconds"] else None
    runs = ", ".join(f"{s * 1e3:.3f}" for s in result["seconds"])
    print(f"every destination got exactly its slice; runs: {runs} ms")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "shape": list(program.shape), "src": args.src, "dst": args.dst, "strategy": args.strategy,
            "algorithm": args.algo, "world_size": world, "tasks": [str(t) for t in program.tasks],
            "predicted_seconds": program.predicted_seconds, "seconds": result["seconds"],
            "median_seconds": median}, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    try:
        program = plan(args)
    except InvalidInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    needed = max(program.ranks) + 1
    if "RANK" in os.environ:                     # torchrun / p2 cluster run: this process is one rank
        dist.init_process_group(args.backend)
        try:
            if dist.get_world_size() < needed:
                raise SystemExit(f"error: the meshes need {needed} ranks, the job has {dist.get_world_size()}")
            result = run_rank(str(program), args.dtype, args.repeats)
            if dist.get_rank() == 0:
                report(args, program, dist.get_world_size(), result)
            dist.barrier()
        finally:
            dist.destroy_process_group()
        return 0
    from deploy.local_world import run_world
    results = run_world(needed, run_rank, str(program), args.dtype, args.repeats, backend=args.backend)
    report(args, program, needed, results[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
