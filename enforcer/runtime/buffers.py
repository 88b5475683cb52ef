"""How a planned op's tensors become the buffer its motifs address (Syndicate §4.4).

A plan's motifs name element ranges of one *buffer* per op
(:mod:`optimizer_service.plan`). For each planned op kind one small adapter
class here takes the c10d call's arguments, decides whether the plan can run
them (else the op passes through), shows the tensors as that buffer, and
writes the result back after the op's last motif:

* ``all_reduce`` and ``broadcast`` work in place on the (contiguous) tensor;
* ``all_gather`` (``all_gather_into_tensor``) copies the input into its own
  block of the output first, then gathers on the flat output;
* ``reduce_scatter`` (``reduce_scatter_tensor``) reduces a copy of the input
  and copies its own block into the output at the end;
* ``all_to_all`` (``all_to_all_single``, even splits) reads the input's and
  writes the output's ``(N, D)`` blocks.

**Which ops a plan may take** (the same rule in the C++ twin, ``cpp_ext/enforcer/op_buffer.cpp``;
issue 32, "every dtype"): a plan computes what plain gloo computes, so it takes only what gloo does.

* Dtypes: those of :data:`PLANNED_DTYPES` — every dtype a plan names
  (:data:`~optimizer_service.plan.dtypes.DTYPE_BYTES`) but ``int16``, for which gloo (and NCCL) have
  no collective at all: a plan would turn the inner backend's refusal into a result, so such an op
  passes through and the program sees the inner backend's own error. The op's tensors must all
  have the one dtype (gloo refuses mixed ones; a plan would convert silently).
* Reductions: ``SUM`` on every planned dtype, and ``AVG`` on floating point as the sum divided by
  the group size at the end (gloo averages floating point only; what FSDP2 asks for). ``MIN``,
  ``MAX``, ``PRODUCT`` and ``PREMUL_SUM`` pass through, as does ``AVG`` on integers and bool
  (gloo refuses it; the program sees its error).
* ``bool`` travels and sums as its bytes (a ``uint8`` view of the same storage): gloo's all_reduce
  adds bool tensors bytewise (two ``True`` make the byte 2, still ``True`` to torch), where
  ``torch.add`` on bool would make it 1 — the bytes must be gloo's. Its reduce_scatter_tensor gives
  proper bools (bytes 0 and 1), so there the summed bytes are written back as bools.

Floating-point sums of a plan add the same operands in another order than gloo (a ring, a tree,
segments on several channels), so they equal gloo's within the rounding of that other order
(the bound: ``tests/enforcer/test_dtypes.py``); integer and bool sums and every op without a
reduction equal gloo's bit for bit. :data:`BUFFERS` picks the adapter by plan kind.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist

from optimizer_service.plan import OpKey
from optimizer_service.plan import dtypes

#: The dtypes a plan takes (:data:`optimizer_service.plan.dtypes.PLANNED_DTYPES`), as torch dtypes.
PLANNED_DTYPES = frozenset(getattr(torch, name) for name in dtypes.PLANNED_DTYPES)


def _planned(*tensors: torch.Tensor) -> bool:
    """The tensors share one dtype, and a plan takes it."""
    return tensors[0].dtype in PLANNED_DTYPES and all(t.dtype == tensors[0].dtype for t in tensors)


def _average(op: dist.ReduceOp, tensor: torch.Tensor) -> bool:
    """AVG on floating point: planned as the sum, divided by the group size at the end."""
    return op == dist.ReduceOp.AVG and tensor.is_floating_point()


def _summed(op: dist.ReduceOp, tensor: torch.Tensor) -> bool:
    """A reduction a plan runs: SUM, or AVG on floating point."""
    return op == dist.ReduceOp.SUM or _average(op, tensor)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A bool tensor as its bytes (gloo sums bool bytewise); any other as it is."""
    return tensor.view(torch.uint8) if tensor.dtype == torch.bool else tensor


class OpBuffer:
    """One planned op's tensors seen as the buffer its motifs address.

    :meth:`adopt` checks the call's arguments (no copies); ``elements`` and
    ``nbytes`` are what the plan is checked against; :meth:`begin` readies
    :attr:`buffer` (making any copies) before the first motif, and
    :meth:`finish` writes the result back after the last one.
    """

    kind: ClassVar[str]
    buffer: torch.Tensor                    # flat, or the input's (N, D) blocks for all-to-all
    output: torch.Tensor | None = None      # all-to-all: the output's (N, D) blocks

    def __init__(self, result: torch.Tensor, elements: int, nbytes: int, size: int, rank: int) -> None:
        self.result = [result]              # the Work's result
        self.elements = elements            # what OpPlan.validate takes
        self.nbytes = nbytes                # must equal the plan key's bytes
        self.size = size                    # group size
        self.rank = rank                    # this rank's position in the group

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> OpBuffer | None:
        """The adapter for the call's ``args``, or ``None``: the plan cannot run them (pass through)."""
        raise NotImplementedError

    def begin(self) -> None:
        """Ready :attr:`buffer` for the motifs."""
        raise NotImplementedError

    def finish(self) -> None:
        """Write the result back after the last motif."""


class InPlaceBuffer(OpBuffer):
    """all_reduce / broadcast: the one contiguous CPU tensor, flat, in place."""

    def __init__(self, tensor: torch.Tensor, size: int, rank: int, average: bool = False) -> None:
        super().__init__(tensor, tensor.numel(), tensor.numel() * tensor.element_size(), size, rank)
        self.tensor = _as_bytes(tensor)
        self.average = average

    @staticmethod
    def _single(tensors: list[torch.Tensor]) -> torch.Tensor | None:
        if len(tensors) != 1 or not tensors[0].is_contiguous() or tensors[0].device.type != "cpu" \
                or not _planned(tensors[0]):
            return None
        return tensors[0]

    def begin(self) -> None:
        self.buffer = self.tensor.view(-1)

    def finish(self) -> None:
        if self.average:
            self.tensor.div_(self.size)


class AllReduceBuffer(InPlaceBuffer):
    kind = "all_reduce"

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> AllReduceBuffer | None:
        tensors, opts = args
        tensor = cls._single(tensors)
        if tensor is None:
            return None
        if not _summed(opts.reduceOp, tensor):
            return None
        return cls(tensor, size, rank, _average(opts.reduceOp, tensor))


class BroadcastBuffer(InPlaceBuffer):
    kind = "broadcast"

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> BroadcastBuffer | None:
        tensors, opts = args
        tensor = cls._single(tensors)
        if tensor is None or opts.rootRank != key.root:
            return None
        return cls(tensor, size, rank)


class AllGatherBuffer(OpBuffer):
    """all_gather_into_tensor: the flat output, this rank's block filled from the input first."""

    kind = "all_gather"

    def __init__(self, output: torch.Tensor, input: torch.Tensor, size: int, rank: int) -> None:
        super().__init__(output, input.numel(), output.numel() * output.element_size(), size, rank)
        self.output_tensor = _as_bytes(output)
        self.input = _as_bytes(input)

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> AllGatherBuffer | None:
        output, input, _opts = args
        if not (output.is_contiguous() and input.is_contiguous()) or output.numel() != size * input.numel() \
                or not _planned(output, input):
            return None
        return cls(output, input, size, rank)

    def begin(self) -> None:
        flat = self.output_tensor.view(-1)
        n = self.input.numel()
        flat[self.rank * n:(self.rank + 1) * n].copy_(self.input.view(-1))
        self.buffer = flat


class ReduceScatterBuffer(OpBuffer):
    """reduce_scatter_tensor: a flat copy of the input; this rank's block goes to the output at the end."""

    kind = "reduce_scatter"

    def __init__(self, output: torch.Tensor, input: torch.Tensor, size: int, rank: int, average: bool) -> None:
        super().__init__(output, output.numel(), input.numel() * input.element_size(), size, rank)
        self.output_tensor = output         # bool stays bool: the summed bytes are written back as bools
        self.input = _as_bytes(input)
        self.average = average

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> ReduceScatterBuffer | None:
        output, input, opts = args
        if not _summed(opts.reduceOp, input) or input.numel() != size * output.numel() \
                or not output.is_contiguous() or not _planned(output, input):
            return None
        return cls(output, input, size, rank, _average(opts.reduceOp, input))

    def begin(self) -> None:
        self.buffer = self.input.reshape(-1).clone()

    def finish(self) -> None:
        n = self.output_tensor.numel()
        self.output_tensor.view(-1).copy_(self.buffer[self.rank * n:(self.rank + 1) * n])
        if self.average:
            self.output_tensor.div_(self.size)


class AllToAllBuffer(OpBuffer):
    """all_to_all_single with even splits: the input's and the output's ``(N, D)`` blocks."""

    kind = "all_to_all"

    def __init__(self, output: torch.Tensor, input: torch.Tensor, size: int, rank: int) -> None:
        super().__init__(output, input.numel(), input.numel() * input.element_size(), size, rank)
        self.output_tensor = _as_bytes(output)
        self.input = _as_bytes(input)

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> AllToAllBuffer | None:
        output, input, _opts = args
        if input.numel() % size or output.numel() != input.numel() or not output.is_contiguous() \
                or not _planned(output, input):
            return None
        return cls(output, input, size, rank)

    def begin(self) -> None:
        self.buffer = self.input.reshape(self.size, -1)
        self.output = self.output_tensor.view(self.size, -1)


#: The buffer adapter of each plan kind (``OpKey.kind``).
BUFFERS: dict[str, type[OpBuffer]] = {
    cls.kind: cls for cls in (AllReduceBuffer, BroadcastBuffer, AllGatherBuffer, ReduceScatterBuffer, AllToAllBuffer)
}
