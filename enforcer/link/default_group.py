"""The default ``p2enforcer`` group as the link sees it: the few members it uses, as a ``Protocol``.

The link runs on the default group of either implementation (:mod:`enforcer.group`)
without importing it: the composition root (:mod:`enforcer.register`) hands it the
group, and :class:`DefaultGroup` names all the link, the plan builder
(:mod:`.prepare`) and the switch check (:mod:`.switching`) ask of it, besides what
the builder's :func:`enforcer.runtime.plan_groups.build` asks of it to make a plan's
runtimes (:class:`enforcer.runtime.protocol.RuntimeHost`).
"""

from __future__ import annotations

from typing import Protocol

import torch.distributed as dist

from enforcer.runtime.protocol import RuntimeHost
from enforcer.trace import TraceReader


class DefaultGroup(RuntimeHost, Protocol):
    """What the link asks of the default group."""

    store: dist.Store               # the job's store: the link finds the job id and the builds meet in it
    tracer: TraceReader                  # the process's trace: iterations, op and motif timings, trace windows
    inner_names: dict[str, str]     # the inner backend of each device, e.g. {"cpu": "gloo"}

    def rank(self) -> int: ...

    def size(self) -> int: ...

    def inner_backend(self, device: str = "cpu") -> dist.Backend:
        """The inner backend of ``device``: the switch check's MIN runs on it, outside the enforcer."""
        ...
