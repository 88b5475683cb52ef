"""Motifs on a channel whose backend has send/recv (gloo, NCCL): the algorithms of :mod:`enforcer.comm.sendrecv`.

All-reduce is the backend's own; reduce-scatter and all-gather are rings,
reduce and broadcast pipelined chains, all-to-all the windowed exchange, each
over the bare backend made for the motif's members.
"""

from __future__ import annotations

import torch

from enforcer.comm import sendrecv
from enforcer.comm.sendrecv import BackendPeers
from enforcer.runtime.motif_runner import motif_peers
from optimizer_service.plan import Collective, Motif, OpPlan


class SendRecvMotifs:
    """The :class:`~enforcer.runtime.motif_runner.MotifRunner` of a gloo or NCCL channel."""

    def __init__(self, peers: dict[tuple[int, ...], BackendPeers]) -> None:
        self.peers = peers

    def run(self, op: OpPlan, motif: Motif, buffer: torch.Tensor, output: torch.Tensor | None) -> None:
        found = motif_peers(self.peers, op, motif)
        if found is None:
            return
        members, peers = found
        if motif.kind is Collective.ALL_TO_ALL:
            sendrecv.all_to_all(buffer, output, motif.ranges[0], motif.window, members, peers)
        elif motif.kind is Collective.REDUCE_SCATTER:
            sendrecv.reduce_scatter([buffer[a:b] for a, b in motif.ranges], members, peers)
        elif motif.kind is Collective.ALL_GATHER:
            sendrecv.all_gather([buffer[a:b] for a, b in motif.ranges], members, peers)
        else:
            (lo, hi), = motif.ranges
            data = buffer[lo:hi]
            if not data.numel():
                return
            if motif.kind is Collective.ALL_REDUCE:
                peers.backend.allreduce([data]).wait()
            elif motif.kind is Collective.REDUCE:
                sendrecv.reduce(data, members, peers)
            else:
                sendrecv.broadcast(data, members, peers)
