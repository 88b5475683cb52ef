"""Run lowered reduction programs on a flat tensor with torch.distributed.

:class:`ProgramExecutor` takes lowered programs — steps of ``(collective,
device groups)`` from the planner or ``p2 synth --json`` — where device ``g``
is global rank ``g``. Before the first run, :meth:`ProgramExecutor.prepare`
creates one process group per distinct member set, on every rank, in sorted
order (``new_group`` is collective: all ranks must create the same groups in
the same order), and works out every step's element ranges
(:mod:`optimizer_service.plan.layout`). :meth:`ProgramExecutor.run` then only slices.

Per step a rank finds the one group it belongs to (or idles) and runs:

* AllReduce — the inner backend's ``all_reduce`` on the group (gloo's ring);
* ReduceScatter, AllGather, Reduce, Broadcast — :mod:`enforcer.comm.sendrecv`, the
  bandwidth-optimal algorithms built from the backend's send and recv.

Live data stays at its own position in the tensor (see :mod:`optimizer_service.plan.layout`),
so when a rank's part is one element range the collective works on a view of
the caller's tensor with no copy; scattered parts are packed into a scratch
buffer and unpacked after. On return every rank's tensor equals a flat
AllReduce (sum) over its reduction group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from enforcer.comm import sendrecv
from enforcer.comm.subgroups import GroupCache
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.layout import GroupMove, Ranges, StepLayout, plan_layout
from optimizer_service.plan.lowered import LoweredProgram


@dataclass(frozen=True)
class _Task:
    """What this rank does in one step."""

    collective: Collective
    members: tuple[int, ...]
    position: int
    parts: tuple[Ranges, ...]


def _pack(tensor: torch.Tensor, ranges: Ranges) -> torch.Tensor:
    """A contiguous tensor with the elements of ``ranges``: a view when it is one range."""
    if len(ranges) == 1:
        return tensor[ranges[0][0]:ranges[0][1]]
    if not ranges:
        return tensor[:0]
    return torch.cat([tensor[a:b] for a, b in ranges])


def _unpack(tensor: torch.Tensor, ranges: Ranges, packed: torch.Tensor) -> None:
    if len(ranges) <= 1:
        return  # ``packed`` was a view
    offset = 0
    for a, b in ranges:
        tensor[a:b].copy_(packed[offset:offset + b - a])
        offset += b - a


class ProgramExecutor:
    """Runs lowered programs over the default process group's ranks."""

    def __init__(self, groups: GroupCache | None = None) -> None:
        self.groups = groups or GroupCache()
        self._layouts: dict[LoweredProgram, tuple[StepLayout, ...]] = {}
        self._tasks: dict[tuple[LoweredProgram, int], tuple[_Task | None, ...]] = {}

    def prepare(self, programs: Iterable[LoweredProgram]) -> None:
        """Validate ``programs`` and create their process groups. Collective:
        every rank calls it with the same programs."""
        world = dist.get_world_size()
        programs = list(programs)
        for program in programs:
            if program not in self._layouts:
                self._layouts[program] = plan_layout(program, world)
        self.groups.create(move.members for program in programs
                           for step in self._layouts[program] for move in step.moves)

    def run(self, program: LoweredProgram, tensor: torch.Tensor) -> torch.Tensor:
        """Reduce ``tensor`` (1-D, contiguous, CPU) in place by ``program``."""
        if tensor.dim() != 1 or not tensor.is_contiguous():
            raise ValueError("the executor reduces a flat contiguous tensor; pass tensor.view(-1)")
        if program not in self._layouts:
            raise RuntimeError("program not prepared: call prepare([program]) on every rank first")
        for task in self._tasks_for(program, tensor.numel()):
            if task is not None:
                self._run_task(task, tensor)
        return tensor

    def _tasks_for(self, program: LoweredProgram, numel: int) -> tuple[_Task | None, ...]:
        key = (program, numel)
        if key not in self._tasks:
            rank = dist.get_rank()
            tasks = []
            for step in self._layouts[program]:
                move: GroupMove | None = step.move_of(rank)
                tasks.append(None if move is None else _Task(
                    move.collective, move.members, move.members.index(rank), move.part_ranges(numel)))
            self._tasks[key] = tuple(tasks)
        return self._tasks[key]

    def _run_task(self, task: _Task, tensor: torch.Tensor) -> None:
        group = self.groups.get(task.members)
        collective = task.collective
        if collective in (Collective.REDUCE_SCATTER, Collective.ALL_GATHER):
            packed = [_pack(tensor, ranges) for ranges in task.parts]
            if collective is Collective.REDUCE_SCATTER:
                sendrecv.reduce_scatter(packed, task.members, group)
                _unpack(tensor, task.parts[task.position], packed[task.position])
            else:
                sendrecv.all_gather(packed, task.members, group)
                for ranges, part in zip(task.parts, packed):
                    _unpack(tensor, ranges, part)
            return
        ranges = task.parts[0]
        data = _pack(tensor, ranges)
        if not data.numel():
            return
        if collective is Collective.ALL_REDUCE:
            dist.all_reduce(data, group=group)
        elif collective is Collective.REDUCE:
            sendrecv.reduce(data, task.members, group)
        else:
            sendrecv.broadcast(data, task.members, group)
        _unpack(tensor, ranges, data)

