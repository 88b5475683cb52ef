"""What a plan runtime is to the rest of the enforcer, and what it uses of its group.

:class:`Runtime` is what the groups, :mod:`enforcer.runtime.plan_groups`,
``enforcer.step()`` and the service link rely on; both runtimes implement it
(:class:`~enforcer.runtime.plan_runtime.PlanRuntime`, which also takes the
Python group's ops through ``submit``, and
:class:`~enforcer.runtime.native.NativePlanRuntime`, whose ops the C++ backend
submits itself). The runtime room never imports the group: :class:`RuntimeGroup`
is what a runtime uses of the ``p2enforcer`` group it runs on (either
implementation), :class:`RuntimeHost` what installing plans uses of it
(:mod:`enforcer.runtime.plan_file`, :mod:`enforcer.runtime.plan_groups`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import torch.distributed as dist

from optimizer_service.plan import OpPlan, Plan

if TYPE_CHECKING:
    from enforcer.runtime.channels import ChannelSet


class RuntimeGroup(Protocol):
    """A ``p2enforcer`` group as its plan runtime sees it."""

    store: dist.Store
    timeout: timedelta
    ranks: tuple[int, ...]                  # global ranks, in group-rank order
    inner_names: dict[str, str]             # device type -> inner backend name
    installs: int                           # plans installed so far (names their store keys)
    # The process's trace: PlanRuntime records waits, motifs and completions into it (an
    # enforcer.trace.Tracer); NativePlanRuntime hands C++ the ring buffer it reads (``.native``).
    tracer: Any

    def rank(self) -> int: ...

    def size(self) -> int: ...


class Runtime(Protocol):
    """One group's installed plan: built collectively (its channels made), then started,
    stepped at iteration ends, and closed when replaced."""

    plan: Plan
    ops: list[OpPlan]                       # the plan's ops of this group, in plan order
    channels: ChannelSet
    from_service: bool                      # built for a plan the service prepared (plan_groups)

    def start(self) -> None:
        """Start running the plan (once)."""

    def step(self) -> None:
        """The program finished an iteration."""

    def close(self, abort: bool = False) -> None:
        """Stop, and release the channels (not on ``abort``: the process is going down)."""


class RuntimeHost(Protocol):
    """A ``p2enforcer`` group as installing a plan sees it: it makes a runtime for a
    plan (collective) and swaps it in."""

    ranks: tuple[int, ...]
    is_default: bool
    runtime: Runtime | None                 # the installed one; None: passthrough

    def size(self) -> int: ...

    def new_runtime(self, plan: Plan, store_prefix: str | None = None,
                    store: dist.Store | None = None) -> Runtime:
        """A runtime for ``plan`` on this group, its channels built (collective); not started."""

    def replace_runtime(self, runtime: Runtime | None = None, abort: bool = False) -> None:
        """Run ``runtime`` from the group's next op on (None: passthrough); the old one is closed."""
