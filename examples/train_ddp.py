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
``optimizer.step()`` the script calls ``enforcer.step()``: that marks the
iteration boundary at which the enforcer may switch to a newly committed plan.
The flags, data and loop are shared with the other example (``training.py``).
"""

from __future__ import annotations

import sys

from torch import nn
from torch.nn.parallel import DistributedDataParallel

import training

# 256 -> 512 -> 512 -> 256 -> 1: about 526 K parameters, 2.1 MB of fp32 gradients.
LAYER_WIDTHS = (256, 512, 512, 256, 1)
# 0.5 MB buckets: from step 2 on (DDP rebuilds its buckets in gradient order after step 1)
# the 2.1 MB of gradients go in three all-reduces of 0.53, 1.05 and 0.53 MB.
BUCKET_CAP_MB = 0.5


def build_mlp(widths: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if index < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def build_model() -> DistributedDataParallel:
    return DistributedDataParallel(build_mlp(LAYER_WIDTHS), bucket_cap_mb=BUCKET_CAP_MB)


def main(argv: list[str] | None = None) -> int:
    return training.main(__doc__, build_model, LAYER_WIDTHS[0], argv)


if __name__ == "__main__":
    sys.exit(main())
