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
``optimizer.step()`` the script calls ``enforcer.step()``: that marks the
iteration boundary at which the enforcer may switch to a newly committed plan.
The flags, data and loop are shared with the other example (``training.py``).
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

import training

# 3 blocks of 128 -> 512 -> 128 and a 128 -> 1 head: about 396 K parameters.
MODEL_WIDTH = 128
HIDDEN_WIDTH = 512
BLOCKS = 3

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



def build_model() -> ResidualMLP:
    return shard(ResidualMLP(MODEL_WIDTH, HIDDEN_WIDTH, BLOCKS))


def main(argv: list[str] | None = None) -> int:
    return training.main(__doc__, build_model, MODEL_WIDTH, argv)


if __name__ == "__main__":
    sys.exit(main())
