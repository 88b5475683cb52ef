"""Bandwidth-optimal collectives built from an inner backend's send and recv.

gloo implements ``reduce_scatter`` as a full AllReduce plus a local copy, so
it puts ``2(p−1)/p·n`` bytes on the wire where a ReduceScatter needs
``(p−1)/p·n``. A ReduceScatter→AllReduce→AllGather program would lose exactly
the saving P² measures. These are the textbook algorithms instead, each the
flow pattern the simulator assumes (:mod:`optimizer_service.hardware.cost_model`):

* :func:`reduce_scatter` — ring over the members in group order: in round
  ``s`` member ``i`` sends its running sum of part ``i−s−1`` to ``i+1`` and adds
  what ``i−1`` sends into part ``i−s−2``; after ``p−1`` rounds member ``i``
  holds the full sum of part ``i``. Each member sends ``(p−1)/p·n``.
* :func:`all_gather` — ring: in round ``s`` member ``i`` forwards part ``i−s``
  and receives part ``i−s−1`` straight into its place. Each sends ``(p−1)·n/p``
  of the gathered total.
* :func:`reduce` / :func:`broadcast` — a pipelined chain (NCCL's ring Reduce
  and Broadcast): the payload is cut into segments that flow along
  ``m_{p-1} → … → m₀`` (into the root) or ``m₀ → … → m_{p-1}``; every edge
  carries ``n`` once and segments overlap across edges.

Parts may have different sizes (a tensor that does not divide) and may be
empty; every member knows all sizes in advance, so nothing is sent for an
empty part and no sizes travel on the wire. Members are global ranks; the
group is the process group whose ranks they are (the default group works),
or a :class:`BackendPeers` — a bare inner backend made for exactly these
members, as the enforcer's plan runtime uses. All calls are blocking; sends
and the matching receive of one round run concurrently.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

#: Segment size of the pipelined chains (bytes): small enough to overlap the
#: edges of a chain of a few members, large enough that per-message overhead
#: stays below a few percent on a loopback or NIC transfer.
CHAIN_SEGMENT_BYTES = 1 << 20


class BackendPeers:
    """Point-to-point over a bare c10d backend whose ranks are ``members``' positions."""

    def __init__(self, backend: dist.Backend, members: Sequence[int], rank: int) -> None:
        self.backend = backend
        self.rank = rank
        self._local = {m: i for i, m in enumerate(members)}

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        return self.backend.send([tensor], self._local[peer], tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        return self.backend.recv([tensor], self._local[peer], tag)


class GroupPeers:
    """Tagged point-to-point over a process group (global ranks; ``None``: the default group)."""

    def __init__(self, group: dist.ProcessGroup | None) -> None:
        self.group = group
        self.rank = dist.get_rank()

    def isend(self, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        return dist.isend(tensor, dst=peer, group=self.group, tag=tag)

    def irecv(self, tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
        return dist.irecv(tensor, src=peer, group=self.group, tag=tag)


def _peers(group) -> BackendPeers | GroupPeers:
    return group if isinstance(group, BackendPeers) else GroupPeers(group)


def _position(members: Sequence[int], rank: int) -> int:
    try:
        return list(members).index(rank)
    except ValueError:
        raise ValueError(f"rank {rank} is not a member of {list(members)}") from None


def _ring(what: str, parts: Sequence[torch.Tensor], members: Sequence[int], group):
    """This rank's peers, position in the ring, and right and left neighbours."""
    p = len(members)
    if len(parts) != p:
        raise ValueError(f"{what} needs one part per member ({p}), got {len(parts)}")
    peers = _peers(group)
    i = _position(members, peers.rank)
    return peers, i, members[(i + 1) % p], members[(i - 1) % p]


def _exchange(send: torch.Tensor | None, dst: int, recv: torch.Tensor | None, src: int,
              peers, tag: int) -> None:
    works = []
    if recv is not None and recv.numel():
        works.append(peers.irecv(recv, src, tag))
    if send is not None and send.numel():
        works.append(peers.isend(send, dst, tag))
    for work in works:
        work.wait()


def reduce_scatter(parts: Sequence[torch.Tensor], members: Sequence[int],
                   group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``parts[j]`` over all members into member ``j``'s ``parts[j]``.

    ``parts`` are this rank's contiguous buffers, one per member (equal sizes on
    every member for the same ``j``). On return ``parts[i]`` of member ``i``
    holds the sum; the other parts hold partial sums (scratch). Returns it.
    """
    p = len(members)
    peers, i, right, left = _ring("reduce_scatter", parts, members, group)
    scratch = torch.empty(max((t.numel() for t in parts), default=0), dtype=parts[i].dtype)
    for s in range(p - 1):
        outgoing = parts[(i - s - 1) % p]
        incoming = parts[(i - s - 2) % p]
        buffer = scratch[:incoming.numel()]
        _exchange(outgoing, right, buffer, left, peers, tag=s)
        if incoming.numel():
            incoming.add_(buffer)
    return parts[i]


def all_gather(parts: Sequence[torch.Tensor], members: Sequence[int],
               group: dist.ProcessGroup | None = None) -> None:
    """Fill every ``parts[j]`` with member ``j``'s ``parts[j]`` (in place)."""
    p = len(members)
    peers, i, right, left = _ring("all_gather", parts, members, group)
    for s in range(p - 1):
        _exchange(parts[(i - s) % p], right, parts[(i - s - 1) % p], left, peers, tag=s)


def _segments(buffer: torch.Tensor, segment_bytes: int) -> list[torch.Tensor]:
    if not buffer.numel():
        return []
    per = max(1, segment_bytes // max(1, buffer.element_size()))
    return list(buffer.split(per))


def reduce(buffer: torch.Tensor, members: Sequence[int], group: dist.ProcessGroup | None = None,
           segment_bytes: int = CHAIN_SEGMENT_BYTES) -> None:
    """Sum ``buffer`` over the members into the root ``members[0]`` (in place
    there; the others' buffers end as partial sums)."""
    p = len(members)
    peers = _peers(group)
    i = _position(members, peers.rank)
    segments = _segments(buffer, segment_bytes)
    downstream = members[i - 1] if i > 0 else None     # towards the root
    upstream = members[i + 1] if i < p - 1 else None
    scratch = [torch.empty_like(seg) for seg in segments] if upstream is not None else []
    sends = []
    pending = peers.irecv(scratch[0], upstream, 0) if scratch else None
    for k, seg in enumerate(segments):
        if pending is not None:
            pending.wait()
            pending = peers.irecv(scratch[k + 1], upstream, k + 1) if k + 1 < len(segments) else None
            seg.add_(scratch[k])
        if downstream is not None:
            sends.append(peers.isend(seg, downstream, k))
    for work in sends:
        work.wait()


def broadcast(buffer: torch.Tensor, members: Sequence[int], group: dist.ProcessGroup | None = None,
              segment_bytes: int = CHAIN_SEGMENT_BYTES) -> None:
    """Copy the root's (``members[0]``) ``buffer`` into every member's ``buffer``."""
    p = len(members)
    peers = _peers(group)
    i = _position(members, peers.rank)
    segments = _segments(buffer, segment_bytes)
    upstream = members[i - 1] if i > 0 else None       # towards the root
    downstream = members[i + 1] if i < p - 1 else None
    receives = [peers.irecv(seg, upstream, k) for k, seg in enumerate(segments)] if upstream is not None else []
    sends = []
    for k, seg in enumerate(segments):
        if receives:
            receives[k].wait()
        if downstream is not None:
            sends.append(peers.isend(seg, downstream, k))
    for work in sends:
        work.wait()


def all_to_all(inputs: torch.Tensor, outputs: torch.Tensor, columns: tuple[int, int], window: tuple[int, int],
               members: Sequence[int], group=None) -> None:
    """One splined all-to-all motif (Syndicate §4.2.1): ``inputs``/``outputs`` are
    ``(N, D)`` blocks (block ``j`` for/from member ``j``); for every offset ``o`` in
    ``window`` member ``i`` sends columns ``columns`` of its block ``i+o`` to member
    ``i+o`` and receives member ``i−o``'s into its block ``i−o`` (offset 0 is a copy)."""
    n = len(members)
    peers = _peers(group)
    i = _position(members, peers.rank)
    lo, hi = columns
    if hi <= lo:
        return
    works = []
    for offset in range(*window):
        dst, src = (i + offset) % n, (i - offset) % n
        if offset % n == 0:
            outputs[i, lo:hi].copy_(inputs[i, lo:hi])
            continue
        receive = torch.empty(hi - lo, dtype=outputs.dtype)
        works.append((peers.irecv(receive, members[src], offset), src, receive))
        works.append((peers.isend(inputs[dst, lo:hi].contiguous(), members[dst], offset), None, None))
    for work, src, receive in works:
        work.wait()
        if receive is not None:
            outputs[src, lo:hi].copy_(receive)
