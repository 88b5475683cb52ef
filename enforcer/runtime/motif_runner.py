"""What runs one motif of a planned op on a channel: the :class:`MotifRunner` interface.

A channel's runner is chosen once, when the plan's channels are built
(:mod:`enforcer.runtime.channels`), by its backend: the send/recv algorithms
(:mod:`enforcer.runtime.sendrecv_motifs`) on gloo and NCCL, one collective per
motif (:mod:`enforcer.runtime.ucc_motifs`) on UCC, which has no send/recv.
Either gives the same result bit for bit.
"""

from __future__ import annotations

from typing import Protocol

import torch

from enforcer.comm.sendrecv import BackendPeers
from optimizer_service.plan import Collective, Motif, OpPlan


class MotifRunner(Protocol):
    """Runs motifs over one channel's communicators (one per member set this rank is in)."""

    def run(self, op: OpPlan, motif: Motif, buffer: torch.Tensor, output: torch.Tensor | None) -> None:
        """Run ``motif`` of ``op`` on this rank. ``buffer``/``output``: the op's buffer
        (:mod:`enforcer.runtime.buffers`): flat, or the input's and the output's ``(N, D)``
        blocks for all-to-all."""


def motif_peers(peers: dict[tuple[int, ...], BackendPeers], op: OpPlan,
                motif: Motif) -> tuple[list[int], BackendPeers] | None:
    """The motif's members (global ranks, in the motif's order) and the communicator made
    for them (``peers`` holds them by sorted global ranks); None when it moves nothing."""
    members = [op.key.group[p] for p in motif.ranks]
    if len(members) == 1 and motif.kind is not Collective.ALL_TO_ALL:
        return None
    return members, peers[tuple(sorted(members))]
