"""Train an MLP with hybrid data parallelism on ``new_group`` subgroups: DDP inside each group, averaging across.

The world of W ranks is cut into W/S *replica groups* of ``--group-size`` S
consecutive ranks (``[0..S-1]``, ``[S..2S-1]``, …: the ranks of one node, say)
and S *peer groups* of the ranks that hold the same position in their replica
group (``[0, S, 2S, …]``, ``[1, S+1, …]``: one rank per node), every one made
with ``dist.new_group`` (by every rank, in the same order, as torch requires).
This is the hierarchy hybrid-sharded and "HSDP"-style jobs use, by hand:

* the model (the DDP example's MLP, about 526 K parameters) is wrapped in
  ``DistributedDataParallel`` on the rank's replica group, which averages the
  gradients inside the group in three bucket all-reduces (0.53, 1.05, 0.53 MB);
* after the backward pass one ``all_reduce`` of all the gradients (2.1 MB,
  flattened) on the rank's peer group, divided by the number of groups, makes
  them the average over the world;
* the samples the step trained on are counted over the world, as throughput
  logs do: an ``all_reduce`` of one int64 on the default group (8-byte
  elements: the enforcer passes it through under any plan, and the optimizer
  service lists it as passed through);
* the loss is averaged over the world (one more all-reduce, on the default
  group), and SGD steps.

So every rank holds the same model, as in plain data parallelism over W ranks,
while its gradient traffic goes over two kinds of subgroups. S must divide the
world size (otherwise one line on stderr and exit code 2, before any
rendezvous). Every rank draws its own deterministic synthetic batches (seed +
rank) from a fixed random "teacher" network; rank 0 prints ``step K loss X``
and with ``--json OUT`` writes ``{"backend", "world_size", "steps", "losses",
"seconds", "step_seconds", "plan_versions", "groups", "samples"}`` (``groups``:
the replica and peer groups' ranks; ``samples``: the world's samples trained on).

Rendezvous is env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as set by
torchrun or ``p2 cluster run``:

    torchrun --nproc-per-node 4 examples/train_hybrid.py --backend gloo
    torchrun --nproc-per-node 4 examples/train_hybrid.py --backend p2enforcer --group-size 2
    p2 cluster run --name NAME -- python examples/train_hybrid.py

With ``p2enforcer`` as the world's backend the subgroups are ``p2enforcer``
groups too (``new_group`` takes the default backend). The default backend is
``$P2_EXAMPLE_BACKEND`` or ``p2enforcer``. After every optimizer step the
script calls ``enforcer.step()``: that marks the iteration boundary at which
the enforcer may switch to a newly committed plan, on every group at once. The
flags, data and loop are shared with the other examples (``training.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist
import training
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from train_ddp import BUCKET_CAP_MB, LAYER_WIDTHS, build_mlp

DEFAULT_GROUP_SIZE = 2


class HybridGroups:
    """The replica and peer groups of one world (made by :meth:`make`, collectively) and this rank's two."""

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size
        self.replica = self.peer = None
        self.replica_ranks: list[list[int]] = []
        self.peer_ranks: list[list[int]] = []
        self.samples = 0

    def make(self) -> None:
        """Every rank makes every group, in one order; each keeps the two it belongs to."""
        world, size, rank = dist.get_world_size(), self.group_size, dist.get_rank()
        self.replica_ranks = [list(range(start, start + size)) for start in range(0, world, size)]
        self.peer_ranks = [list(range(position, world, size)) for position in range(size)]
        replicas = [dist.new_group(ranks) for ranks in self.replica_ranks]
        peers = [dist.new_group(ranks) for ranks in self.peer_ranks]
        self.replica, self.peer = replicas[rank // size], peers[rank % size]

    def build_model(self) -> DistributedDataParallel:
        """The DDP example's MLP, data-parallel inside this rank's replica group."""
        self.make()
        return DistributedDataParallel(build_mlp(LAYER_WIDTHS), bucket_cap_mb=BUCKET_CAP_MB,
                                       process_group=self.replica)

    def after_backward(self, model: nn.Module) -> None:
        """The replica-group averages of the gradients, averaged over the groups (one all-reduce on the
        peer group); then the step's samples counted over the world (one int64 all-reduce)."""
        grads = [parameter.grad for parameter in model.parameters()]
        flat = torch.cat([grad.reshape(-1) for grad in grads])
        dist.all_reduce(flat, group=self.peer)
        flat /= len(self.replica_ranks)
        for grad, part in zip(grads, flat.split([grad.numel() for grad in grads])):
            grad.copy_(part.view_as(grad))
        samples = torch.tensor([training.BATCH_SIZE], dtype=torch.int64)
        dist.all_reduce(samples)
        self.samples += int(samples.item())

    def as_json(self) -> dict:
        return {"groups": {"replica": self.replica_ranks, "peer": self.peer_ranks}, "samples": self.samples}


def add_flags(parser: argparse.ArgumentParser) -> None:
    training.add_loop_flags(parser)
    parser.add_argument("--group-size", type=int, default=DEFAULT_GROUP_SIZE, metavar="S",
                        help="ranks per replica group, a divisor of the world size (default: %(default)s)")


def grouping_problem(args: argparse.Namespace) -> str | None:
    """The replica groups must split the world evenly (checked before the rendezvous)."""
    world_size = os.environ.get("WORLD_SIZE", "")
    if args.group_size < 1:
        return f"--group-size {args.group_size} must be at least 1"
    if world_size.isdigit() and int(world_size) > 0 and int(world_size) % args.group_size:
        return f"--group-size {args.group_size} does not divide the world size {world_size}"
    return None


def train(args: argparse.Namespace) -> dict:
    groups = HybridGroups(args.group_size)
    result = training.train(args, groups.build_model, LAYER_WIDTHS[0], after_backward=groups.after_backward)
    return {**result, **groups.as_json()}


def main(argv: list[str] | None = None) -> int:
    return training.run(training.parse_args(__doc__, argv, add_flags), train, grouping_problem)


if __name__ == "__main__":
    sys.exit(main())
