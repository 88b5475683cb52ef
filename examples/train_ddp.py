"""Train a small MLP with DistributedDataParallel: the one-word switch to ``p2enforcer``.

Every rank builds the same model (fixed seed), draws its own deterministic
synthetic batches (seed + rank) from a fixed random "teacher" network, and
trains with SGD. DDP all-reduces the gradients in several buckets (a small
``bucket_cap_mb``), so the backend sees three gradient all-reduces per step.
Each step the loss is averaged over the ranks (one more all-reduce) and rank 0
prints ``step K loss X``; with ``--json OUT`` rank 0 writes
``{"backend", "world_size", "steps", "losses", "seconds"}``.

Rendezvous is env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as set by
torchrun or ``p2 cluster run``:

    torchrun --nproc-per-node 4 examples/train_ddp.py --backend gloo
    torchrun --nproc-per-node 4 examples/train_ddp.py --backend p2enforcer
    p2 cluster run --name NAME -- python examples/train_ddp.py

The default backend is ``$P2_EXAMPLE_BACKEND`` or ``p2enforcer``. After every
``optimizer.step()`` the script calls ``enforcer.step()`` when the enforcer
offers it: that marks the iteration boundary at which the enforcer may switch
to a newly committed plan.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import enforcer  # registers the p2enforcer backend; step() marks iterations

DEFAULT_BACKEND = "p2enforcer"
# Teacher and student share one seed on every rank; the data seed is offset by the rank.
MODEL_SEED = 1234
DATA_SEED = 5678
# 256 -> 512 -> 512 -> 256 -> 1: about 526 K parameters, 2.1 MB of fp32 gradients.
LAYER_WIDTHS = (256, 512, 512, 256, 1)
BATCH_SIZE = 64
LEARNING_RATE = 0.05
# 0.5 MB buckets: from step 2 on (DDP rebuilds its buckets in gradient order after step 1)
# the 2.1 MB of gradients go in three all-reduces of 0.53, 1.05 and 0.53 MB.
BUCKET_CAP_MB = 0.5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=os.environ.get("P2_EXAMPLE_BACKEND", DEFAULT_BACKEND),
                        help="torch.distributed backend (default: $P2_EXAMPLE_BACKEND or %(default)s)")
    parser.add_argument("--steps", type=int, default=20, help="training steps (default: %(default)s)")
    parser.add_argument("--json", metavar="OUT", help="rank 0 writes the losses and the time here")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot be used, or None (``import enforcer`` registers ``p2enforcer``)."""
    if backend.lower() in dist.Backend.backend_list:
        return None
    known = ", ".join(b for b in dist.Backend.backend_list if b != "undefined")
    return f"torch.distributed backend {backend!r} is not registered (known: {known})"


def build_mlp(widths: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def synthetic_batches(rank: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's endless batches: inputs from seed ``DATA_SEED + rank``, targets from a fixed teacher MLP."""
    teacher = build_mlp((LAYER_WIDTHS[0], 64, 1))
    generator = torch.Generator().manual_seed(MODEL_SEED + 1)
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[-1]))
    generator = torch.Generator().manual_seed(DATA_SEED + rank)
    while True:
        inputs = torch.randn(BATCH_SIZE, LAYER_WIDTHS[0], generator=generator)
        with torch.no_grad():
            targets = teacher(inputs)
        yield inputs, targets


def mark_iteration_boundary() -> None:
    # The enforcer switches plans only at iteration boundaries; older enforcers have no step().
    step = getattr(enforcer, "step", None)
    if step is not None:
        step()


def train(args: argparse.Namespace) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(MODEL_SEED)
    model = DistributedDataParallel(build_mlp(LAYER_WIDTHS), bucket_cap_mb=BUCKET_CAP_MB)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    batches = synthetic_batches(rank)
    losses = []
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        inputs, targets = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        # Averaged before the boundary so that every collective of step K belongs to iteration K.
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        optimizer.step()
        mark_iteration_boundary()
        losses.append(mean_loss.item() / world_size)
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    seconds = time.perf_counter() - start
    return {"backend": args.backend, "world_size": world_size, "steps": args.steps, "losses": losses,
            "seconds": seconds}


def write_json(path: str, result: dict) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as out:
        json.dump(result, out, indent=2)
        out.write("\n")
    os.replace(partial, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = backend_problem(args.backend)
    if problem:
        print(f"{os.path.basename(sys.argv[0])}: error: {problem}", file=sys.stderr)
        return 2
    dist.init_process_group(backend=args.backend)
    try:
        rank = dist.get_rank()
        result = train(args)
    finally:
        dist.destroy_process_group()
    if args.json and rank == 0:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
