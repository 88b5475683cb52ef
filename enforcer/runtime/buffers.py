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

``SUM`` reductions are planned, and ``AVG`` on floating point as the sum
divided by the group size at the end (what FSDP2 asks for); any other
reduction passes through. :data:`BUFFERS` picks the adapter by plan kind.
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist

from optimizer_service.plan import OpKey


def _average(op: dist.ReduceOp, tensor: torch.Tensor) -> bool:
    """AVG on floating point: planned as the sum, divided by the group size at the end."""
    return op == dist.ReduceOp.AVG and tensor.is_floating_point()


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
        self.tensor = tensor
        self.average = average

    @staticmethod
    def _single(tensors: list[torch.Tensor]) -> torch.Tensor | None:
        if len(tensors) != 1 or not tensors[0].is_contiguous() or tensors[0].device.type != "cpu":
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
        average = _average(opts.reduceOp, tensor)
        if opts.reduceOp != dist.ReduceOp.SUM and not average:
            return None
        return cls(tensor, size, rank, average)


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
        self.output_tensor = output
        self.input = input

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> AllGatherBuffer | None:
        output, input, _opts = args
        if not (output.is_contiguous() and input.is_contiguous()) or output.numel() != size * input.numel():
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
        self.output_tensor = output
        self.input = input
        self.average = average

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> ReduceScatterBuffer | None:
        output, input, opts = args
        average = _average(opts.reduceOp, input)
        if (opts.reduceOp != dist.ReduceOp.SUM and not average) or input.numel() != size * output.numel() \
                or not output.is_contiguous():
            return None
        return cls(output, input, size, rank, average)

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
        self.output_tensor = output
        self.input = input

    @classmethod
    def adopt(cls, args: tuple, key: OpKey, size: int, rank: int) -> AllToAllBuffer | None:
        output, input, _opts = args
        if input.numel() % size or output.numel() != input.numel() or not output.is_contiguous():
            return None
        return cls(output, input, size, rank)

    def begin(self) -> None:
        self.buffer = self.input.reshape(self.size, -1)
        self.output = self.output_tensor.view(self.size, -1)


#: The buffer adapter of each plan kind (``OpKey.kind``).
BUFFERS: dict[str, type[OpBuffer]] = {
    cls.kind: cls for cls in (AllReduceBuffer, BroadcastBuffer, AllGatherBuffer, ReduceScatterBuffer, AllToAllBuffer)
}
