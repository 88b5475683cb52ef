"""A pipeline-parallel runtime: run a :class:`PipelineSchedule` with cross-mesh
resharding at every stage boundary, the transfers overlapped with compute
(Zhuang et al., MLSys 2023, §4 and §5.3.2 "Overlap").

Each pipeline stage is a device mesh (a set of global ranks, e.g. one node's
ranks); the stage's module is replicated on its ranks, each of which holds its
part of every micro-batch's activation (the layout the boundary programs
say, e.g. ``S^0R``: batch-sharded, data parallel inside the mesh).

**Training thread.** Each rank runs its stage's action list in order:

* ``F(m)`` waits for micro-batch ``m``'s input activation (stage 0: the data
  the caller passes), runs the stage forward (:mod:`enforcer.pipeline.stage`),
  keeps what the backward needs and hands the output to the boundary's
  forward resharding; the last stage computes the loss;
* ``B(m)`` waits for the gradient of ``m``'s output from the next stage (the
  last stage starts from its loss), runs the backward, accumulates the weight
  gradients and hands the input gradient to the previous boundary's backward
  resharding;
* ``I(m)`` / ``W(m)`` (backward weight delaying): ``I`` computes and hands on
  the input gradient only, ``W`` the weight gradients later.

After its last action a rank sums its stage's weight gradients over the
stage mesh (one all-reduce, ``reduce_gradients``; with the loss scaled to the
whole batch that sum is the batch's gradient), then waits until its outgoing
transfers are done.

**Communication threads.** One per (boundary, direction) a rank takes part in,
each running its transfers one at a time, FIFO: a sender's in the order its
stage produced them, a receiver's in the same order (the sending stage's
``F`` order, or its ``B``/``I`` order), all posted when the iteration starts.
Compute never waits for a send; the receiving stage waits only when an action
needs the tensor. This is the paper's "Overlap" and is what lets eager-1F1B's
extra warm-up forwards hide the forward transfers. Each (boundary, direction)
has its own process group (``dist.new_group`` of the two meshes' ranks) and
its own :class:`~enforcer.reshard.resharder.Resharder` with its own subgroups, so no two
threads share a communicator; all of them are created at construction, on
every rank of the world, in one order (boundary 0 forward, boundary 0
backward, boundary 1 forward, …, then the stage meshes).

Reading (§4 leaves it open): transfers of one boundary and direction do not
overlap each other — the simulator's model, and what a FIFO channel gives —
while the two directions of a boundary and different boundaries run at once.
(On a network they may still share a link: a middle stage's activations and
its input gradients leave through the same NIC — measured in
``examples/README.md``, "Pipeline parallelism".)

The boundary programs come from the planner in the caller's script (the
enforcer does not plan): forward program ``s`` moves the activation from mesh
``s`` to mesh ``s+1``, backward program ``s`` its gradient back.
:mod:`enforcer.pipeline.check` checks them, the schedule and the meshes on
every rank alike; what only some ranks can get wrong (a stage rank without its
module, the last stage without ``loss_fn``) is agreed on in one small
all-reduce — so a bad pipeline raises on every rank before any group exists,
instead of leaving ranks waiting. Each iteration returns an
:class:`~enforcer.pipeline.records.IterationRecord`: per action and per
transfer its start and end, for comparing with the simulator.

What it does not do: tensor (operator) parallelism inside a stage — the
backward program carries the gradient back in the forward's source layout,
and the stage-mesh sum of weight gradients is right when the layout splits
the batch (``S^0R``), not when a stage's ranks hold replicas of one activation
or partial sums; skip edges (U-shaped models); one rank in two stages.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Self

import torch
import torch.distributed as dist
from torch import nn

from enforcer.pipeline.check import check_pipeline
from enforcer.pipeline.records import ActionTime, IterationRecord, TransferTime
from enforcer.pipeline.stage import LossFunction, StageCompute
from enforcer.comm.subgroups import GroupCache
from enforcer.reshard.resharder import Resharder
from optimizer_service.plan import InvalidInputError
from optimizer_service.plan.pipeline import ActionKind, PipelineSchedule
from optimizer_service.plan.resharding import ReshardProgram

F, B, IN, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


class _Channel:
    """One communication thread: runs submitted jobs one at a time, in order.
    A daemon thread, so a rank whose peer died can still exit."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable, *args) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((future, job, args))
        return future

    def _loop(self) -> None:
        while (item := self._jobs.get()) is not None:
            future, job, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(job(*args))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting training thread
                future.set_exception(error)

    def close(self, timeout: float = 5.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)


def _agree(problem: InvalidInputError | None, what: str) -> None:
    """Raise on every rank when any rank's own arguments are wrong (one small
    all-reduce on the default group), so no rank goes on alone and waits."""
    world = dist.get_world_size()
    first = torch.tensor([dist.get_rank() if problem is not None else world])
    dist.all_reduce(first, op=dist.ReduceOp.MIN)
    if problem is not None:
        raise problem
    if first.item() < world:
        raise InvalidInputError(f"rank {first.item()} could not {what} (see its error); nothing was run")


class _Boundary:
    """One (boundary, direction): its group, its Resharder and, on this rank, its thread."""

    def __init__(self, boundary: int, kind: str, program: ReshardProgram, meshes: Sequence[Sequence[int]],
                 backend: str | None) -> None:
        self.boundary, self.kind = boundary, kind
        self.from_stage, self.to_stage = (boundary, boundary + 1) if kind == "F" else (boundary + 1, boundary)
        members = sorted(set(meshes[boundary]) | set(meshes[boundary + 1]))
        self.group = dist.new_group(members, backend=backend)
        self.resharder = Resharder(program, self.group, groups=GroupCache(backend=backend))
        rank = dist.get_rank()
        self.role = "send" if rank in program.sources else "recv" if rank in program.destinations else None
        self.channel = _Channel(f"p2-pipeline-{kind}{boundary}-{self.role}") if self.role else None

    def transfer(self, microbatch: int, origin: float, local: torch.Tensor | None,
                 dtype: torch.dtype) -> tuple[torch.Tensor | None, TransferTime]:
        start = time.perf_counter()
        out = self.resharder(local, dtype=dtype)
        end = time.perf_counter()
        return out, TransferTime(self.role, self.kind, self.from_stage, self.to_stage, microbatch,
                                 start - origin, end - origin)


class PipelineRuntime:
    """Runs one pipeline schedule on this rank, one :meth:`run` per iteration
    (module docstring). Construct it on every rank of the world (collective)."""

    def __init__(self, schedule: PipelineSchedule, meshes: Sequence[Sequence[int]], module: nn.Module | None,
                 forward_programs: Sequence[ReshardProgram] = (), backward_programs: Sequence[ReshardProgram] = (),
                 *, loss_fn: LossFunction | None = None, dtype: torch.dtype = torch.float32,
                 reduce_gradients: bool = True, synchronize: bool = True, backend: str | None = None,
                 timeout: float = 600.0) -> None:
        if not dist.is_initialized():
            raise RuntimeError("PipelineRuntime needs torch.distributed initialised (init_process_group) first")
        self.schedule = schedule
        self.meshes = tuple(tuple(int(r) for r in mesh) for mesh in meshes)
        self.unit_steps = check_pipeline(schedule, self.meshes, forward_programs, backward_programs,
                                         dist.get_world_size())
        self.rank = dist.get_rank()
        self.stage = next((s for s, mesh in enumerate(self.meshes) if self.rank in mesh), None)
        last = schedule.stage_count - 1
        problem = None
        try:
            if self.stage is not None and module is None:
                raise InvalidInputError(f"rank {self.rank} is in stage {self.stage}'s mesh: pass that stage's module")
            self.compute = None if self.stage is None else \
                StageCompute(module, first=self.stage == 0, last=self.stage == last, loss_fn=loss_fn)
        except InvalidInputError as error:
            problem = error
        _agree(problem, "join the pipeline")
        self.dtype, self.timeout = dtype, timeout
        self.reduce_gradients, self.synchronize = reduce_gradients, synchronize
        # Collective, in one order on every rank (module docstring).
        self._boundaries: dict[tuple[int, str], _Boundary] = {}
        for s in range(schedule.stage_count - 1):
            for kind, program in (("F", forward_programs[s]), ("B", backward_programs[s])):
                self._boundaries[(s, kind)] = _Boundary(s, kind, program, self.meshes, backend)
        self._mesh_groups = {s: dist.new_group(sorted(mesh), backend=backend)
                             for s, mesh in enumerate(self.meshes) if reduce_gradients and len(mesh) > 1}
        self.last_record: IterationRecord | None = None

    # ---- one iteration ---------------------------------------------------------------------------------------

    def run(self, inputs: Sequence[torch.Tensor] | None = None,
            targets: Sequence[torch.Tensor] | None = None) -> IterationRecord:
        """One iteration: stage 0's ranks pass their part of every micro-batch's
        input (``inputs[m]``), the last stage's ranks their part of every
        target; every rank of the world calls it. Weight gradients accumulate
        into the stage module's ``.grad`` (zero them between iterations).
        With ``synchronize`` (the default) the iteration starts with an
        all-reduce over the world that lines the ranks up (the records' time
        0) and makes every rank raise when one was called wrongly."""
        count, stage = self.schedule.microbatches, self.stage
        last = self.schedule.stage_count - 1
        problem = None
        for what, given, needed in (("inputs", inputs, stage == 0), ("targets", targets, stage == last)):
            if needed and (given is None or len(given) != count):
                problem = InvalidInputError(f"stage {stage} (rank {self.rank}) needs {count} micro-batch {what}, "
                                            f"got {'none' if given is None else len(given)}")
        if self.synchronize:
            _agree(problem, "start the iteration")     # the barrier that lines the ranks up; raises on all
        elif problem is not None:
            raise problem
        origin = time.perf_counter()
        if stage is None:
            self.last_record = IterationRecord(self.rank, None, 0.0)
            return self.last_record
        received = self._post_receives(origin)
        sends: list[concurrent.futures.Future] = []
        actions, losses = [], {}
        for action in self.schedule.stages[stage]:
            m = action.microbatch
            if action.kind is F:
                x = inputs[m] if stage == 0 else self._wait(received[("F", m)], f"the activation of micro-batch {m} "
                                                             f"from stage {stage - 1}")[0]
                start = time.perf_counter()
                out = self.compute.forward(m, x, targets[m] if stage == last else None)
                if stage == last:
                    losses[m] = float(out)
                else:
                    sends.append(self._send("F", stage, m, out, origin))
            elif action.kind in (B, IN):
                grad = None if stage == last else self._wait(received[("B", m)], f"the gradient of micro-batch {m} "
                                                                                  f"from stage {stage + 1}")[0]
                start = time.perf_counter()
                run = self.compute.backward if action.kind is B else self.compute.backward_input
                grad_in = run(m, grad)
                if stage > 0:
                    sends.append(self._send("B", stage - 1, m, grad_in, origin))
            else:
                start = time.perf_counter()
                self.compute.backward_weight(m)
            actions.append(ActionTime(action, start - origin, time.perf_counter() - origin))
        if stage in self._mesh_groups:
            self._all_reduce_gradients(self._mesh_groups[stage])
        transfers = [self._wait(f, "an outgoing transfer") for f in sends]
        transfers += [f.result()[1] for f in received.values()]
        record = IterationRecord(self.rank, stage, time.perf_counter() - origin, tuple(actions),
                                 tuple(sorted(transfers, key=lambda t: t.start)),
                                 tuple(losses[m] for m in sorted(losses)))
        self.last_record = record
        return record

    def _post_receives(self, origin: float) -> dict[tuple[str, int], concurrent.futures.Future]:
        """Queue this rank's receives for the iteration, in the senders' order."""
        stage, futures = self.stage, {}
        for kind, boundary, sender in (("F", stage - 1, stage - 1), ("B", stage, stage + 1)):
            channel = self._boundaries.get((boundary, kind))
            if channel is None:
                continue
            kinds = (F,) if kind == "F" else (B, IN)
            for action in self.schedule.stages[sender]:
                if action.kind in kinds:
                    futures[(kind, action.microbatch)] = channel.channel.submit(
                        channel.transfer, action.microbatch, origin, None, self.dtype)
        return futures

    def _send(self, kind: str, boundary: int, microbatch: int, tensor: torch.Tensor,
              origin: float) -> concurrent.futures.Future:
        channel = self._boundaries[(boundary, kind)]
        box = channel.resharder.program.sources[self.rank]
        if tuple(tensor.shape) != tuple(box.shape) or tensor.dtype != self.dtype:
            what = "output" if kind == "F" else "input gradient"
            raise InvalidInputError(f"stage {self.stage} (rank {self.rank}) made a {tensor.dtype} {what} of shape "
                                    f"{tuple(tensor.shape)} for micro-batch {microbatch}, but boundary {boundary}'s "
                                    f"program sends its box [{box}] of shape {tuple(box.shape)} as {self.dtype}")
        return channel.channel.submit(lambda *a: channel.transfer(*a)[1], microbatch, origin, tensor, self.dtype)

    def _wait(self, future: concurrent.futures.Future, what: str):
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            raise RuntimeError(f"rank {self.rank} (stage {self.stage}) waited {self.timeout:.0f} s for {what}; "
                               "a peer rank failed or runs another schedule") from None

    def _all_reduce_gradients(self, group: dist.ProcessGroup) -> None:
        """Sum the stage's weight gradients over its mesh (one flat all-reduce)."""
        params = [p for p in self.compute.module.parameters() if p.grad is not None]
        if not params:
            return
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat, group=group)
        offset = 0
        for param in params:
            n = param.grad.numel()
            param.grad.copy_(flat[offset:offset + n].view_as(param.grad))
            offset += n

    # ---- lifetime ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the communication threads (after the last :meth:`run`)."""
        for boundary in self._boundaries.values():
            if boundary.channel is not None:
                boundary.channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
