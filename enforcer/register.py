"""The composition root: ``p2enforcer`` registered with torch, and what torch's creator hook puts together.

:func:`register` (run by ``import enforcer`` and torch's ``torch.backends``
entry point) registers the backend with torch.distributed in one of its two
implementations (:mod:`enforcer.group`). Then, whenever torch makes a group
with it, the creator hook builds the group and, for the default group,

* installs ``P2_PLAN_FILE`` (:mod:`enforcer.runtime.plan_file`): the plan to
  enforce from the first op on;
* with ``P2_SERVICE``, starts the rank's link to the optimizer service
  (:mod:`enforcer.link`) on it; the group holds the link and closes it with itself.

This is the one place that knows both the group and the link: the group never
imports the link, and the link sees the group only as
:class:`enforcer.link.default_group.DefaultGroup`.
"""

from __future__ import annotations

import logging
import os

import torch.distributed as dist

from enforcer import state
from enforcer.group import bypass, native
from enforcer.group.core import GroupCore, creator_arguments, group_of
from enforcer.group.python import BACKEND_NAME, EnforcerGroup
from enforcer.runtime import plan_file
from optimizer_service.plan import PlanError

log = logging.getLogger("enforcer")

_implementation = "python"      # the one registered with torch


def register() -> str:
    """Register the ``p2enforcer`` backend (done on ``import enforcer``; idempotent);
    returns the implementation in use, ``cpp`` or ``python``. Only the Python group
    can be bypassed, so only it installs the bypass counter."""
    global _implementation
    state.settings()                  # read the P2_* settings once, now
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        _implementation = _chosen_implementation()
        creator = _create_native if _implementation == "cpp" else _create_python
        dist.Backend.register_backend(BACKEND_NAME, creator, extended_api=True, devices=["cpu", "cuda"])
        _accept_monitored_barrier()
    if _implementation == "python":
        bypass.install()
    return _implementation


def implementation() -> str:
    """The p2enforcer implementation this process registered: ``cpp`` or ``python``."""
    return register()


def _chosen_implementation() -> str:
    """``cpp`` or ``python``: ``P2_ENFORCER_IMPL``, else the C++ backend when it is built.
    Asking for cpp where it is not built logs why and uses the Python group."""
    wanted = state.settings().impl
    if wanted == "python":
        return "python"
    if native.available():
        return "cpp"
    if wanted == "cpp":
        log.error("p2enforcer: P2_ENFORCER_IMPL=cpp but %s; using the Python group", native.why_unavailable())
    return "python"


def _create_python(backend_options: dist.distributed_c10d._DistributedBackendOptions,
                   _pg_options=None) -> EnforcerGroup:
    """torch's creator hook for the Python group."""
    return _started(EnforcerGroup(*creator_arguments(backend_options)))


def _create_native(backend_options: dist.distributed_c10d._DistributedBackendOptions, _pg_options=None):
    """torch's creator hook for the C++ backend: the ``EnforcerBackend`` torch registers on the group."""
    return _started(native.NativeGroup(*creator_arguments(backend_options))).backend


def _started(group: GroupCore) -> GroupCore:
    """``group``, just made; the default group installs ``P2_PLAN_FILE`` and starts the service link."""
    if not group.is_default:
        return group
    settings = state.settings()
    if settings.plan_file:
        _install_plan_file(group, settings.plan_file)
    if settings.service:
        from enforcer.link import link      # gRPC and the link load only in jobs that talk to a service
        group.link = link.start(group, settings, os.environ)
    return group


def _install_plan_file(group: GroupCore, path: str) -> None:
    """``P2_PLAN_FILE``: the plan to enforce from the first op on; one that does
    not fit the job is logged and the group stays in passthrough."""
    try:
        plan_file.install(group, path)
    except PlanError as error:
        log.error("p2enforcer: P2_PLAN_FILE=%s not installed, passing every op through: %s", path, error)


def _accept_monitored_barrier() -> None:
    """torch's ``dist.monitored_barrier`` refuses every backend not named
    "gloo" before it reaches the group; ours runs it on the inner gloo. The
    replacement handles enforcer groups and defers to torch's for all others."""
    original = dist.monitored_barrier
    if getattr(original, "_p2enforcer", False):
        return

    def monitored_barrier(group=None, timeout=None, wait_all_ranks: bool = False):
        ours = group_of(group)
        if ours is not None:
            return ours.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)
        return original(group, timeout=timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier.__doc__ = original.__doc__
    monitored_barrier._p2enforcer = True
    dist.monitored_barrier = monitored_barrier
    dist.distributed_c10d.monitored_barrier = monitored_barrier
