"""Run a cross-mesh resharding program on real tensors (Zhuang et al., MLSys 2023, §2.2, §3.1).

:class:`Resharder` executes a lowered :class:`~optimizer_service.plan.resharding.ReshardProgram`
(made by the planner, :mod:`optimizer_service.resharding`): every source rank
passes its local shard (the program's source box of the global tensor); every
destination rank gets back a new tensor holding exactly its destination box.

* **Built once.** The constructor is collective over the default group: on every
  rank of the world it creates, in one order identical everywhere, the
  subgroups the program's all-gather tasks need — one per distinct receiver
  host (local all-gather) and one per distinct receiver set (global
  all-gather), of two or more ranks, deduplicated — and works out everything
  this rank does in each of its tasks (views, part bounds, peers, tags). A call
  only slices and communicates.
* **One global order.** Each rank runs ``program.tasks_of(rank)`` in order and
  finishes a task before its next. Every task's participants reach it once
  their earlier tasks are done, which by induction over the order they all
  are: no deadlock. Tasks that share no rank run at the same time.
* **Host-level order** (§3.2, Eq. 3). The ranks' own order keeps a *device*
  from overlapping itself, but the planner schedules *hosts*: several devices
  of one host sending at once share its NIC, which the plan never does. A
  task's ``after`` (lowered by the planner) names the tasks it follows on its
  hosts; its sender starts it only once each of them has finished, told by a
  one-byte token from their :func:`~enforcer.reshard.strategies.finishers`
  (sent without blocking when they end the task; the sender posts its token
  receives when the run begins, so a token costs one message's latency). The
  sender alone waits: nothing moves before it sends. Deadlock-free as before —
  a token for task ``k`` comes from tasks before ``k``. Measured on an
  emulated 200 Mbit/s cluster (Table 2, case 4: 64 single-receiver tasks),
  without it up to 4–8 flows shared a sender NIC, its shallow queue dropped
  packets and single 512 KiB messages stalled ≥ 200 ms on retransmission
  timeouts.
* **Tags.** Point-to-point messages carry ``order · stride + k`` (``k``: the
  broadcast part, else 0; ``stride`` = the largest partition count + 1), so
  messages of different tasks or parts between the same two ranks cannot be
  confused; the tokens task ``order`` waits for carry ``order · stride +
  stride − 1``, a part number no task uses.
* The strategies themselves (send/recv, local and global all-gather, pipelined
  broadcast chains): :mod:`enforcer.reshard.strategies`.

Ranks in the program are global ranks (the contract lowers to them). ``group``
is the communicator the point-to-point messages use (default: the default
group); it must contain every rank of the program. Any dtype, any number of
dimensions, empty boxes. The user-facing function and the DTensor adapter are
in :mod:`enforcer.reshard.api`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from enforcer.comm.sendrecv import GroupPeers
from enforcer.comm.subgroups import GroupCache
from enforcer.reshard import strategies as strategies
from enforcer.reshard.strategies import GatherGroup
from optimizer_service.plan import InvalidInputError, PlanError
from optimizer_service.plan.resharding import Box, ReshardProgram, ReshardTask, Strategy

#: Tags are int32 on the wire (gloo refuses negative ones).
_TAG_LIMIT = 2 ** 31


@dataclass(frozen=True)
class _Step:
    """What this rank does in one task."""

    task: ReshardTask
    sending: bool
    index: tuple[slice, ...]          # the task's box inside this rank's own (source or destination) box
    n: int                            # elements of the slice
    tag: int                          # the task's first tag
    parts: tuple[tuple[int, int], ...] = ()          # broadcast: the K parts
    previous: int | None = None                      # broadcast: upstream in the chain
    following: int | None = None                     # broadcast: downstream in the chain
    groups: tuple[GatherGroup, ...] = ()             # all-gather: every group (sender) or this rank's (receiver)
    subgroup: dist.ProcessGroup | None = None        # all-gather receiver: its group's process group
    waits: tuple[tuple[int, int], ...] = ()          # sender: (finisher, tag) of each token to await first
    signals: tuple[tuple[int, int], ...] = ()        # (waiter, tag) of each token to send when done

    def tag_of(self, part: int) -> int:
        return self.tag + part


def gather_member_sets(program: ReshardProgram) -> list[tuple[int, ...]]:
    """The subgroups ``program`` needs, each once, in first-use order."""
    seen: dict[tuple[int, ...], None] = {}
    for task in program.tasks:
        for group in strategies.gather_groups(task, task.box.elements):
            if len(group.members) > 1 and not task.box.empty:
                seen.setdefault(group.members, None)
    return list(seen)


def host_order_tokens(program: ReshardProgram) -> dict[tuple[int, int], int]:
    """The tokens that keep ``program``'s host-level order (module docstring):
    ``(finisher, task order) → the task after which the finisher sends it``
    (the latest of its predecessors that rank finishes)."""
    by_order = {task.order: task for task in program.tasks}
    tokens: dict[tuple[int, int], int] = {}
    for task in program.tasks:
        for before in task.after:
            for rank in strategies.finishers(by_order[before]):       # receivers: never the sender (disjoint meshes)
                key = (rank, task.order)
                tokens[key] = max(tokens.get(key, before), before)
    return tokens


def check_local(program: ReshardProgram, rank: int, local: torch.Tensor | None) -> None:
    """Raise one clear line when ``local`` is not what source rank ``rank`` must pass."""
    box = program.sources.get(rank)
    if box is None:
        return
    if not isinstance(local, torch.Tensor):
        raise InvalidInputError(f"rank {rank} is a source of the resharding: pass its local shard "
                                f"(the box [{box}], shape {tuple(box.shape)}), not {type(local).__name__}")
    if tuple(local.shape) != tuple(box.shape):
        raise InvalidInputError(f"rank {rank}'s local shard has shape {tuple(local.shape)}, but the program's "
                                f"source box [{box}] has shape {tuple(box.shape)}; pass exactly that shard")


class Resharder:
    """Executes one resharding program; construct it on every rank (collective).

    ``groups``: a :class:`~enforcer.comm.subgroups.GroupCache` to take the all-gather
    subgroups from and add to, shared by several Resharders so a receiver set
    gets one process group however many programs use it (every rank must pass
    caches with the same history)."""

    def __init__(self, program: ReshardProgram, group: dist.ProcessGroup | None = None, *,
                 groups: GroupCache | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("Resharder needs torch.distributed initialised (init_process_group) first")
        world = dist.get_world_size()
        outside = [rank for rank in program.ranks if rank >= world]
        if outside:
            raise InvalidInputError(f"the resharding program names ranks {outside}, but the world has only "
                                    f"{world} ranks; plan it for meshes inside this world")
        self.program = program
        self.group = group
        self.rank = dist.get_rank()
        self._peers = GroupPeers(group)
        self._groups = groups if groups is not None else GroupCache()
        self._groups.create(gather_member_sets(program))
        stride = max((task.partitions for task in program.tasks), default=1) + 1
        if program.tasks and (program.tasks[-1].order + 1) * stride >= _TAG_LIMIT:
            raise PlanError(f"resharding program too long for int32 tags: order {program.tasks[-1].order} "
                            f"× {stride} parts")
        self._source: Box | None = program.sources.get(self.rank)
        self._destination: Box | None = program.destinations.get(self.rank)
        tokens = host_order_tokens(program)
        by_order = {task.order: task for task in program.tasks}
        waits: dict[int, list[tuple[int, int]]] = {}
        signals: dict[int, list[tuple[int, int]]] = {}
        for (finisher, order), before in sorted(tokens.items()):
            tag = order * stride + stride - 1
            if by_order[order].sender == self.rank:
                waits.setdefault(order, []).append((finisher, tag))
            if finisher == self.rank:
                signals.setdefault(before, []).append((by_order[order].sender, tag))
        self._steps = tuple(self._step(task, stride, tuple(waits.get(task.order, ())),
                                       tuple(signals.get(task.order, ())))
                            for task in program.tasks_of(self.rank))
        self._token = torch.ones(1, dtype=torch.uint8)
        self._token_inbox = torch.zeros(sum(len(step.waits) for step in self._steps), dtype=torch.uint8)

    def _step(self, task: ReshardTask, stride: int, waits: tuple[tuple[int, int], ...],
              signals: tuple[tuple[int, int], ...]) -> _Step:
        sending = task.sender == self.rank
        own = self._source if sending else self._destination
        n = task.box.elements
        common = dict(task=task, sending=sending, index=task.box.relative_to(own), n=n, tag=task.order * stride,
                      waits=waits, signals=signals)
        if task.strategy is Strategy.BROADCAST:
            chain = task.ranks
            position = chain.index(self.rank)
            return _Step(**common, parts=strategies.split_even(n, task.partitions),
                         previous=chain[position - 1] if position > 0 else None,
                         following=chain[position + 1] if position + 1 < len(chain) else None)
        if task.strategy in (Strategy.LOCAL_ALLGATHER, Strategy.GLOBAL_ALLGATHER):
            groups = strategies.gather_groups(task, n)
            if sending:
                return _Step(**common, groups=groups)
            mine = next(g for g in groups if self.rank in g.members)
            subgroup = self._groups.get(mine.members) if len(mine.members) > 1 and n else None
            return _Step(**common, groups=(mine,), subgroup=subgroup)
        return _Step(**common)

    @property
    def is_source(self) -> bool:
        return self._source is not None

    @property
    def is_destination(self) -> bool:
        return self._destination is not None

    def __call__(self, local: torch.Tensor | None = None, *, out: torch.Tensor | None = None,
                 dtype: torch.dtype | None = None) -> torch.Tensor | None:
        """Run the program once. A source rank passes its shard ``local``; a
        destination rank gets a new tensor of its destination box's shape (or
        fills ``out``, of that shape) and must say its dtype — ``out``'s, else
        ``dtype``, else ``local``'s when it passes a tensor. Every other rank
        gets ``None``."""
        check_local(self.program, self.rank, local)
        target = self._output(local, out, dtype) if self._destination is not None else None
        tokens = iter(self._receive_tokens())
        signalled = []
        for step in self._steps:
            for _ in step.waits:
                next(tokens).wait()
            if step.n:
                if step.sending:
                    self._send(step, local)
                else:
                    self._receive(step, target)
            signalled += [self._peers.isend(self._token, waiter, tag) for waiter, tag in step.signals]
        for work in signalled:
            work.wait()
        return target

    def _receive_tokens(self) -> list[dist.Work]:
        """Post every token receive of this run, in step order (module docstring)."""
        works = []
        for step in self._steps:
            for finisher, tag in step.waits:
                works.append(self._peers.irecv(self._token_inbox[len(works):len(works) + 1], finisher, tag))
        return works

    def run_timed(self, local: torch.Tensor | None = None, repeats: int = 1, *,
                  out: torch.Tensor | None = None, dtype: torch.dtype | None = None) -> list[float]:
        """For measurement: ``repeats`` times barrier, run, barrier (on ``group``;
        every rank of it calls this); per run the wall seconds from leaving the
        first barrier to this rank's own end of the run. A resharding's time is
        the largest over the ranks."""
        seconds = []
        for _ in range(repeats):
            dist.barrier(group=self.group)
            start = time.perf_counter()
            self(local, out=out, dtype=dtype)
            seconds.append(time.perf_counter() - start)
            dist.barrier(group=self.group)
        return seconds

    def _output(self, local: torch.Tensor | None, out: torch.Tensor | None, dtype: torch.dtype | None) -> torch.Tensor:
        shape = tuple(self._destination.shape)
        if out is not None:
            if tuple(out.shape) != shape:
                raise InvalidInputError(f"rank {self.rank}'s out has shape {tuple(out.shape)}, but its destination "
                                        f"box [{self._destination}] has shape {shape}")
            return out
        if dtype is None and isinstance(local, torch.Tensor):
            dtype = local.dtype
        if dtype is None:
            raise InvalidInputError(f"rank {self.rank} receives the box [{self._destination}]: pass dtype= "
                                    "(or out=) so it knows what to allocate")
        device = local.device if isinstance(local, torch.Tensor) else torch.device("cpu")
        return torch.empty(shape, dtype=dtype, device=device)

    def _send(self, step: _Step, local: torch.Tensor) -> None:
        flat = local[step.index].contiguous().view(-1)      # a copy only when the box is not contiguous
        task = step.task
        if task.strategy is Strategy.SEND_RECV:
            strategies.send_whole(self._peers, flat, task.receivers, step.tag)
        elif task.strategy is Strategy.BROADCAST:
            strategies.chain_send(self._peers, flat, step.following, step.parts, step.tag_of)
        else:
            strategies.send_parts(self._peers, flat, step.groups, step.tag)

    def _receive(self, step: _Step, target: torch.Tensor) -> None:
        view = target[step.index]
        direct = view.view(-1) if view.is_contiguous() else None
        task = step.task
        if task.strategy in (Strategy.SEND_RECV, Strategy.BROADCAST):
            buffer = direct if direct is not None else torch.empty(step.n, dtype=target.dtype, device=target.device)
            if task.strategy is Strategy.SEND_RECV:
                strategies.receive_whole(self._peers, buffer, task.sender, step.tag)
            else:
                strategies.chain_receive(self._peers, buffer, step.previous, step.following, step.parts,
                                         step.tag_of)
        else:
            buffer = strategies.receive_and_gather(self._peers, direct, step.n, target.dtype, target.device,
                                                   task.sender, step.groups[0], step.subgroup, self.rank, step.tag)
        if buffer is not direct:
            view.copy_(buffer[:step.n].view(view.shape))
