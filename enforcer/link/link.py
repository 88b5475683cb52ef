"""A rank's link to the optimizer service, put together: stream, session, telemetry, traces.

With ``P2_SERVICE`` the composition root (:mod:`enforcer.register`) starts the
default group's :class:`Link` (:func:`start`). Over one stream
(:mod:`.stream`) the rank

* registers first, on every (re)connect, with what it runs (:mod:`.identity`),
  which versions it holds committed and built, and its iteration;
* takes part in the two-phase commit (:mod:`.session`);
* sends one Telemetry message per iteration, ``P2_TELEMETRY_EVERY`` iterations at a time
  (:meth:`Link.iteration_done`, :mod:`.telemetry`, :mod:`.stream`);
* answers the service's trace requests (:mod:`.traces`).

**The training never waits for the service**: at a boundary the training
thread captures the iteration's telemetry and queues it; everything else runs
on the stream's thread and the builders'. Closing (the default group
destroyed, or the process exiting) cancels the stream and frees every plan not running.
"""

from __future__ import annotations

import atexit
import logging
import random
from collections.abc import Callable, Mapping

from enforcer.link.default_group import DefaultGroup
from enforcer.link.identity import RankIdentity
from enforcer.link.prepare import PreparedPlans
from enforcer.link.session import Session
from enforcer.link.stream import Stream
from enforcer.link.telemetry import IterationClock, telemetry_message
from enforcer.link.traces import trace_chunks
from enforcer.settings import EnforcerSettings
from enforcer.trace import TraceReader
from p2.v1 import enforcer_link_pb2 as link_pb2

log = logging.getLogger("enforcer")


class Link:
    """The rank's side of the service link: the stream, the session, and what the rank reports.

    Built from values; :meth:`start` starts the I/O. ``plans`` builds and frees
    runtimes (:class:`enforcer.link.prepare.PreparedPlans`); ``tracer`` gives the
    iteration, the op timings and the trace windows.
    """

    def __init__(self, settings: EnforcerSettings, identity: RankIdentity, tracer: TraceReader, plans: PreparedPlans,
                 rng: Callable[[], float] = random.random) -> None:
        self.identity = identity
        self.tracer = tracer
        self.stream = Stream(settings, identity, self, lambda: tracer.iteration, rng)
        self.session = Session(identity, plans, self.stream)
        self._clock = IterationClock(tracer)

    def start(self) -> Link:
        self.stream.start()
        atexit.register(self.close)
        return self

    def close(self) -> None:
        """Close the stream and free every plan not running (idempotent)."""
        self.stream.close()
        self.session.close()

    def iteration_done(self, iteration: int) -> None:
        """The training thread finished ``iteration``: queue its telemetry (never blocks; the oldest is
        dropped when the queue is full)."""
        item = self._clock.capture(iteration, self.session.running)
        self.stream.send_telemetry(lambda: telemetry_message(self.identity.job, self.tracer, item))

    # ------------------------------------------------ the stream's peer
    def hello(self) -> link_pb2.RankMessage:
        running, held = self.session.holding()
        return self.identity.register(running, held, self.tracer.iteration)

    def receive(self, message: link_pb2.ServiceMessage) -> None:
        if message.WhichOneof("body") == "request_trace":
            for chunk, text in trace_chunks(self.identity.job, self.tracer, message.request_trace):
                self.stream.send(chunk, text)
        else:
            self.session.receive(message)

    def running(self) -> int:
        return self.session.running


def start(group: DefaultGroup, settings: EnforcerSettings, environ: Mapping[str, str]) -> Link:
    """The default group's link (``P2_SERVICE`` set), started. Without a job id
    it is logged and never connects, but the rank still takes part in the
    in-band check (every rank must), proposing the plan it runs."""
    identity = RankIdentity.of(group, settings, environ)
    link = Link(settings, identity, group.tracer, PreparedPlans(group, settings.prepare_timeout))
    if not identity.job:
        log.error("p2enforcer: P2_SERVICE is set but no job id was found: set P2_JOB (the same on every rank); "
                  "rank %d runs without the optimizer service", identity.rank)
        return link
    return link.start()
