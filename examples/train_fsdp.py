"""Train a small residual MLP with FSDP2 (``fully_shard``): the one-word switch to ``p2enforcer``.

The model is a stack of pre-norm residual MLP blocks (LayerNorm, Linear,
GELU, Linear) and a linear head, about 396 K parameters. Every block is its
own FSDP unit and the root holds the head, so each step the backend sees the
sharded-parameter traffic FSDP2 issues: an ``all_gather_single`` (torch 2.13's
name for ``all_gather_into_tensor``) per unit in the forward pass, again per
block in the backward pass (blocks reshard after their forward), and a
``reduce_scatter_single`` of every unit's gradients.
FSDP2 runs on CPU with gloo (torch 2.13), so no GPU is needed.

Every rank builds the same model (fixed seed; FSDP2 shards it without
broadcasting), draws its own deterministic synthetic batches (seed + rank)
from a fixed random "teacher" network, and trains with SGD. Each step the loss
is averaged over the ranks (one more all-reduce) and rank 0 prints
``step K loss X``; with ``--json OUT`` rank 0 writes
``{"backend", "world_size", "steps", "losses", "seconds"}``.

Rendezvous is env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as set by
torchrun or ``p2 cluster run``:

    torchrun --nproc-per-node 4 examples/train_fsdp.py --backend gloo
    torchrun --nproc-per-node 4 examples/train_fsdp.py --backend p2enforcer
    p2 cluster run --name NAME -- python examples/train_fsdp.py

The default backend is ``$P2_EXAMPLE_BACKEND`` or ``p2enforcer``. After every
``optimizer.step()`` the script calls ``enforcer.step()`` when the enforcer
offers it: that marks the iteration boundary at which the enforcer may switch
to a newly committed plan.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

import enforcer  # registers the p2enforcer backend; step() marks iterations

DEFAULT_BACKEND = "p2enforcer"
# Teacher and student share one seed on every rank; the data seed is offset by the rank.
MODEL_SEED = 1234
DATA_SEED = 5678
# 3 blocks of 128 -> 512 -> 128 and a 128 -> 1 head: about 396 K parameters.
MODEL_WIDTH = 128
HIDDEN_WIDTH = 512
BLOCKS = 3
BATCH_SIZE = 64
LEARNING_RATE = 0.05


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


class ResidualBlock(nn.Module):
    """``x + W2 gelu(W1 layernorm(x))``: one FSDP unit."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.expand = nn.Linear(width, hidden)
        self.project = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.project(nn.functional.gelu(self.expand(self.norm(x))))


class ResidualMLP(nn.Module):
    def __init__(self, width: int, hidden: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ResidualBlock(width, hidden) for _ in range(blocks))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def shard(model: ResidualMLP) -> ResidualMLP:
    """Per-block FSDP2 units, then the root (which keeps the head and gathers it once per step)."""
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def synthetic_batches(rank: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's endless batches: inputs from seed ``DATA_SEED + rank``, targets from a fixed teacher MLP."""
    teacher = nn.Sequential(nn.Linear(MODEL_WIDTH, 64), nn.ReLU(), nn.Linear(64, 1))
    generator = torch.Generator().manual_seed(MODEL_SEED + 1)
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[-1]))
    generator = torch.Generator().manual_seed(DATA_SEED + rank)
    while True:
        inputs = torch.randn(BATCH_SIZE, MODEL_WIDTH, generator=generator)
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
    model = shard(ResidualMLP(MODEL_WIDTH, HIDDEN_WIDTH, BLOCKS))
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
        # The FSDP2 model lives on in reference cycles that hold the process group. Collect it so
        # the group goes down here: left to interpreter exit, about 1 run in 10 aborted with
        # "terminate called without an active exception" (torch 2.13, gloo, CPU; 0 in 60 with this).
        gc.collect()
        dist.destroy_process_group()
    if args.json and rank == 0:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
