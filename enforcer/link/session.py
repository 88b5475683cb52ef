"""A rank's session with the optimizer service: its side of the two-phase commit.

Prepare / Commit / Abort from the service, and ``Built`` from a builder
thread, go through the pure participant decisions
(:mod:`optimizer_service.control.participant`, under one short lock), and the
session carries out their actions — ``Build`` on a builder thread
(:mod:`enforcer.link.prepare`), ``Discard`` closes what was built,
``SendVote`` / ``SendAck`` go to the outbox (:class:`Outbox`, the stream's).

The switch to a committed plan is not the session's to make: the in-band check
at iteration boundaries (:mod:`enforcer.link.switching`) decides it on the
training thread, from the same participant state (:meth:`Session.proposal`,
:meth:`Session.agree`), and takes the built runtimes from here
(:meth:`Session.take`). The training thread only ever takes the participant
lock (microseconds).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

from enforcer.link.identity import RankIdentity
from enforcer.link.prepare import PreparedPlans
from enforcer.runtime.plan_groups import PlanRuntimes
from optimizer_service.control import participant, switch
from optimizer_service.control.messages import Vote
from optimizer_service.control.participant import (
    AbortIn,
    Action,
    Build,
    CommitIn,
    Discard,
    Participant,
    PrepareIn,
    SendAck,
    SendVote,
)
from optimizer_service.control.wire import ack_to_proto, from_service_message, vote_to_proto
from optimizer_service.plan import PlanError
from p2.v1 import enforcer_link_pb2 as link_pb2

if TYPE_CHECKING:
    from enforcer.link.switching import InFlight

log = logging.getLogger("enforcer")

#: The longest a closing link waits for the switch check's MIN under way: the other
#: ranks entered it with this one, so it finishes in round trips unless a peer is gone.
SETTLE_SECONDS = 10.0


class Outbox(Protocol):
    """Where the session's messages go (:class:`enforcer.link.stream.Stream`)."""

    def send(self, message: link_pb2.RankMessage, text: str) -> None: ...

    def note(self, text: str) -> None:
        """Remember a message that came in."""
        ...


class Session:
    """The rank's participant state, its prepared plans, and the actions of the decisions.

    ``plans`` builds and frees runtimes (:class:`enforcer.link.prepare.PreparedPlans`).
    """

    def __init__(self, identity: RankIdentity, plans: PreparedPlans, outbox: Outbox) -> None:
        self.identity = identity
        self.plans = plans
        self.outbox = outbox
        self.state = Participant.new(identity.job, identity.rank, identity.world_size)
        self._lock = threading.Lock()                    # the participant state
        self.in_flight: InFlight | None = None           # the switch check's MIN under way (training thread's)

    @property
    def switch_every(self) -> int:
        """Plans switch only at iterations that are multiples of this (``P2_SWITCH_EVERY``)."""
        return self.identity.switch_every

    @property
    def running(self) -> int:
        """The version the rank runs (0: none of the service's)."""
        return self.state.running

    def holding(self) -> tuple[int, tuple[int, ...]]:
        """The version running and those held committed and built, read together (for ``Register``)."""
        with self._lock:
            return self.state.running, self.state.held()

    def close(self) -> None:
        """Let the switch check's MIN under way finish (every rank entered it; bounded by
        :data:`SETTLE_SECONDS`), then free every plan not running (the link is closing)."""
        pending, self.in_flight = self.in_flight, None
        if pending is not None:
            pending.settle(SETTLE_SECONDS)
        self.plans.close()

    # ------------------------------------------------------------- messages
    def receive(self, message: link_pb2.ServiceMessage) -> None:
        """A Prepare, Commit or Abort from the service: feed it to the decisions. A Prepare
        whose plan cannot be read gets a no vote."""
        try:
            decision = from_service_message(message)
        except PlanError as error:
            prepare = message.prepare
            vote = Vote(self.identity.job, self.identity.rank, prepare.version, prepare.epoch, False,
                        f"the plan of v{prepare.version} is malformed: {error}")
            self.outbox.note(f"got a malformed Prepare of v{prepare.version}")
            with self._lock:
                self._carry_out(SendVote(vote))
            return
        if decision is None:
            return
        self.outbox.note(f"got {decision}")
        log.info("p2enforcer: rank %d got %s", self.identity.rank, decision)
        event = {"Prepare": PrepareIn, "Commit": CommitIn, "Abort": AbortIn}[type(decision).__name__](decision)
        self.feed(event)

    def feed(self, event) -> None:
        """One event for the participant decisions (from the stream or a builder); carry out the actions."""
        with self._lock:
            self.state, actions = participant.step(self.state, event, time.monotonic())
            for action in actions:
                self._carry_out(action)

    def _carry_out(self, action: Action) -> None:
        if isinstance(action, Build):
            self.plans.build(action.version, action.plan, self.feed)
        elif isinstance(action, Discard):
            self.plans.discard(action.version)
        elif isinstance(action, SendVote):
            self.outbox.send(vote_to_proto(action.vote), str(action.vote))
            if not action.vote.yes:
                log.warning("p2enforcer: rank %d votes no on plan v%d: %s", self.identity.rank, action.vote.version,
                            action.vote.reason)
        elif isinstance(action, SendAck):
            self.outbox.send(ack_to_proto(action.ack), str(action.ack))
        else:
            raise TypeError(f"the session cannot carry out {action}")

    # ------------------------------------------------------ the switch check
    def proposal(self, boundary: int) -> int:
        with self._lock:
            return switch.proposal(self.state, boundary)

    def agree(self, boundary: int, common: int) -> list[Action]:
        """Apply the ranks' common version at ``boundary``; the SwitchTo / Discard
        actions are the caller's (:mod:`enforcer.link.switching`). SwitchError passes."""
        with self._lock:
            self.state, actions = switch.agree(self.state, boundary, common)
        return actions

    def take(self, version: int) -> PlanRuntimes | None:
        """The built runtimes of ``version``, handed over to be installed, or None."""
        return self.plans.take(version)

    def discard(self, version: int) -> None:
        """Free what was built of ``version``."""
        self.plans.discard(version)
