"""A small pipeline model, its data and reference, and what each rank runs in
the multiproc pipeline-runtime tests (:mod:`enforcer.pipeline.runtime`).

Every rank builds the same stage modules (float64, one seed); stage ``s``'s
ranks hold micro-batch ``m``'s rows the boundary programs give them (``S^0R``
over the stage mesh: rows sharded). The loss is the squared error summed over
the rank's rows and divided by the batch's element count, so the sum over
ranks and micro-batches is the whole batch's mean squared error and the
stage-mesh sum of the gradients is the batch's gradient: the same numbers a
single process gets from the whole model on the whole batch
(:func:`reference`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from enforcer.pipeline.runtime import PipelineRuntime
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import PipelineSchedule
from optimizer_service.plan.resharding import Box, ReshardProgram

HIDDEN = 6
OUTPUTS = 3


def stage_modules(stages: int, seed: int = 0) -> list[nn.Sequential]:
    """The model cut into ``stages`` stages (identical on every rank)."""
    torch.manual_seed(seed)
    modules = []
    for s in range(stages):
        layers = [nn.Linear(HIDDEN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN)]
        if s == stages - 1:
            layers += [nn.Tanh(), nn.Linear(HIDDEN, OUTPUTS)]
        modules.append(nn.Sequential(*layers).double())
    return modules


def batch(microbatches: int, rows: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(microbatches * rows, HIDDEN, generator=gen, dtype=torch.float64)
    y = torch.randn(microbatches * rows, OUTPUTS, generator=gen, dtype=torch.float64)
    return x, y


def loss_function(elements: int):
    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return ((output - target) ** 2).sum() / elements
    return loss


def reference(stages: int, microbatches: int, rows: int) -> tuple[float, list[list[torch.Tensor]]]:
    """The whole model on the whole batch in one process: loss and each stage's gradients."""
    modules = stage_modules(stages)
    x, y = batch(microbatches, rows)
    loss = loss_function(y.numel())(nn.Sequential(*modules)(x), y)
    loss.backward()
    return loss.item(), [[p.grad.clone() for p in m.parameters()] for m in modules]


def _rows(box: Box) -> slice:
    return slice(box.starts[0], box.stops[0])


def run_schedules(meshes: list[list[int]], rows: int, schedule_texts: list[str], forward_texts: list[str],
                  backward_texts: list[str]) -> dict:
    """Each schedule once on a fresh copy of the model; per schedule this rank's
    stage, its gradients after the stage-mesh sum (as lists: tensors do not
    outlive the rank's process), its losses and its record."""
    rank = dist.get_rank()
    forward = [ReshardProgram.parse(t) for t in forward_texts]
    backward = [ReshardProgram.parse(t) for t in backward_texts]
    out = {}
    for text in schedule_texts:
        schedule = PipelineSchedule.parse(text)
        stages, count = schedule.stage_count, schedule.microbatches
        stage = next((s for s, mesh in enumerate(meshes) if rank in mesh), None)
        module = None if stage is None else stage_modules(stages)[stage]
        x, y = batch(count, rows)
        inputs = targets = None
        if stage == 0:
            mine = _rows(forward[0].sources[rank]) if forward else slice(None)
            inputs = [x[m * rows:(m + 1) * rows][mine] for m in range(count)]
        if stage == stages - 1:
            mine = _rows(backward[-1].sources[rank]) if backward else slice(None)
            targets = [y[m * rows:(m + 1) * rows][mine] for m in range(count)]
        with PipelineRuntime(schedule, meshes, module, forward, backward, loss_fn=loss_function(y.numel()),
                             dtype=torch.float64) as runtime:
            record = runtime.run(inputs, targets)
            held = None if runtime.compute is None else runtime.compute.held_microbatches
        out[schedule.name] = {"stage": stage, "losses": record.losses, "record": str(record), "held": held,
                              "grads": [] if module is None else [p.grad.tolist() for p in module.parameters()]}
    return out


def refused(meshes: list[list[int]], schedule_text: str, forward_texts: list[str], backward_texts: list[str],
            with_loss: bool = True) -> str:
    """Construct a runtime that must be refused on every rank before any group
    is built; the world must still work afterwards."""
    rank = dist.get_rank()
    schedule = PipelineSchedule.parse(schedule_text)
    stage = next((s for s, mesh in enumerate(meshes) if rank in mesh), 0)
    try:
        PipelineRuntime(schedule, meshes, stage_modules(len(meshes))[stage],
                        [ReshardProgram.parse(t) for t in forward_texts],
                        [ReshardProgram.parse(t) for t in backward_texts],
                        loss_fn=loss_function(1) if with_loss else None)
    except InvalidInputError as error:
        message = str(error)
    else:
        message = "accepted"
    ok = torch.ones(1)
    dist.all_reduce(ok)
    assert ok.item() == dist.get_world_size()
    return message


def bad_call(meshes: list[list[int]], schedule_text: str, forward_texts: list[str],
             backward_texts: list[str]) -> str:
    """Stage 0's ranks call ``run`` without inputs: every rank raises (the
    others learn it in the all-reduce that starts the iteration)."""
    rank = dist.get_rank()
    schedule = PipelineSchedule.parse(schedule_text)
    stage = next(s for s, mesh in enumerate(meshes) if rank in mesh)
    targets = [torch.zeros(1)] * schedule.microbatches
    with PipelineRuntime(schedule, meshes, stage_modules(len(meshes))[stage],
                         [ReshardProgram.parse(t) for t in forward_texts],
                         [ReshardProgram.parse(t) for t in backward_texts], loss_fn=loss_function(1)) as runtime:
        try:
            runtime.run(None, targets)
        except InvalidInputError as error:
            return str(error)
    return "accepted"


def four_rank_job(jobs: list[tuple], refusal: tuple, no_loss: tuple) -> dict:
    """The multiproc test's world: two refused constructions (a schedule that
    does not fit the meshes, refused alike everywhere; the last stage without a
    loss function, refused there and agreed on by the others), a refused
    ``run``, then every job's schedules. ``refusal`` and ``no_loss`` are (meshes, schedule, forward, backward)."""
    out = {"runs": [], "refused": refused(*refusal), "no_loss": refused(*no_loss, with_loss=False),
           "bad_call": bad_call(*no_loss)}
    for meshes, rows, _count, schedules, forward, backward in jobs:
        out["runs"].append(run_schedules(meshes, rows, schedules, forward, backward))
    return out
