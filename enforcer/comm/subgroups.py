"""Process groups of torch.distributed, one per member set, made collectively in sorted order.

Lowered programs (:mod:`enforcer.programs`), resharding (:mod:`enforcer.reshard`),
the pipeline runtime and the measuring jobs run their steps on subgroups of the
world; every rank must create the same ones in the same order (``new_group`` is
collective), which :class:`GroupCache` does once per set.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch.distributed as dist


class GroupCache:
    """One process group per member set, created collectively in sorted order.

    ``interface`` binds the groups' gloo transport to one network interface (a
    channel: in the emulated cluster ``nic1`` is the second NIC). gloo reads
    ``GLOO_SOCKET_IFNAME`` each time it builds a group, so the variable is set
    around the creation and restored after.
    """

    def __init__(self, interface: str | None = None, backend: str | None = None) -> None:
        self.interface = interface
        self.backend = backend          # None: the default group's backend
        self._groups: dict[tuple[int, ...], dist.ProcessGroup | None] = {}

    def create(self, member_sets: Iterable[Sequence[int]]) -> None:
        """Create the groups not made yet. Every rank must call this with the
        same sets (their order does not matter)."""
        wanted = sorted({tuple(sorted(m)) for m in member_sets} - set(self._groups))
        rank = dist.get_rank()
        with _socket_interface(self.interface):
            for members in wanted:
                group = dist.new_group(list(members), backend=self.backend)
                self._groups[members] = group if rank in members else None

    def get(self, members: Sequence[int]) -> dist.ProcessGroup:
        group = self._groups.get(tuple(sorted(members)))
        if group is None:
            raise RuntimeError(f"no process group for {list(members)} on rank {dist.get_rank()}; "
                               "call prepare() on every rank first")
        return group


@contextmanager
def _socket_interface(interface: str | None) -> Iterator[None]:
    if interface is None:
        yield
        return
    before = os.environ.get("GLOO_SOCKET_IFNAME")
    os.environ["GLOO_SOCKET_IFNAME"] = interface
    try:
        yield
    finally:
        if before is None:
            del os.environ["GLOO_SOCKET_IFNAME"]
        else:
            os.environ["GLOO_SOCKET_IFNAME"] = before
