"""The in-band switch check at iteration boundaries, and the swap of the runtime.

``optimizer_service/control/PROTOCOL.md`` §3: plans switch only at *check
boundaries* (iterations that are multiples of ``P2_SWITCH_EVERY``), and at
every one of them EVERY rank — linked or not, connected or not, whatever it
heard from the service — takes part in one tiny collective: MIN over ranks of
one int64, its proposal (the newest version it holds committed and built, due
at the boundary, else the version it runs). Then all ranks apply the common
value (:func:`optimizer_service.control.switch.agree`): all switch to it, or
none. A late or lost message only delays a switch to a later boundary.

**Pipelined** (:class:`InFlight`): the MIN that decides check boundary ``b`` is
started at the check before it, ``b - P2_SWITCH_EVERY``, with the proposals for
``b``, and the training thread collects it at ``b`` — by then finished, as every
rank entered it an interval of iterations earlier. A MIN started and awaited at
one boundary made every rank wait there for the slowest one and for the round
trips of a ring of one integer, once per check: on the emulated cluster (2 × 4
ranks, 200 Mbit/s NICs) DDP's plan ran 4 % slower with ``P2_SWITCH_EVERY=4``
than with the check every 1,000 iterations, and as fast as that when the MIN was
pipelined. The first check of a run only starts a MIN, so the earliest switch is
at ``2 × P2_SWITCH_EVERY``; a plan a rank holds built only after the check
before its switch iteration switches one check later (the protocol's "a late
message delays the switch"), which with the coordinator's margin of 2 iterations
is the usual case: switches come about ``P2_SWITCH_EVERY`` iterations later than
with the MIN awaited at once.

The MIN runs on the default group's inner backend directly, not through the
enforcer: it is not traced as a user op, takes no sequence number and is not
planned. :func:`at_boundary` is called by :func:`enforcer.step` on the training
thread, after the iteration's runtimes stepped; it costs one one-integer
all-reduce every ``P2_SWITCH_EVERY`` iterations, which overlaps the iterations
in between, and never waits for the service. A MIN still in flight when the
link closes is awaited (:meth:`InFlight.settle`, bounded): every rank entered
it, and a rank that left without finishing it would leave the others waiting.

Every rank of a job must run the check alike, so every rank must have the same
``P2_SERVICE`` (set or not) and ``P2_SWITCH_EVERY`` (torchrun and ``p2 cluster
run`` give every rank the same environment); otherwise ranks disagree on whether
to enter the collective and the job hangs. (The service also refuses a rank
whose ``switch_every`` differs from its job's.)
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from optimizer_service.control.participant import Discard, SwitchTo
from optimizer_service.control.switch import SwitchError, is_check

if TYPE_CHECKING:      # every training process imports this (enforcer.step); the session comes with the link
    from enforcer.link.default_group import DefaultGroup
    from enforcer.link.session import Session

log = logging.getLogger("enforcer")


@dataclass
class InFlight:
    """The switch check's MIN under way: started at one check boundary with the
    proposals for ``boundary`` (the next check), collected there."""

    boundary: int
    work: dist.Work
    tensor: torch.Tensor

    def result(self) -> int:
        """The common version (waits for the MIN, normally finished long before)."""
        self.work.wait()
        return int(self.tensor.item())

    def settle(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the MIN to finish (the link is closing): False if it did not."""
        try:
            return bool(self.work.wait(datetime.timedelta(seconds=timeout)))
        except RuntimeError as error:         # timed out, or a peer is gone: nothing left to agree on
            log.warning("p2enforcer: the switch check for iteration %d did not finish: %s", self.boundary, error)
            return False


def at_boundary(group: DefaultGroup, session: Session, iteration: int) -> int | None:
    """The check before ``iteration`` on the default ``group`` (every rank, same
    iterations), from the link's ``session``: applies the MIN started at the last
    check (module docstring), starts the next one, and returns the version
    switched to, or None. Raises :class:`SwitchError` when the ranks agreed on a
    plan this rank cannot run — the job must stop rather than run different
    plans on different ranks."""
    every = session.switch_every
    if not is_check(iteration, every):
        return None
    pending, session.in_flight = session.in_flight, None
    switched = None
    if pending is not None:
        if pending.boundary != iteration:      # every check runs on every rank: a gap is a broken caller
            raise SwitchError(f"rank {group.rank()}: the switch check started for iteration {pending.boundary} "
                              f"was collected at iteration {iteration}")
        switched = _apply(group, session, iteration, pending.result())
    session.in_flight = start_min(group, session.proposal(iteration + every), iteration + every)
    return switched


def _apply(group: DefaultGroup, session: Session, iteration: int, common: int) -> int | None:
    """Agree on ``common`` at ``iteration``: swap runtimes or discard what it makes stale."""
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


def start_min(group: DefaultGroup, value: int, boundary: int) -> InFlight:
    """Start the MIN of ``value`` over the group's ranks, on its inner backend (CPU if it has one)."""
    device = "cpu" if "cpu" in group.inner_names else next(iter(group.inner_names))
    tensor = torch.tensor([value], dtype=torch.int64,
                          device=torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else device)
    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MIN
    return InFlight(boundary, group.inner_backend(device).allreduce([tensor], options), tensor)


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
