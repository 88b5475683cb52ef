"""A simulated job for exploring the 2PC protocol: one coordinator with a
durable log (a list that survives crashes) and an epoch counter, ``n``
participants training in lockstep, and a network that delivers any in-flight
message in any order, drops, duplicates or delays it.

Every fault is a method; the explorers (hypothesis, seeded random) call them in
any order. :meth:`Sim.check` holds the invariants and raises :class:`Violation`;
:meth:`Sim.heal` stops the faults and checks that the job converges.

Modelling choices, as PROTOCOL.md states them for the real drivers:
* a coordinator crash loses its volatile state and every rank's stream (ranks
  join again later); messages already in flight survive it, in both directions;
* a stream drop keeps the rank's state; its messages in flight may still arrive;
* a job restart resets every rank to iteration 0 with empty state; the streams
  of the dead processes die with everything in flight on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.control import coordinator as co
from optimizer_service.control import participant as pa
from optimizer_service.control.messages import Abort, Commit, Prepare, Vote
from optimizer_service.control.records import COMMIT
from optimizer_service.control.switch import SwitchError, agree, is_check, proposal
from optimizer_service.plan import Plan

JOB = "job"
COORDINATOR = -1
TIMING = co.Timing(vote_timeout=5.0, resend_interval=1.0, switch_margin=1)


class Violation(AssertionError):
    """An invariant of the protocol failed."""


@dataclass(frozen=True)
class Envelope:
    to: int               # a rank, or COORDINATOR
    message: object


def plan(version: int, world_size: int) -> Plan:
    return Plan(version=version, world_size=world_size, channels={0: None}, ops=())


class Sim:
    def __init__(self, ranks: int = 3, every: int = 2, *, informed_check_only: bool = False,
                 check_send_order: bool = True, pipelined: bool = True) -> None:
        self.n, self.every = ranks, every
        self.informed_check_only = informed_check_only    # the broken variant: only ranks that heard a commit check
        self.pipelined = pipelined                        # the MIN for b started at the check before b (the enforcer's)
        self.in_flight: int | None = None                 # the pipelined MIN's result, for the next check
        self.check_send_order = check_send_order
        self.log: list[dict] = []
        self.plans: dict[int, Plan] = {}                  # the driver's store of plan bodies
        self.epoch = 1
        self.now = 0.0
        self.iteration = 0
        self.coord = co.Coordinator.new(JOB, ranks, self.epoch, every, TIMING)
        self.parts = [pa.Participant.new(JOB, r, ranks) for r in range(ranks)]
        self.linked = [False] * ranks
        self.net: list[Envelope] = []
        self.builds: list[tuple[int, int]] = []
        self.crash_after: int | None = None
        self.sent_commit: set[int] = set()
        self.sent_abort: set[int] = set()
        self.refusals: list[str] = []
        for rank in range(ranks):
            self.rejoin(rank)

    # -------------------------------------------------------------- executing actions
    def coordinate(self, event) -> None:
        self.coord, actions = co.step(self.coord, event, self.now)
        self._execute(actions)

    def _execute(self, actions) -> None:
        for index, action in enumerate(actions):
            if self.crash_after is not None and index >= self.crash_after:
                self.crash_after = None
                self.crash()
                return
            if isinstance(action, co.Persist):
                self.log.append(dict(action.record))
            elif isinstance(action, co.Send):
                self._sent(action.message)
                self.net += [Envelope(r, action.message) for r in action.ranks if self.linked[r]]
            elif isinstance(action, co.Refuse):
                self.refusals.append(action.reason)

    def _sent(self, message) -> None:
        decisions = self.decisions()
        if isinstance(message, Commit):
            self.sent_commit.add(message.version)
            if self.check_send_order and decisions.get(message.version) != COMMIT:
                raise Violation(f"Commit v{message.version} sent before its commit decision was durable")
        elif isinstance(message, Abort):
            self.sent_abort.add(message.version)
            if self.check_send_order and decisions.get(message.version) != "abort":
                raise Violation(f"Abort v{message.version} sent before its abort decision was durable")
        elif isinstance(message, Prepare) and self.check_send_order:
            if not any(r["type"] == "prepare" and r["version"] == message.version for r in self.log):
                raise Violation(f"Prepare v{message.version} sent before its prepare record was durable")
        if self.sent_commit & self.sent_abort:
            raise Violation(f"both Commit and Abort were sent for v{min(self.sent_commit & self.sent_abort)}")

    def participate(self, rank: int, event) -> None:
        self.parts[rank], actions = pa.step(self.parts[rank], event, self.now)
        for action in actions:
            if isinstance(action, pa.Build):
                self.builds.append((rank, action.version))
            elif isinstance(action, pa.Discard):
                if action.version == self.parts[rank].running:
                    raise Violation(f"rank {rank} discarded the plan it runs, v{action.version}")
            elif isinstance(action, pa.SwitchTo):
                raise Violation(f"rank {rank} switched on a message, outside the in-band check")
            elif self.linked[rank]:
                self.net.append(Envelope(COORDINATOR, action.vote if isinstance(action, pa.SendVote) else action.ack))

    # -------------------------------------------------------------- the moves
    def submit(self, version: int | None = None, world_size: int | None = None) -> None:
        """The driver assigns a version above every one in its store (unless a bad one is asked for)."""
        good = version is None and world_size is None
        version = version if version is not None else max(self.plans, default=0) + 1
        body = plan(version, world_size or self.n)
        if good:
            self.plans[version] = body
        before, epoch = len(self.refusals), self.epoch
        self.coordinate(co.Submit(body))
        if not good and len(self.refusals) == before and self.epoch == epoch:    # (a crash loses the answer)
            raise Violation(f"a bad Submit (version {version}, world size {world_size}) was not refused")

    def deliver(self, index: int) -> None:
        envelope = self.net.pop(index % len(self.net))
        message = envelope.message
        if envelope.to == COORDINATOR:
            self.coordinate(co.VoteIn(message) if isinstance(message, Vote) else co.AckIn(message))
        elif isinstance(message, Prepare):
            self.participate(envelope.to, pa.PrepareIn(message))
        elif isinstance(message, Commit):
            self.participate(envelope.to, pa.CommitIn(message))
        else:
            self.participate(envelope.to, pa.AbortIn(message))

    def drop(self, index: int) -> None:
        self.net.pop(index % len(self.net))

    def duplicate(self, index: int) -> None:
        self.net.append(self.net[index % len(self.net)])

    def finish_build(self, index: int, ok: bool) -> None:
        rank, version = self.builds.pop(index % len(self.builds))
        self.participate(rank, pa.Built(version, ok, "" if ok else "injected failure"))

    def tick(self, seconds: float) -> None:
        self.now += seconds
        self.coordinate(co.Tick())

    def drop_stream(self, rank: int) -> None:
        if self.linked[rank]:
            self.linked[rank] = False
            self.coordinate(co.Left(rank))

    def rejoin(self, rank: int) -> None:
        if not self.linked[rank]:
            self.linked[rank] = True
            part = self.parts[rank]
            self.coordinate(co.Joined(rank, part.running, part.held(), self.iteration))

    def crash(self) -> None:
        """The coordinator dies (volatile state lost) and restarts from its log with a higher epoch."""
        self.epoch += 1
        self.linked = [False] * self.n
        self.coord, actions = co.recover(JOB, self.n, self.every, self.log, self.plans, self.epoch, self.now, TIMING)
        self._execute(actions)

    def arm_crash(self, after: int) -> None:
        """Crash in the middle of the next action list, after ``after`` actions ran."""
        self.crash_after = after

    def restart_job(self) -> None:
        """Every rank's process restarts at iteration 0 with empty state."""
        for rank in range(self.n):
            self.drop_stream(rank)
        self.parts = [pa.Participant.new(JOB, r, self.n) for r in range(self.n)]
        self.net, self.builds, self.iteration, self.in_flight = [], [], 0, None

    def advance(self) -> None:
        """All ranks finish an iteration in lockstep; at a check boundary they agree on the MIN started at
        the check before (``pipelined``, as the enforcer does) and start the next one, or run the MIN
        and agree at once."""
        self.iteration += 1
        boundary = self.iteration
        for rank in range(self.n):
            if self.linked[rank]:
                self.coordinate(co.Progress(rank, boundary))
        if not is_check(boundary, self.every):
            return
        if self.informed_check_only:
            informed = [r for r, p in enumerate(self.parts) if any(e.committed for e in p.prepared.values())]
            if informed and len(informed) < self.n:
                raise Violation(f"ranks {informed} entered the check collective at iteration {boundary}, the others "
                                f"went on training: collective mismatch, the job deadlocks")
        if not self.pipelined:
            self.agree_all(boundary, min(proposal(p, boundary) for p in self.parts))
            return
        if self.in_flight is not None:
            self.agree_all(boundary, self.in_flight)
        self.in_flight = min(proposal(p, boundary + self.every) for p in self.parts)

    def agree_all(self, boundary: int, common: int) -> None:
        for rank in range(self.n):
            try:
                self.parts[rank], actions = agree(self.parts[rank], boundary, common)
            except SwitchError as error:
                raise Violation(str(error)) from error
            for action in actions:
                if isinstance(action, pa.Discard) and action.version == common:
                    raise Violation(f"rank {rank} discarded v{common} while switching to it")

    # -------------------------------------------------------------- invariants
    def decisions(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for record in self.log:
            if record["type"] == "decision":
                if record["version"] in found:
                    raise Violation(f"v{record['version']} decided twice: {found[record['version']]}, then "
                                    f"{record['decision']}")
                found[record["version"]] = record["decision"]
        return found

    def newest_committed(self) -> int:
        return max((v for v, d in self.decisions().items() if d == COMMIT), default=0)

    def check(self) -> None:
        decisions = self.decisions()
        running = {p.running for p in self.parts}
        if len(running) > 1:
            raise Violation(f"ranks run different plans at iteration {self.iteration}: "
                            f"{[p.running for p in self.parts]}")
        for p in self.parts:
            if p.running and decisions.get(p.running) != COMMIT:
                raise Violation(f"rank {p.rank} runs v{p.running}, which was never committed")
            for version, entry in p.prepared.items():
                if entry.committed and decisions.get(version) != COMMIT:
                    raise Violation(f"rank {p.rank} holds v{version} committed but the log says "
                                    f"{decisions.get(version, 'nothing')} for it")
        if self.sent_abort & {v for v, d in decisions.items() if d == COMMIT}:
            raise Violation("an Abort was sent for a committed version")

    # -------------------------------------------------------------- the end
    def heal(self, rounds: int = 60) -> None:
        """No more faults: every rank joins, everything is delivered and built,
        time passes; then the job trains past a few check boundaries. Every rank
        must then run the newest committed version."""
        self.crash_after = None
        for rank in range(self.n):
            self.rejoin(rank)
        quiet = 0
        for _ in range(rounds):
            busy = bool(self.net or self.builds)
            while self.net or self.builds:
                while self.net:
                    self.deliver(0)
                while self.builds:
                    self.finish_build(0, True)
            self.tick(TIMING.resend_interval)     # re-sends; an undecided vote times out after a few rounds
            quiet = 0 if busy or self.net else quiet + 1
            if quiet >= 3:
                break
        due = max([e.switch_iteration for p in self.parts for e in p.prepared.values()], default=0)
        for _ in range(max(due - self.iteration, 0) + 3 * self.every + 1):
            self.advance()
            self.check()
        newest = self.newest_committed()
        runs = [p.running for p in self.parts]
        if runs != [newest] * self.n:
            raise Violation(f"after healing the ranks run {runs}, not the newest committed plan v{newest}")
