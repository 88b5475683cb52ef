"""Motifs on a channel whose backend is UCC: each motif as one UCC collective (:class:`UccMotifs`).

On gloo and NCCL channels motifs run the send/recv algorithms of
:mod:`enforcer.comm.sendrecv` (:mod:`enforcer.runtime.sendrecv_motifs`); UCC has no
point-to-point, so on a UCC channel each motif is one UCC collective with the
same result, bit for bit (SUM of the same operands; integers exactly, floats
up to the order UCC adds them in):

* ALL_REDUCE over ``[lo, hi)`` — allreduce (in place);
* REDUCE / BROADCAST — reduce into / broadcast from the motif's first rank;
* REDUCE_SCATTER with one range per member — reduce_scatterv: member ``j``'s
  range ends holding the sum (the other ranges are left as they were, where
  the ring of :func:`enforcer.comm.sendrecv.reduce_scatter` leaves partial sums);
* ALL_GATHER with one range per member — allgatherv in place: the ranges stay
  where they are (displacements), nothing is copied;
* ALL_TO_ALL with columns ``[lo, hi)`` and a destination window — alltoallv
  whose displacements address those columns of every ``(N, D)`` block
  directly: member ``i`` sends its block ``i+o`` to member ``i+o`` and receives
  member ``i−o``'s into its block ``i−o`` for each offset ``o`` of the window
  (offset 0 is a local copy), as :func:`enforcer.comm.sendrecv.all_to_all`.

UCC 1.3.0 reduces no float16 on CPU: a float16 ALL_REDUCE, REDUCE or REDUCE_SCATTER reduces a
float32 copy of its operands and rounds the result back to float16 once (:func:`_reducible`),
which stays within the rounding bound a plan's floating sums are held to (another summation
order; ``tests/enforcer/test_dtypes.py``). Bool buffers arrive as their bytes (uint8,
:mod:`enforcer.runtime.buffers`), which UCC sums.

The C++ plan runtime runs the same forms without Python
(``cpp_ext/enforcer/ucc_motifs.*``, through the backend's ``p2::VCollectives``);
tests/ucc/test_ucc_native_motifs.py holds the two equal bit for bit.

``members`` are the motif's global ranks in the motif's order (block and part
``j`` belong to ``members[j]``; the root first); the backend was made for the
same members *sorted* (:func:`enforcer.runtime.channels.build`), so its team
ranks are positions in ``sorted(members)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from enforcer.comm.sendrecv import BackendPeers
from enforcer.runtime.motif_runner import motif_peers
from optimizer_service.plan import Collective, Motif, OpPlan


class UccMotifs:
    """The :class:`~enforcer.runtime.motif_runner.MotifRunner` of a UCC channel."""

    def __init__(self, peers: dict[tuple[int, ...], BackendPeers]) -> None:
        self.peers = peers

    def run(self, op: OpPlan, motif: Motif, buffer: torch.Tensor, output: torch.Tensor | None) -> None:
        found = motif_peers(self.peers, op, motif)
        if found is not None:
            members, peers = found
            run_collective(motif, buffer, output, members, peers.rank, peers.backend)


def run_collective(motif: Motif, buffer: torch.Tensor, output: torch.Tensor | None, members: Sequence[int],
                   me: int, backend) -> None:
    """Run ``motif`` on this rank (``me``, a global rank) over the UCC ``backend`` of ``sorted(members)``.
    ``buffer``: the op's flat buffer, or its input's ``(N, D)`` blocks for all-to-all (``output``: the
    output's blocks)."""
    order = sorted(members)
    team_rank = {rank: t for t, rank in enumerate(order)}       # global rank -> team rank
    position = {rank: p for p, rank in enumerate(members)}      # global rank -> motif position
    if motif.kind is Collective.ALL_TO_ALL:
        _all_to_all(buffer, output, motif.ranges[0], motif.window, members, position[me], order, backend)
    elif motif.kind is Collective.REDUCE_SCATTER:
        _reduce_scatter(buffer, motif.ranges, [position[r] for r in order], team_rank[me], backend)
    elif motif.kind is Collective.ALL_GATHER:
        _all_gather(buffer, motif.ranges, [position[r] for r in order], backend)
    else:
        (lo, hi), = motif.ranges
        data = buffer[lo:hi]
        if not data.numel():
            return
        if motif.kind is Collective.ALL_REDUCE:
            reduced = _reducible(data)
            backend.allreduce([reduced]).wait()
            _round_back(data, reduced)
        elif motif.kind is Collective.REDUCE:
            opts = dist.ReduceOptions()
            opts.reduceOp = dist.ReduceOp.SUM
            opts.rootRank = team_rank[members[0]]
            reduced = _reducible(data)
            backend.reduce([reduced], opts).wait()
            _round_back(data, reduced)
        elif motif.kind is Collective.BROADCAST:
            opts = dist.BroadcastOptions()
            opts.rootRank = team_rank[members[0]]
            backend.broadcast([data], opts).wait()
        else:
            raise ValueError(f"no UCC form for motif kind {motif.kind}")


def _reducible(data: torch.Tensor) -> torch.Tensor:
    """``data`` in a dtype UCC reduces: a float32 copy of float16 (UCC 1.3.0 reduces no float16 on CPU)."""
    return data.float() if data.dtype == torch.float16 else data


def _round_back(data: torch.Tensor, reduced: torch.Tensor) -> None:
    """Write a reduction done on a float32 copy (:func:`_reducible`) back into ``data``."""
    if reduced is not data:
        data.copy_(reduced)


def _reduce_scatter(buffer: torch.Tensor, ranges: Sequence[tuple[int, int]], positions: list[int], mine: int,
                    backend) -> None:
    """``positions[t]``: the motif position (range index) of team rank ``t``."""
    parts = [buffer[ranges[p][0]:ranges[p][1]] for p in positions]      # in team order
    counts = [part.numel() for part in parts]
    if not sum(counts):
        return
    starts = [ranges[p][0] for p in positions]
    adjacent = all(ranges[positions[t]][1] == starts[t + 1] for t in range(len(parts) - 1))
    source = _reducible(buffer[starts[0]:starts[0] + sum(counts)] if adjacent else torch.cat(parts))
    result = torch.empty(counts[mine], dtype=source.dtype)
    backend.reduce_scatterv(source, result, counts, dist.ReduceOp.SUM).wait()
    parts[mine].copy_(result)


def _all_gather(buffer: torch.Tensor, ranges: Sequence[tuple[int, int]], positions: list[int], backend) -> None:
    spans = [ranges[p] for p in positions]                             # in team order
    counts = [b - a for a, b in spans]
    if not sum(counts):
        return
    base = min(a for a, b in spans if b > a)
    end = max(b for a, b in spans if b > a)
    displacements = [a - base if b > a else 0 for a, b in spans]
    backend.allgatherv_in_place(buffer[base:end], counts, displacements).wait()


def _all_to_all(inputs: torch.Tensor, outputs: torch.Tensor, columns: tuple[int, int], window: tuple[int, int],
                members: Sequence[int], i: int, order: list[int], backend) -> None:
    lo, hi = columns
    if hi <= lo:
        return
    n = len(members)
    width = inputs.shape[1]
    size = len(order)
    send_counts, send_at = [0] * size, [0] * size
    recv_counts, recv_at = [0] * size, [0] * size
    team_rank = {rank: t for t, rank in enumerate(order)}
    remote = False
    for offset in range(*window):
        if offset % n == 0:
            outputs[i, lo:hi].copy_(inputs[i, lo:hi])
            continue
        remote = True
        dst, src = (i + offset) % n, (i - offset) % n
        to, source = team_rank[members[dst]], team_rank[members[src]]
        send_counts[to], send_at[to] = hi - lo, dst * width + lo
        recv_counts[source], recv_at[source] = hi - lo, src * width + lo
    if remote:      # the window is the same on every member: all of them call, or none
        backend.alltoallv(inputs.reshape(-1), outputs.view(-1), send_counts, send_at, recv_counts, recv_at).wait()
