"""Train a small residual MLP with FSDP2 (``fully_shard``): the one-word switch to ``p2enforcer``.

The model is a stack of ``--blocks`` pre-norm residual MLP blocks (LayerNorm,
Linear ``--width`` -> ``--hidden``, GELU, Linear back) and a linear head; the
defaults (3 blocks of 128 -> 512 -> 128) hold about 396 K parameters. Every
block is its own FSDP unit and the root holds the head, so each step the
backend sees the sharded-parameter traffic FSDP2 issues: an
``all_gather_single`` (torch 2.13's name for ``all_gather_into_tensor``) per
unit in the forward pass, again per block in the backward pass (blocks reshard
after their forward), and a ``reduce_scatter_single`` of every unit's
gradients. FSDP2 runs on CPU with gloo (torch 2.13), so no GPU is needed.

Mixed precision, as real jobs run FSDP2 (``MixedPrecisionPolicy``):

* ``--mixed-precision bf16`` keeps the sharded parameters (and SGD) in fp32,
  all-gathers them in bf16 and gives the backward pass bf16 gradients; the
  default, ``fp32``, is plain FSDP2.
* ``--reduce-dtype fp32`` (the default) reduce-scatters the gradients in fp32,
  as most bf16 recipes do (torchtitan's default): a sum over many ranks in
  bf16 keeps 8 bits of mantissa. ``--reduce-dtype bf16`` reduce-scatters in
  bf16, halving those bytes (FSDP2's own default when only ``param_dtype`` is
  set). With ``--mixed-precision fp32`` it reduces fp32 gradients in bf16.

The blocks compute in fp32 on the bf16-rounded parameters they gathered (each
parameter is cast with ``.float()`` where it is used, a no-op in fp32): CPUs
without AVX-512 BF16 or AMX multiply bf16 matrices 20-30x slower than fp32,
while the traffic, the point of this example, is what FSDP2 in bf16 sends.
The gradient of a bf16 parameter still comes back in bf16 (the cast's
backward), as on a GPU. Activations stay fp32 (``cast_forward_inputs=False``).

Per rank and step (the bytes each rank hands to a collective, on 4 ranks;
FSDP2 pads every parameter's dim 0 to a multiple of the world size, so the
head's share grows a little with the world):

=====================================  ===========  ===========  =================
collective                             default      default,     demo size, bf16
                                       fp32         bf16
=====================================  ===========  ===========  =================
all_gather_single, forward (all units)  1,585,680      792,840        2,106,376
all_gather_single, backward (blocks)    1,583,616      791,808        2,104,320
reduce_scatter_single (all units)       1,585,680    1,585,680        4,212,752
all_reduce, the loss                            4            4                4
=====================================  ===========  ===========  =================

The demo size, ``--width 256 --hidden 1024 --blocks 2`` (1.05 M parameters),
is the one for the emulated 2 x 4 cluster with 200 Mbit/s NICs (25 MB/s, one
per node): a ring puts 7/8 of its 8.4 MB per rank and step through each NIC,
about 295 ms, next to about 0.3 CPU-seconds of computation and FSDP2
bookkeeping per step for all 8 ranks together (measured on 2 shared cores).
Rank 0 prints the sizes for the world it runs in once at start, and ``--json``
adds them under ``model``.

Every rank builds the same model (fixed seed; FSDP2 shards it without
broadcasting), draws its own deterministic synthetic batches (seed + rank)
from a fixed random "teacher" network, and trains with SGD. Each step the loss
is averaged over the ranks (one more all-reduce) and rank 0 prints
``step K loss X``; with ``--json OUT`` rank 0 writes
``{"backend", "world_size", "steps", "losses", "seconds", "step_seconds",
"plan_versions", "model"}``.

Rendezvous is env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as set by
torchrun or ``p2 cluster run``:

    torchrun --nproc-per-node 4 examples/train_fsdp.py --backend gloo
    torchrun --nproc-per-node 4 examples/train_fsdp.py --backend p2enforcer --mixed-precision bf16
    p2 cluster run --name NAME -- python examples/train_fsdp.py

The default backend is ``$P2_EXAMPLE_BACKEND`` or ``p2enforcer``. After every
``optimizer.step()`` the script calls ``enforcer.step()``: that marks the
iteration boundary at which the enforcer may switch to a newly committed plan.
The flags, data and loop are shared with the other examples (``training.py``).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.nn import functional

import training
from train_dlrm import positive_int

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class FSDPShape:
    """The model's sizes and precision (the flags)."""

    width: int = 128
    hidden: int = 512
    blocks: int = 3
    mixed_precision: str = "fp32"     # the dtype parameters are all-gathered and used in
    reduce_dtype: str = "fp32"        # the dtype gradients are reduce-scattered in

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FSDPShape:
        return cls(args.width, args.hidden, args.blocks, args.mixed_precision, args.reduce_dtype)

    def policy(self) -> MixedPrecisionPolicy:
        """FSDP2's policy; all fields ``None`` (plain FSDP2) for fp32 / fp32."""
        param_dtype = None if self.mixed_precision == "fp32" else DTYPES[self.mixed_precision]
        reduce_dtype = None if self.reduce_dtype == self.mixed_precision else DTYPES[self.reduce_dtype]
        return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=False)

    def unit_shapes(self) -> list[list[tuple[int, ...]]]:
        """Each FSDP unit's parameter shapes: the blocks', then the root's (the head)."""
        block = [(self.width,), (self.width,), (self.hidden, self.width), (self.hidden,),
                 (self.width, self.hidden), (self.width,)]
        return [block] * self.blocks + [[(1, self.width), (1,)]]

    @property
    def parameters(self) -> int:
        return sum(math.prod(shape) for unit in self.unit_shapes() for shape in unit)

    def unit_elements(self, world_size: int) -> list[int]:
        """Elements of each unit's all-gather output (and reduce-scatter input) on ``world_size`` ranks:
        FSDP2 pads every parameter's dim 0 to a multiple of the world size."""
        return [world_size * sum(-(-shape[0] // world_size) * math.prod(shape[1:]) for shape in unit)
                for unit in self.unit_shapes()]

    def traffic(self, world_size: int) -> dict[str, int]:
        """Bytes each rank hands to the collectives per step (all-gather outputs, reduce-scatter inputs)."""
        gathered = DTYPES[self.mixed_precision].itemsize
        reduced = DTYPES[self.reduce_dtype].itemsize
        elements = self.unit_elements(world_size)
        return {"all_gather_forward_bytes": sum(elements) * gathered,
                "all_gather_backward_bytes": sum(elements[:-1]) * gathered,   # the root stays gathered
                "reduce_scatter_bytes": sum(elements) * reduced,
                "all_reduce_bytes": 4}

    def as_json(self, world_size: int) -> dict:
        return {**asdict(self), "parameters": self.parameters, **self.traffic(world_size)}

    def describe(self, world_size: int) -> str:
        traffic = self.traffic(world_size)
        return (f"FSDP2: {self.blocks} blocks of {self.width} -> {self.hidden} -> {self.width} and a head, "
                f"{self.parameters:,} parameters; parameters in {self.mixed_precision}, gradients reduced in "
                f"{self.reduce_dtype}; per rank and step: all_gather {traffic['all_gather_forward_bytes']:,} B "
                f"(forward, {self.blocks + 1} units) + {traffic['all_gather_backward_bytes']:,} B (backward, "
                f"{self.blocks} blocks), reduce_scatter {traffic['reduce_scatter_bytes']:,} B, "
                f"all_reduce {traffic['all_reduce_bytes']} B (the loss)")


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    training.add_loop_flags(parser)
    default = FSDPShape()
    model = parser.add_argument_group("model size and precision")
    for flag, help_text in (("width", "the residual stream's width"), ("hidden", "each block's hidden width"),
                            ("blocks", "residual blocks, one FSDP unit each")):
        model.add_argument(f"--{flag}", type=positive_int, default=getattr(default, flag),
                           help=f"{help_text} (default: %(default)s)")
    model.add_argument("--mixed-precision", choices=sorted(DTYPES), default=default.mixed_precision,
                       help="dtype parameters are all-gathered and used in (FSDP2 MixedPrecisionPolicy.param_dtype; "
                            "default: %(default)s)")
    model.add_argument("--reduce-dtype", choices=sorted(DTYPES), default=default.reduce_dtype,
                       help="dtype gradients are reduce-scattered in (MixedPrecisionPolicy.reduce_dtype; "
                            "default: %(default)s)")


def _compute(parameter: torch.Tensor) -> torch.Tensor:
    """The parameter as the matmuls use it: fp32 (a bf16 one upcast, see the module docstring)."""
    return parameter.float()


class ResidualBlock(nn.Module):
    """``x + W2 gelu(W1 layernorm(x))``: one FSDP unit."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.expand = nn.Linear(width, hidden)
        self.project = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = functional.layer_norm(x, self.norm.normalized_shape, _compute(self.norm.weight),
                                  _compute(self.norm.bias), self.norm.eps)
        h = functional.gelu(functional.linear(h, _compute(self.expand.weight), _compute(self.expand.bias)))
        return x + functional.linear(h, _compute(self.project.weight), _compute(self.project.bias))


class ResidualMLP(nn.Module):
    def __init__(self, width: int, hidden: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ResidualBlock(width, hidden) for _ in range(blocks))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return functional.linear(x, _compute(self.head.weight), _compute(self.head.bias))


def build_model(shape: FSDPShape) -> ResidualMLP:
    """Per-block FSDP2 units, then the root (which keeps the head and gathers it once per step)."""
    model = ResidualMLP(shape.width, shape.hidden, shape.blocks)
    policy = shape.policy()
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def train(args: argparse.Namespace) -> dict:
    shape = FSDPShape.from_args(args)
    world_size = dist.get_world_size()
    if dist.get_rank() == 0:
        print(shape.describe(world_size), flush=True)
    result = training.train(args, lambda: build_model(shape), shape.width)
    return {**result, "model": shape.as_json(world_size)}


def main(argv: list[str] | None = None) -> int:
    return training.run(training.parse_args(__doc__, argv, add_model_flags), train)


if __name__ == "__main__":
    sys.exit(main())
