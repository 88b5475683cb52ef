"""A plan's channels on one group: their communicators, network interfaces and motif runners.

Both plan runtimes (:class:`~enforcer.runtime.plan_runtime.PlanRuntime`, and
:class:`~enforcer.runtime.native.NativePlanRuntime`, which hands the
communicators to C++) hold one :class:`ChannelSet`. :func:`build` makes it,
collectively and before any op uses it: one bare inner backend per (channel,
member set) the group's motifs need — only members take part, in one sorted
order on every rank — each bound to its channel's network interface
(:func:`channel_interface`, through :func:`enforcer.comm.inner.create`), and
chooses each channel's motif runner once (:mod:`enforcer.runtime.motif_runner`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch.distributed as dist

from enforcer import state
from enforcer.comm import inner
from enforcer.comm.sendrecv import BackendPeers
from enforcer.runtime.motif_runner import MotifRunner
from enforcer.runtime.protocol import RuntimeGroup
from enforcer.runtime.sendrecv_motifs import SendRecvMotifs
from enforcer.runtime.ucc_motifs import UccMotifs
from optimizer_service.plan import OpPlan, Plan, PlanError

#: The motif runner of a channel whose backend has no send/recv (by backend name);
#: every other backend runs the send/recv algorithms.
COLLECTIVE_RUNNERS = {"ucc": UccMotifs}

Members = tuple[int, ...]


def channel_interface(plan: Plan, channel: int, nics: tuple[str, ...]) -> str | None:
    """The network interface ``channel``'s backends are bound to: the one the plan
    names, else this node's NIC for the channel (``P2_CHANNEL_IFNAMES``, one per
    channel: the node knows its NICs, a plan made for the whole cluster does not),
    else None (the inner backend's default, which honours ``GLOO_SOCKET_IFNAME``)."""
    named = plan.channels.get(channel)
    if named:
        return named
    return nics[channel] if channel < len(nics) else None


def channel_backend(channel: int, channel_backends: Sequence[str], inner_names: dict[str, str]) -> str:
    """The backend ``channel``'s motifs run on: ``P2_CHANNEL_BACKENDS``' entry for it, else the
    group's inner one for CPU tensors (else its first)."""
    if channel < len(channel_backends):
        return channel_backends[channel]
    return inner_names.get("cpu", next(iter(inner_names.values())))


@dataclass(frozen=True)
class Channel:
    """One channel of a plan on this rank: its backend's name, its interface, the
    communicators of the member sets this rank is in, and its motif runner."""

    number: int
    backend: str
    interface: str | None
    peers: dict[Members, BackendPeers]         # sorted global ranks -> the backend made for them
    runner: MotifRunner


class ChannelSet:
    """A plan's channels on one group, by number (in the plan's order); :meth:`shut_down` releases them."""

    def __init__(self, channels: dict[int, Channel]) -> None:
        self._channels = channels

    def __iter__(self) -> Iterator[int]:
        return iter(self._channels)

    def __len__(self) -> int:
        return len(self._channels)

    def __getitem__(self, number: int) -> Channel:
        return self._channels[number]

    def backends(self) -> dict[tuple[int, Members], dist.Backend]:
        """Every communicator by (channel, sorted global ranks)."""
        return {(number, members): peers.backend for number, channel in self._channels.items()
                for members, peers in channel.peers.items()}

    def using(self, backend: str) -> list[int]:
        """The channels whose motifs run on ``backend``, ascending."""
        return sorted(number for number, channel in self._channels.items() if channel.backend == backend)

    def shut_down(self) -> None:
        """Release every communicator now, not at interpreter exit (where gloo's
        destructors can run after the threads they join are gone)."""
        _shut_down(channel.peers for channel in self._channels.values())


def store_prefix_of(group: RuntimeGroup, plan: Plan, store_prefix: str | None) -> str:
    """Where a plan's backends meet in the store: ``store_prefix`` — a plan the service
    prepares names it by its version, unique in the job, so ranks that build it at
    different moments meet (:mod:`enforcer.link.prepare`) — else the count of installs
    on the group (counted here)."""
    if store_prefix is not None:
        return store_prefix
    group.installs += 1
    # Installs are collective, so their count names the same store keys on every rank;
    # the plan version alone does not (a plan may be installed twice).
    return f"p2plan/{group.installs}/v{plan.version}/"


def build(group: RuntimeGroup, plan: Plan, ops: Sequence[OpPlan], store_prefix: str,
          store: dist.Store) -> ChannelSet:
    """The channels of ``plan`` for ``group``'s ``ops``: every (channel, member set)
    backend, made by its members in one sorted order (collective among each set's
    members); PlanError, with what was made released, when one cannot be made."""
    global_rank = group.ranks[group.rank()]
    wanted: dict[int, set[Members]] = {c: set() for c in plan.channels}
    for op in ops:
        for motif in op.motifs:
            members = tuple(sorted(op.key.group[p] for p in motif.ranks))
            if len(members) > 1:
                wanted[motif.channel].add(members)
    settings = state.settings()
    backends = {c: channel_backend(c, settings.channel_backends, group.inner_names) for c in wanted}
    interfaces = {c: channel_interface(plan, c, settings.channel_ifnames) for c in wanted}
    made: dict[int, dict[Members, BackendPeers]] = {c: {} for c in wanted}
    for channel in sorted(wanted):
        name, interface = backends[channel], interfaces[channel]
        for members in sorted(wanted[channel]):
            if global_rank not in members:
                continue
            prefix = f"{store_prefix}ch{channel}/{'-'.join(map(str, members))}/"
            try:
                backend = inner.create(name, dist.PrefixStore(prefix, store), members.index(global_rank),
                                       len(members), group.timeout, interface=interface)
            except (RuntimeError, ValueError) as error:     # ValueError: e.g. UCC not built
                _shut_down(made.values())           # what was made so far
                raise PlanError(f"channel {channel}: cannot make a {name} backend for ranks {list(members)}"
                                f" on interface {interface!r}: {str(error).splitlines()[0]}") from None
            made[channel][members] = BackendPeers(backend, members, global_rank)
    return ChannelSet({c: Channel(c, backends[c], interfaces[c], made[c],
                                  COLLECTIVE_RUNNERS.get(backends[c], SendRecvMotifs)(made[c]))
                       for c in wanted})


def _shut_down(peer_sets) -> None:
    for peers in peer_sets:
        for member_peers in peers.values():
            member_peers.backend.shutdown()
        peers.clear()
