"""What the training examples share: flags, synthetic data, the training loop, the JSON.

``train_ddp.py`` and ``train_fsdp.py`` differ only in the model and how it is
wrapped; each calls :func:`main` with its own description and model builder.
Every rank builds the same model (fixed seed), draws its own deterministic
synthetic batches (seed + rank) from a fixed random "teacher" network, and
trains with SGD. Each step the loss is averaged over the ranks (one more
all-reduce, before the iteration boundary so every collective of step K
belongs to iteration K) and rank 0 prints ``step K loss X``; with ``--json OUT``
rank 0 writes ``{"backend", "world_size", "steps", "losses", "seconds"}``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

import enforcer  # registers the p2enforcer backend; step() marks iterations

DEFAULT_BACKEND = "p2enforcer"
# Teacher and student share one seed on every rank; the data seed is offset by the rank.
MODEL_SEED = 1234
DATA_SEED = 5678
BATCH_SIZE = 64
LEARNING_RATE = 0.05


def parse_args(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description,
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


def synthetic_batches(rank: int, width: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's endless batches: inputs from seed ``DATA_SEED + rank``, targets from a fixed teacher MLP."""
    teacher = nn.Sequential(nn.Linear(width, 64), nn.ReLU(), nn.Linear(64, 1))
    generator = torch.Generator().manual_seed(MODEL_SEED + 1)
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[-1]))
    generator = torch.Generator().manual_seed(DATA_SEED + rank)
    while True:
        inputs = torch.randn(BATCH_SIZE, width, generator=generator)
        with torch.no_grad():
            targets = teacher(inputs)
        yield inputs, targets


def train(args: argparse.Namespace, build_model: Callable[[], nn.Module], width: int) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(MODEL_SEED)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    batches = synthetic_batches(rank, width)
    losses = []
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        inputs, targets = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        optimizer.step()
        enforcer.step()           # the iteration boundary, where the enforcer may switch plans
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


def main(description: str, build_model: Callable[[], nn.Module], width: int, argv: list[str] | None = None) -> int:
    args = parse_args(description, argv)
    problem = backend_problem(args.backend)
    if problem:
        print(f"{os.path.basename(sys.argv[0])}: error: {problem}", file=sys.stderr)
        return 2
    dist.init_process_group(backend=args.backend)
    try:
        rank = dist.get_rank()
        result = train(args, build_model, width)
    finally:
        # A wrapped model (FSDP2's especially) lives on in reference cycles that hold the
        # process group. Collect it so the group goes down here: left to interpreter exit,
        # about 1 FSDP2 run in 10 aborted with "terminate called without an active exception"
        # (torch 2.13, gloo, CPU; 0 in 60 with this).
        gc.collect()
        dist.destroy_process_group()
    if args.json and rank == 0:
        write_json(args.json, result)
    return 0
