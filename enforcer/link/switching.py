"""The in-band switch check at iteration boundaries, and the swap of the runtime.

``optimizer_service/control/PROTOCOL.md`` §3: plans switch only at *check
boundaries* (iterations that are multiples of ``P2_SWITCH_EVERY``), and at
every one of them EVERY rank — linked or not, connected or not, whatever it
heard from the service — runs one tiny collective: MIN over ranks of one int64,
its proposal (the newest version it holds committed and built, due at this
boundary, else the version it runs). Then all ranks apply the common value
(:func:`optimizer_service.control.switch.agree`): all switch to it, or none.
A late or lost message only delays a switch to a later boundary.

The MIN runs on the default group's inner backend directly, not through the
enforcer: it is not traced as a user op, takes no sequence number and is not
planned. :func:`at_boundary` is called by :func:`enforcer.step` on the training
thread, after the iteration's runtimes stepped; it costs one one-integer
all-reduce every ``P2_SWITCH_EVERY`` iterations and never waits for the service.

Every rank of a job must run the check alike, so every rank must have the same
``P2_SERVICE`` (set or not) and ``P2_SWITCH_EVERY`` (torchrun and ``p2 cluster
run`` give every rank the same environment); otherwise ranks disagree on whether
to enter the collective and the job hangs. (The service also refuses a rank
whose ``switch_every`` differs from its job's.)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from optimizer_service.control.participant import Discard, SwitchTo
from optimizer_service.control.switch import SwitchError, is_check

if TYPE_CHECKING:      # every training process imports this (enforcer.step); the session comes with the link
    from enforcer.link.default_group import DefaultGroup
    from enforcer.link.session import Session

log = logging.getLogger("enforcer")


def at_boundary(group: DefaultGroup, session: Session, iteration: int) -> int | None:
    """The check before ``iteration`` on the default ``group`` (every rank, same
    iterations), from the link's ``session``: returns the version switched to, or None. Raises
    :class:`SwitchError` when the ranks agreed on a plan this rank cannot run —
    the job must stop rather than run different plans on different ranks."""
    if not is_check(iteration, session.switch_every):
        return None
    common = min_over_ranks(group, session.proposal(iteration))
    try:
        actions = session.agree(iteration, common)
    except SwitchError as error:
        log.critical("p2enforcer: %s; stopping rather than running different plans on different ranks", error)
        raise
    switched = None
    for action in actions:
        if isinstance(action, SwitchTo):
            swap(group, session, action.version, iteration)
            switched = action.version
        elif isinstance(action, Discard):
            session.discard(action.version)
    return switched


def min_over_ranks(group: DefaultGroup, value: int) -> int:
    """MIN of ``value`` over the group's ranks, on its inner backend (CPU if it has one)."""
    device = "cpu" if "cpu" in group.inner_names else next(iter(group.inner_names))
    tensor = torch.tensor([value], dtype=torch.int64,
                          device=torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else device)
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MIN
    group.inner_backend(device).allreduce([tensor], options).wait()
    return int(tensor.item())


def swap(group: DefaultGroup, session: Session, version: int, iteration: int) -> None:
    """Run ``version``'s prebuilt runtimes from this boundary on, on the default
    group and every subgroup the plan names (:mod:`enforcer.runtime.plan_groups`; the old ones are closed)."""
    runtimes = session.take(version)
    if runtimes is None:        # agree() said it is built: the runtimes must be there
        raise SwitchError(f"rank {group.rank()} must switch to plan v{version} at iteration {iteration} but its "
                          "runtime is gone")
    runtimes.install()
    group.tracer.switched(version, iteration)
    log.info("p2enforcer: rank %d switched to plan v%d at iteration %d (%d planned ops on %d group(s), channels %s)",
             group.rank(), version, iteration, runtimes.ops, len(runtimes.runtimes), runtimes.channels)
