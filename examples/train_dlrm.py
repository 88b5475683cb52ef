"""Train a DLRM-like recommendation model: sharded embedding tables (all-to-all) plus a DDP MLP (all-reduce).

The model has two halves, parallelized differently, as in DLRM and TorchRec:

* **Embedding tables, model-parallel, table-wise.** ``--tables`` tables of
  ``--rows`` rows × ``--dim`` (``nn.EmbeddingBag``, sum of ``--bag`` lookups
  per sample); rank r owns tables ``r·T/W`` … ``(r+1)·T/W − 1`` (T must be a
  multiple of the world size W). Each rank draws its own batch, then one
  ``all_to_all_single`` sends every table's indices to the table's owner, the
  owner pools the whole global batch for its tables, and a second
  ``all_to_all_single`` returns each rank its samples' pooled vectors. In the
  backward pass a third ``all_to_all_single`` returns those vectors' gradients
  to the owner, which updates its own tables (sparse Adagrad; no all-reduce).
* **Dense MLP, data-parallel.** A bottom MLP on the ``--dense`` features, the
  dot-product interaction of its output with the pooled vectors, and a top MLP
  to one click logit, wrapped in ``DistributedDataParallel``: its gradients
  are all-reduced in buckets during the backward pass.

Per rank and step the defaults move (the payload each rank hands to the
collective; independent of the world size):

======================  =========================================  ============
all_to_all_single       indices, int64: 16 tables × 128 × 8          131,072 B
                        pooled vectors, fp32: 16 × 128 × 64          524,288 B
                        their gradients (backward), fp32             524,288 B
all_reduce (DDP)        415,553 MLP parameters, fp32, 3 buckets    1,662,212 B
all_reduce              the loss                                         4 B
======================  =========================================  ============

About 1.2 MB of all-to-all and 1.7 MB of all-reduce per rank. On a 2 × 4
cluster with 200 Mbit/s NICs (25 MB/s, one per node) the all-to-all puts
2.4 MB through each NIC per step (about 95 ms) and a ring all-reduce 2.9 MB
(about 115 ms; less under a hierarchical plan), against about 20 ms of
computation per rank. The 16 tables hold 20.5 M parameters (82 MB), 4 per
rank on 4 ranks. Rank 0 prints these sizes once at start.

The data are synthetic and deterministic: dense features and skewed indices
(the first 1 % of a table's rows take a fifth of its lookups, as hot items do
in real categorical features) from seed + rank, click probabilities from a
fixed random teacher, binary cross-entropy.
Each step the loss is averaged over the ranks (one more all-reduce) and rank 0
prints ``step K loss X``; with ``--json OUT`` rank 0 writes
``{"backend", "world_size", "steps", "losses", "seconds", "model", "step_seconds",
"plan_versions"}`` (``model``: the sizes above; per step its wall time on rank 0
and the enforcer plan version it ran, 0 for passthrough).

Rendezvous is env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as set by
torchrun or ``p2 cluster run``:

    torchrun --nproc-per-node 4 examples/train_dlrm.py --backend gloo
    torchrun --nproc-per-node 4 examples/train_dlrm.py --backend p2enforcer
    p2 cluster run --name NAME -- python examples/train_dlrm.py

The default backend is ``$P2_EXAMPLE_BACKEND`` or ``p2enforcer``. After every
optimizer step the script calls ``enforcer.step()``: that marks the iteration
boundary at which the enforcer may switch to a newly committed plan. The
flags, start-up and step end are shared with the other examples
(``training.py``).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
import training
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from train_ddp import build_mlp

# The tables learn with sparse Adagrad, as DLRM implementations' tables usually do: a row's
# gradient holds only the few samples that looked it up (divided by the global batch), so
# plain SGD would need a step size in the hundreds; Adagrad scales each row's step itself.
EMBEDDING_LEARNING_RATE = 0.05
# 0.5 MB buckets: from step 2 on (DDP rebuilds its buckets in gradient order after step 1)
# the 1.66 MB of MLP gradients go in three all-reduces of 0.53, 1.00 and 0.13 MB.
BUCKET_CAP_MB = 0.5
# Index skew: row = floor(rows · u^HOT_ROW_EXPONENT), u uniform: the first 1 % of rows
# take a fifth of the lookups.
HOT_ROW_EXPONENT = 3.0


@dataclass(frozen=True)
class DLRMShape:
    """The model's sizes (the flags); per-rank traffic follows from them alone."""

    tables: int = 16
    rows: int = 20_000
    dim: int = 64
    dense: int = 64
    batch: int = 128          # samples per rank and step
    bag: int = 8              # lookups per table and sample (summed)
    bottom: tuple[int, ...] = (512, 256)
    top: tuple[int, ...] = (512, 256)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DLRMShape:
        return cls(args.tables, args.rows, args.dim, args.dense, args.batch, args.bag, args.bottom, args.top)

    @property
    def bottom_widths(self) -> tuple[int, ...]:
        return (self.dense, *self.bottom, self.dim)

    @property
    def top_widths(self) -> tuple[int, ...]:
        """The interaction: the bottom output and one dot product per pair of the T + 1 vectors."""
        return (self.dim + (self.tables + 1) * self.tables // 2, *self.top, 1)

    @property
    def mlp_parameters(self) -> int:
        return sum((fan_in + 1) * fan_out for widths in (self.bottom_widths, self.top_widths)
                   for fan_in, fan_out in itertools.pairwise(widths))

    @property
    def embedding_parameters(self) -> int:
        return self.tables * self.rows * self.dim

    def traffic(self) -> dict[str, int]:
        """Bytes each rank hands to the collectives per step."""
        pooled = self.tables * self.batch * self.dim * 4
        return {"all_to_all_index_bytes": self.tables * self.batch * self.bag * 8,
                "all_to_all_forward_bytes": pooled, "all_to_all_backward_bytes": pooled,
                "all_to_all_bytes": self.tables * self.batch * self.bag * 8 + 2 * pooled,
                "all_reduce_gradient_bytes": self.mlp_parameters * 4,
                "all_reduce_bytes": self.mlp_parameters * 4 + 4}

    def as_json(self) -> dict:
        return {**asdict(self), "embedding_parameters": self.embedding_parameters,
                "mlp_parameters": self.mlp_parameters, **self.traffic()}

    def describe(self, world_size: int) -> str:
        traffic = self.traffic()
        return (f"DLRM: {self.tables} tables x {self.rows} rows x {self.dim} ({self.tables // world_size} per rank, "
                f"{self.embedding_parameters:,} parameters), MLP {self.mlp_parameters:,} parameters; "
                f"per rank and step: all_to_all {traffic['all_to_all_bytes']:,} B "
                f"(indices {traffic['all_to_all_index_bytes']:,} + pooled {traffic['all_to_all_forward_bytes']:,}"
                f" + gradients {traffic['all_to_all_backward_bytes']:,}), "
                f"all_reduce {traffic['all_reduce_bytes']:,} B (gradients + loss)")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    default = DLRMShape()
    model = parser.add_argument_group("model size")
    for flag, help_text in (("tables", "embedding tables, a multiple of the world size"),
                            ("rows", "rows per table"), ("dim", "embedding dimension"),
                            ("dense", "dense features per sample"), ("batch", "samples per rank and step"),
                            ("bag", "lookups per table and sample, summed")):
        model.add_argument(f"--{flag}", type=positive_int, default=getattr(default, flag),
                           help=f"{help_text} (default: %(default)s)")
    for flag, where in (("bottom", "bottom MLP (dense -> ... -> dim)"), ("top", "top MLP (interaction -> ... -> 1)")):
        model.add_argument(f"--{flag}", type=widths, default=getattr(default, flag), metavar="W,W,...",
                           help=f"hidden widths of the {where} (default: {','.join(map(str, getattr(default, flag)))})")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def widths(text: str) -> tuple[int, ...]:
    return tuple(positive_int(part) for part in text.split(",")) if text else ()


def sharding_problem(args: argparse.Namespace) -> str | None:
    """Table-wise sharding gives every rank the same number of tables (so every all-to-all has even splits)."""
    world_size = os.environ.get("WORLD_SIZE", "")
    if world_size.isdigit() and int(world_size) > 0 and args.tables % int(world_size):
        return f"--tables {args.tables} is not a multiple of the world size {world_size}"
    return None


class AllToAll(torch.autograd.Function):
    """Even-split ``all_to_all_single`` along dim 0, differentiable.

    Block j of rank i's input becomes block i of rank j's output. The adjoint
    sends the gradient of rank j's block i back to rank i's block j: the same
    exchange, applied to the output's gradient.
    """

    @staticmethod
    def forward(ctx, blocks: torch.Tensor) -> torch.Tensor:
        return AllToAll.exchange(blocks)

    @staticmethod
    def backward(ctx, grad_exchanged: torch.Tensor) -> torch.Tensor:
        return AllToAll.exchange(grad_exchanged)

    @staticmethod
    def exchange(blocks: torch.Tensor) -> torch.Tensor:
        # Both sides contiguous: empty_like keeps a transposed gradient's strides, but the
        # collective reads and writes plain row-major blocks.
        blocks = blocks.contiguous()
        exchanged = torch.empty_like(blocks)
        dist.all_to_all_single(exchanged, blocks)
        return exchanged


class ShardedEmbeddingBags(nn.Module):
    """This rank's tables of a table-wise sharding; ``forward`` pools every table for this rank's batch."""

    def __init__(self, shape: DLRMShape, rank: int, world_size: int) -> None:
        super().__init__()
        self.world_size = world_size
        self.per_rank = shape.tables // world_size
        self.owned = range(rank * self.per_rank, (rank + 1) * self.per_rank)
        self.bags = nn.ModuleList(nn.EmbeddingBag(shape.rows, shape.dim, mode="sum", sparse=True)
                                  for _ in self.owned)
        bound = 1 / math.sqrt(shape.dim)
        with torch.no_grad():
            for table, bag in zip(self.owned, self.bags):
                # Seeded per table, so the tables are the same whatever the world size.
                generator = torch.Generator().manual_seed(training.MODEL_SEED + 100 + table)
                bag.weight.uniform_(-bound, bound, generator=generator)

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        """``(tables, batch, bag)`` indices of this rank's samples -> ``(batch, tables, dim)`` pooled vectors."""
        tables, batch, bag = indices.shape
        # Block r of the tables (rank r's) goes to rank r; block s of what comes back is rank s's batch.
        received = torch.empty_like(indices)
        dist.all_to_all_single(received, indices.contiguous())
        received = received.view(self.world_size, self.per_rank, batch, bag)
        pooled = torch.stack([table(received[:, j].reshape(-1, bag)).view(self.world_size, batch, -1)
                              for j, table in enumerate(self.bags)], dim=1)
        # (world, per_rank, batch, dim): block s goes back to rank s, which gets its tables in order.
        return AllToAll.apply(pooled.view(tables, batch, -1)).transpose(0, 1)

    def average_gradients(self) -> None:
        """Each rank's loss is its own batch's mean, so the owner got the sum of W ranks' gradients:
        divide, so the tables descend the rank-averaged loss, as DDP's averaged MLP gradients do."""
        for parameter in self.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(1 / self.world_size)


class DenseArch(nn.Module):
    """Bottom MLP, dot-product interaction with the pooled vectors, top MLP: the data-parallel half."""

    def __init__(self, shape: DLRMShape) -> None:
        super().__init__()
        self.bottom = build_mlp(shape.bottom_widths)
        self.top = build_mlp(shape.top_widths)
        # A plain attribute, not a buffer: DDP would broadcast a buffer before every forward.
        self.pairs = torch.tril_indices(shape.tables + 1, shape.tables + 1, offset=-1)

    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        """``(batch, dense)`` features and ``(batch, tables, dim)`` pooled vectors -> ``(batch,)`` logits."""
        bottom = self.bottom(dense)
        vectors = torch.cat([bottom.unsqueeze(1), pooled], dim=1)
        products = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([bottom, products], dim=1)).squeeze(1)


def synthetic_batches(shape: DLRMShape, rank: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """This rank's endless ``(dense, indices, click probabilities)`` from seed ``DATA_SEED + rank``.

    The teacher is the same on every rank: an MLP on the dense features plus,
    per table, a fixed random score per row, averaged over the sample's lookups.
    """
    generator = torch.Generator().manual_seed(training.MODEL_SEED + 1)
    teacher = training.teacher_network(shape.dense, generator)
    row_scores = torch.randn(shape.tables, shape.rows, generator=generator)
    generator = torch.Generator().manual_seed(training.DATA_SEED + rank)
    while True:
        dense = torch.randn(shape.batch, shape.dense, generator=generator)
        uniform = torch.rand(shape.tables, shape.batch, shape.bag, generator=generator)
        indices = (uniform.pow(HOT_ROW_EXPONENT) * shape.rows).long().clamp_(max=shape.rows - 1)
        with torch.no_grad():
            scores = row_scores.gather(1, indices.view(shape.tables, -1)).view(indices.shape)
            logits = teacher(dense).squeeze(1) + scores.mean(dim=2).sum(dim=0)
        yield dense, indices, torch.sigmoid(logits)


def train(args: argparse.Namespace) -> dict:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    shape = DLRMShape.from_args(args)
    torch.manual_seed(training.MODEL_SEED)
    dense_arch = DistributedDataParallel(DenseArch(shape), bucket_cap_mb=BUCKET_CAP_MB)
    embeddings = ShardedEmbeddingBags(shape, rank, world_size)
    # Sparse Adagrad builds sparse tensors from valid indices: opting out of torch's checks
    # explicitly keeps them off and silences its warning that they are off.
    torch.sparse.check_sparse_tensor_invariants.disable()
    optimizers = [torch.optim.SGD(dense_arch.parameters(), lr=training.LEARNING_RATE),
                  torch.optim.Adagrad(embeddings.parameters(), lr=EMBEDDING_LEARNING_RATE)]
    if rank == 0:
        print(shape.describe(world_size), flush=True)
    batches = synthetic_batches(shape, rank)
    losses = []
    clock = training.StepClock(args.gate)
    for step in range(1, args.steps + 1):
        clock.turn(step)
        dense, indices, clicks = next(batches)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        logits = dense_arch(dense, embeddings(indices))
        loss = nn.functional.binary_cross_entropy_with_logits(logits, clicks)
        loss.backward()
        embeddings.average_gradients()
        losses.append(training.finish_step(step, loss, optimizers))
        clock.tick()
    return {**training.summary(args, losses, clock.elapsed()), **clock.as_json(), "model": shape.as_json()}


def main(argv: list[str] | None = None) -> int:
    args = training.parse_args(__doc__, argv, add_model_flags)
    return training.run(args, train, sharding_problem)


if __name__ == "__main__":
    sys.exit(main())
