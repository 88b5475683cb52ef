"""What both implementations of a ``p2enforcer`` group share (Python: :class:`enforcer.group.python.EnforcerGroup`;
C++: :class:`enforcer.group.native.NativeGroup` around ``enforcer._native.EnforcerBackend``).

A group knows its store, timeout, global ranks and label, makes one inner
backend per device (:mod:`enforcer.comm.inner`) under its own store prefix and
holds the installed plan runtime (``runtime``; ``None`` in passthrough). The
default group with ``P2_SERVICE`` also holds the link to the optimizer service
that the composition root (:mod:`enforcer.register`) started on it, and closes
it with itself; the group never imports the link. The plan runtime, the link
and ``enforcer.step()`` only use what is here, so they work on either implementation.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from enforcer import groups, state
from enforcer.comm import inner


def creator_arguments(backend_options) -> tuple:
    """``(store, group rank, size, timeout, global ranks, name)`` from torch's creator hook
    options (``extended_api=True``: they name the group's global ranks)."""
    size = backend_options.group_size
    ranks = tuple(backend_options.global_ranks_in_group) or tuple(range(size))
    if len(ranks) != size:
        ranks = tuple(range(size))
    return (backend_options.store, backend_options.group_rank, size, backend_options.timeout, ranks,
            str(backend_options.group_id))


def group_of(group=None):
    """The p2enforcer group (either implementation) behind ``group`` (a
    ``ProcessGroup``; default: the world), or ``None`` when it is not one."""
    if isinstance(group, GroupCore):
        return group
    group = group if group is not None else dist.group.WORLD
    if isinstance(group, GroupCore):
        return group
    if group is None:
        return None
    found = groups.named(group.group_name)
    return found if isinstance(found, GroupCore) else None


class GroupCore:
    """The shared state and lifecycle of a p2enforcer group (a mixin; the class provides ``rank()`` and ``size()``)."""

    store: dist.Store
    timeout: timedelta
    ranks: tuple[int, ...]
    group_label: str

    def _make_inner(self, store: dist.Store, rank: int, size: int, timeout: timedelta, ranks: tuple[int, ...],
                    name: str) -> dict[str, dist.Backend]:
        """Record the group's identity and make its inner backends (returned by device)."""
        self.store = store
        self.timeout = timeout
        self.ranks = ranks                      # global ranks, in group-rank order
        self.group_label = name
        self.inner_names = inner.parse_inner(state.settings().inner_backend)
        self._inner = {device: inner.create(backend_name, dist.PrefixStore(f"p2inner/{device}/", store), rank, size,
                                            timeout)
                       for device, backend_name in self.inner_names.items()}
        # The default group is made before torch counts as initialized.
        self.is_default = not dist.is_initialized()
        self.installs = 0                       # plans installed so far (names their store keys)
        self.link = None                        # the default group's link, with P2_SERVICE (set by enforcer.register)
        return self._inner

    def new_runtime(self, plan, store_prefix: str | None = None, store: dist.Store | None = None):
        """A plan runtime for this group (collective: makes the channel backends); not started."""
        from enforcer.runtime.plan_runtime import PlanRuntime
        return PlanRuntime(self, plan, store_prefix, store)

    def inner_backend(self, device: str = "cpu") -> dist.Backend:
        return self._inner[device]

    def replace_runtime(self, runtime=None, abort: bool = False) -> None:
        """Enforce ``runtime`` from now on (``None``: passthrough); the old one is closed."""
        old, self.runtime = self.runtime, runtime
        if old is not None:
            old.close(abort=abort)

    def _close(self, abort: bool) -> None:
        """Unregister, close the link and the runtime; the default group exports its trace."""
        groups.unregister(self)
        if self.link is not None:
            self.link.close()
        self.replace_runtime(None, abort=abort)
        if self.is_default and not abort:
            state.export_from_env()
