"""One pipeline stage's compute on one rank: forward, backward, and the backward
split in two for backward weight delaying (Zhuang et al., MLSys 2023, §4).

The stage's module runs **layer by layer**: the children of an
``nn.Sequential`` (any other module is one layer). Each layer's input is
detached from the previous layer's output, so every layer has its own small
autograd graph, kept from ``F(m)`` until the backward of ``m`` is done. That
is what makes the paper's split clean:

* ``I(m)`` — the gradient of the stage's input, what the previous stage waits
  for: from the last layer to the first, the gradient of each layer's input
  only (``torch.autograd.grad(output, input, retain_graph=True)``), keeping
  the gradient that arrived at each layer's output;
* ``W(m)`` — later, per layer with parameters, the gradient of its weights from
  that kept output gradient (``torch.autograd.grad(output, params)``). A
  layer's backward node computes only the outputs asked for, so ``I`` and
  ``W`` together do the work of one backward (inside a layer, only element-wise
  nodes between its parameters and its output run twice);
* ``B(m)`` — both at once: per layer one ``torch.autograd.grad`` for its input
  and its weights.

Weight gradients accumulate into each parameter's ``.grad`` (created on first
use, added to after) in the order of the stage's ``B``/``W`` actions: the
schedules the planner makes run them in micro-batch order, so GPipe, 1F1B,
eager-1F1B and their split forms give bit-identical gradients. The last stage
ends with ``loss_fn(output, target)``, whose value (a scalar) is what its
backward starts from with gradient 1. Layers must not modify their input in
place (it is a leaf of the layer's graph).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from optimizer_service.plan import InvalidInputError

LossFunction = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class _Layer:
    """What one layer keeps of one micro-batch between its forward and its backward."""

    module: nn.Module
    input: torch.Tensor
    output: torch.Tensor
    output_grad: torch.Tensor | None = None


@dataclass
class _Microbatch:
    layers: list[_Layer] = field(default_factory=list)
    loss_input: torch.Tensor | None = None      # last stage: the detached output the loss reads
    loss: torch.Tensor | None = None


def _params(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def _accumulate(params: list[nn.Parameter], grads) -> None:
    for param, grad in zip(params, grads):
        if grad is None:
            continue
        if param.grad is None:
            param.grad = grad.detach().clone()
        else:
            param.grad.add_(grad)


class StageCompute:
    """Forward and backward of one stage's module on this rank (module docstring)."""

    def __init__(self, module: nn.Module, *, first: bool, last: bool, loss_fn: LossFunction | None = None) -> None:
        if last and loss_fn is None:
            raise InvalidInputError("the last pipeline stage needs loss_fn(output, target) -> scalar loss")
        self.module = module
        self.first, self.last = first, last
        self.loss_fn = loss_fn
        self.layers: list[nn.Module] = list(module.children()) if isinstance(module, nn.Sequential) else [module]
        self._params = [_params(layer) for layer in self.layers]
        self._held: dict[int, _Microbatch] = {}

    @property
    def held_microbatches(self) -> int:
        """Micro-batches whose activations this stage holds now."""
        return len(self._held)

    def forward(self, microbatch: int, x: torch.Tensor, target: torch.Tensor | None = None) -> torch.Tensor:
        """Run the stage on ``x``; keep what the backward needs. Returns the
        output (what the next stage receives), or on the last stage the loss."""
        if microbatch in self._held:
            raise InvalidInputError(f"micro-batch {microbatch} ran forward twice before its backward")
        state = _Microbatch()
        h = x
        for index, layer in enumerate(self.layers):
            needs_grad = not (self.first and index == 0)
            inp = h.detach().requires_grad_(needs_grad)
            state.layers.append(_Layer(layer, inp, layer(inp)))
            h = state.layers[-1].output
        self._held[microbatch] = state
        if not self.last:
            return h.detach()
        if target is None:
            raise InvalidInputError(f"the last stage needs the target of micro-batch {microbatch}")
        state.loss_input = h.detach().requires_grad_(True)
        state.loss = self.loss_fn(state.loss_input, target)
        if state.loss.numel() != 1:
            raise InvalidInputError(f"loss_fn returned a tensor of shape {tuple(state.loss.shape)}; it must return "
                                    "one number (reduce the micro-batch's loss with sum or mean)")
        return state.loss.detach()

    def _output_grad(self, microbatch: int, grad: torch.Tensor | None) -> tuple[_Microbatch, torch.Tensor]:
        state = self._held.get(microbatch)
        if state is None:
            raise InvalidInputError(f"backward of micro-batch {microbatch} before its forward")
        if self.last:
            (grad,) = torch.autograd.grad(state.loss, state.loss_input)
        elif grad is None:
            raise InvalidInputError(f"the backward of micro-batch {microbatch} needs its output gradient")
        return state, grad

    def backward(self, microbatch: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """``B(m)``: the weight gradients (accumulated) and the input gradient
        (returned; ``None`` on the first stage). ``grad`` is the gradient of the
        output (the last stage starts from its loss and takes none)."""
        state, grad = self._output_grad(microbatch, grad)
        del self._held[microbatch]
        for layer, params in zip(reversed(state.layers), reversed(self._params)):
            grad = self._layer_grads(layer, params, grad)
        return grad if not self.first else None

    def _layer_grads(self, layer: _Layer, params: list[nn.Parameter], grad: torch.Tensor | None):
        if grad is None or not layer.output.requires_grad:
            return None
        wants_input = layer.input.requires_grad
        inputs = ([layer.input] if wants_input else []) + params
        if not inputs:
            return None
        grads = torch.autograd.grad(layer.output, inputs, grad, allow_unused=True)
        _accumulate(params, grads[1:] if wants_input else grads)
        if not wants_input:
            return None
        return grads[0] if grads[0] is not None else torch.zeros_like(layer.input)

    def backward_input(self, microbatch: int, grad: torch.Tensor | None = None) -> torch.Tensor | None:
        """``I(m)``: the input gradient only (returned; ``None`` on the first
        stage); keeps each layer's output gradient for ``W(m)``."""
        state, grad = self._output_grad(microbatch, grad)
        for layer, params in zip(reversed(state.layers), reversed(self._params)):
            layer.output_grad = grad
            if grad is None or not layer.output.requires_grad or not layer.input.requires_grad:
                grad = None
                continue
            (grad,) = torch.autograd.grad(layer.output, layer.input, grad, retain_graph=bool(params),
                                          allow_unused=True)
            if grad is None:
                grad = torch.zeros_like(layer.input)
        return grad if not self.first else None

    def backward_weight(self, microbatch: int) -> None:
        """``W(m)``: the weight gradients of micro-batch ``m`` (after its ``I``)."""
        state = self._held.pop(microbatch, None)
        if state is None or any(layer.output_grad is None and layer.output.requires_grad and params
                                for layer, params in zip(state.layers, self._params)):
            raise InvalidInputError(f"weight gradient of micro-batch {microbatch} before its input gradient "
                                    "(I before W)")
        for layer, params in zip(state.layers, self._params):
            if params and layer.output_grad is not None and layer.output.requires_grad:
                _accumulate(params, torch.autograd.grad(layer.output, params, layer.output_grad, allow_unused=True))
