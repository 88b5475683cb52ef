"""The four ways one unit task moves its slice (Zhuang et al., MLSys 2023, §3.1, Figure 3 a–d).

A unit task sends one data slice — a box of the global tensor, flattened in
row-major order of the box into ``n`` elements — from one sender rank to its
receivers. Every function here is what *one* rank does in one task; every
participant calls the function of its role with the same task, so the sizes of
all parts are known on every side and never travel on the wire. Each blocks
until this rank's part of the task is done.

* **send/recv** (Figure 3a): the sender sends the whole slice to every receiver.
* **local all-gather** (Figure 3b): per receiver host with ``B`` receivers, the
  sender sends one of ``B`` equal parts of the slice (the flattened slice padded
  to a multiple of ``B``; padding is never sent) to each of them, then the
  receivers of that host all-gather the parts in the host's subgroup.
* **global all-gather** (Figure 3c): the same with one part per receiver and one
  all-gather over all receivers.
* **broadcast** (Figure 3d): a chain ``sender → receivers[0] → receivers[1] →
  …`` in the task's receiver order, the slice cut into ``K = partitions`` parts
  (sizes differ by at most one element; empty ones are dropped when ``n < K``).
  Every chain member posts all its receives first and forwards part ``k`` as
  soon as it has arrived, so the parts flow down the chain together and the
  task takes ``≈ t + hops·t/K`` instead of ``hops·t``.

Readings (where §3.1 leaves details open):

* Part ``i`` of an all-gather goes to the ``i``-th receiver in ascending rank
  order, because that is its rank in the subgroup (``new_group`` sorts members)
  and so its place in the gathered buffer.
* An all-gather group of one receiver gets the whole slice by send/recv and
  gathers nothing (no subgroup is made for it).
* An empty slice moves nothing under every strategy.
* A task has *finished* (for the host-level order, :func:`finishers`) when the
  ranks that complete last under its strategy have: a broadcast's chain end
  (every part passed every member before it), every receiver of a send/recv
  (they receive side by side), one member per all-gather group (the gather is
  collective, so one member's end is its group's).

Copies: the sender's slice is a view of its local shard, copied once into a
contiguous buffer only when the box is not contiguous in it. A receiver works
in its output tensor's view of the box when that view is contiguous (receives
and all-gathers land in place); otherwise in one scratch buffer, copied into
the view once at the end. A padded all-gather gathers into a scratch buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from enforcer.comm.sendrecv import GroupPeers
from optimizer_service.plan.resharding import ReshardTask, Strategy


def split_even(n: int, parts: int) -> tuple[tuple[int, int], ...]:
    """``[start, stop)`` of ``parts`` near-equal pieces of ``n`` (the first ``n % parts`` one longer);
    empty pieces dropped."""
    base, extra = divmod(n, parts)
    bounds, start = [], 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        if stop > start:
            bounds.append((start, stop))
        start = stop
    return tuple(bounds)


def padded_part(n: int, members: int) -> int:
    """Elements per part when ``n`` is padded to a multiple of ``members``."""
    return -(-n // members)


@dataclass(frozen=True)
class GatherGroup:
    """One all-gather group of a task: its members in subgroup (ascending) order."""

    members: tuple[int, ...]
    part: int                    # elements per (padded) part

    def bounds(self, n: int, index: int) -> tuple[int, int]:
        """The real elements of part ``index`` (the tail of the padding is not sent)."""
        start = min(n, index * self.part)
        return start, min(n, start + self.part)


def gather_groups(task: ReshardTask, n: int) -> tuple[GatherGroup, ...]:
    """The all-gather groups of an all-gather task: one per receiver host (local)
    or one of all receivers (global)."""
    if task.strategy is Strategy.LOCAL_ALLGATHER:
        sets = task.receiver_hosts
    elif task.strategy is Strategy.GLOBAL_ALLGATHER:
        sets = (task.receivers,)
    else:
        return ()
    return tuple(GatherGroup(tuple(sorted(s)), padded_part(n, len(s))) for s in sets)


def finishers(task: ReshardTask) -> tuple[int, ...]:
    """The ranks whose end of ``task`` is the task's end (module docstring)."""
    if task.strategy is Strategy.BROADCAST:
        return (task.receivers[-1],)
    if task.strategy is Strategy.SEND_RECV:
        return task.receivers
    return tuple(group.members[-1] for group in gather_groups(task, task.box.elements))


#: torch 2.13 names it ``all_gather_single`` (``all_gather_into_tensor`` warns); older torch has only the latter.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _wait(works: Sequence[dist.Work]) -> None:
    for work in works:
        work.wait()


# ---- senders ---------------------------------------------------------------------------------------------------


def send_whole(peers: GroupPeers, flat: torch.Tensor, receivers: Sequence[int], tag: int) -> None:
    """send/recv: the whole slice to every receiver (Figure 3a)."""
    _wait([peers.isend(flat, r, tag) for r in receivers])


def send_parts(peers: GroupPeers, flat: torch.Tensor, groups: Sequence[GatherGroup], tag: int) -> None:
    """All-gather strategies, first stage: part ``i`` of each group to its ``i``-th member."""
    n = flat.numel()
    works = []
    for group in groups:
        if len(group.members) == 1:
            works.append(peers.isend(flat, group.members[0], tag))
            continue
        for index, member in enumerate(group.members):
            start, stop = group.bounds(n, index)
            if stop > start:
                works.append(peers.isend(flat[start:stop], member, tag))
    _wait(works)


def chain_send(peers: GroupPeers, flat: torch.Tensor, first: int, parts: Sequence[tuple[int, int]],
               tag_of) -> None:
    """broadcast, the chain's head: every part to the first receiver."""
    _wait([peers.isend(flat[a:b], first, tag_of(k)) for k, (a, b) in enumerate(parts)])


# ---- receivers -------------------------------------------------------------------------------------------------


def receive_whole(peers: GroupPeers, buffer: torch.Tensor, sender: int, tag: int) -> None:
    peers.irecv(buffer, sender, tag).wait()


def receive_and_gather(peers: GroupPeers, out: torch.Tensor | None, n: int, dtype: torch.dtype,
                       device: torch.device, sender: int, group: GatherGroup,
                       subgroup: dist.ProcessGroup | None, rank: int, tag: int) -> torch.Tensor:
    """All-gather strategies, this receiver: its part from the sender, then the
    all-gather in ``subgroup``. Gathers into ``out`` (the contiguous flat view of
    the box in the output, or ``None``) when no padding is needed, else into a
    padded scratch buffer; returns the buffer whose first ``n`` elements are the slice."""
    if len(group.members) == 1:
        buffer = out if out is not None else torch.empty(n, dtype=dtype, device=device)
        peers.irecv(buffer, sender, tag).wait()
        return buffer
    index = group.members.index(rank)
    size = group.part * len(group.members)
    gathered = out if out is not None and size == n else torch.empty(size, dtype=dtype, device=device)
    mine = torch.empty(group.part, dtype=dtype, device=device)
    start, stop = group.bounds(n, index)
    if stop > start:
        peers.irecv(mine[:stop - start], sender, tag).wait()
    _all_gather(gathered, mine, group=subgroup)
    return gathered


def chain_receive(peers: GroupPeers, buffer: torch.Tensor, previous: int, following: int | None,
                  parts: Sequence[tuple[int, int]], tag_of) -> None:
    """broadcast, a chain member: post every receive, forward each part as soon as it arrived."""
    receives = [peers.irecv(buffer[a:b], previous, tag_of(k)) for k, (a, b) in enumerate(parts)]
    sends = []
    for k, ((a, b), work) in enumerate(zip(parts, receives)):
        work.wait()
        if following is not None:
            sends.append(peers.isend(buffer[a:b], following, tag_of(k)))
    _wait(sends)
