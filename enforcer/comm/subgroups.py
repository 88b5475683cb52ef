"""Process groups of torch.distributed, one per member set, made collectively in sorted order.

Lowered programs (:mod:`enforcer.programs`), resharding (:mod:`enforcer.reshard`),
the pipeline runtime and the measuring jobs run their steps on subgroups of the
world; every rank must create the same ones in the same order (``new_group`` is
collective), which :class:`GroupCache` does once per set.

Groups bound to a network interface (a channel) are gloo groups made the way a
plan's channel backends are (:func:`enforcer.comm.inner.create`: a gloo device
made for the interface). torch's ``new_group`` hands no options to its own gloo
backend, so they are made through a backend of ours, :data:`BOUND_GLOO`, which
takes the interface as its options.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch.distributed as dist

from enforcer.comm import inner

#: torch's name for gloo bound to one network interface (registered by the first
#: :class:`GroupCache` that binds its groups).
BOUND_GLOO = "p2gloo_bound"


class GroupCache:
    """One process group per member set, created collectively in sorted order.

    ``interface`` binds the groups' transport to one network interface (a
    channel: in the emulated cluster ``nic1`` is the second NIC); they are then
    gloo groups, whatever the default group's backend.
    """

    def __init__(self, interface: str | None = None, backend: str | None = None) -> None:
        if interface is not None and backend not in (None, "gloo"):
            raise ValueError(f"groups bound to an interface ({interface}) are gloo groups, not {backend}")
        self.interface = interface
        self.backend = backend          # None: the default group's backend
        self._groups: dict[tuple[int, ...], dist.ProcessGroup | None] = {}

    def create(self, member_sets: Iterable[Sequence[int]]) -> None:
        """Create the groups not made yet. Every rank must call this with the
        same sets (their order does not matter)."""
        wanted = sorted({tuple(sorted(m)) for m in member_sets} - set(self._groups))
        rank = dist.get_rank()
        backend, options = self.backend, None
        if self.interface is not None and wanted:
            _register_bound_gloo()
            backend, options = BOUND_GLOO, self.interface
        for members in wanted:
            group = dist.new_group(list(members), backend=backend, pg_options=options)
            self._groups[members] = group if rank in members else None

    def get(self, members: Sequence[int]) -> dist.ProcessGroup:
        group = self._groups.get(tuple(sorted(members)))
        if group is None:
            raise RuntimeError(f"no process group for {list(members)} on rank {dist.get_rank()}; "
                               "call prepare() on every rank first")
        return group


def _bound_gloo(backend_options: dist.distributed_c10d._DistributedBackendOptions, interface: str) -> dist.Backend:
    """torch's creator hook for :data:`BOUND_GLOO`: the group's gloo backend, its device made for ``interface``."""
    return inner.create("gloo", backend_options.store, backend_options.group_rank, backend_options.group_size,
                        backend_options.timeout, interface=interface)


def _register_bound_gloo() -> None:
    if not hasattr(dist.Backend, BOUND_GLOO.upper()):
        dist.Backend.register_backend(BOUND_GLOO, _bound_gloo, extended_api=True, devices=["cpu", "cuda"])
