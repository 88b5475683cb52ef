"""The enforcer as a two-phase-commit participant, against a minimal real gRPC service.

Real processes, real gloo, real gRPC: :class:`MiniService` below is a
hand-written ``EnforcerLink`` servicer (not the optimizer service) that waits
for every rank to register, sends each a Prepare, and commits when every vote
is yes, else aborts. The ranks (:mod:`tests.enforcer.service_ranks`) train on,
compare every result with plain gloo, and report their traces.
"""

from __future__ import annotations

import queue
import threading
from concurrent import futures
from dataclasses import replace

import grpc
import pytest

from optimizer_service.control.messages import Abort, Commit, Prepare
from optimizer_service.control.wire import to_service_message
from optimizer_service.plan import Plan
from p2.v1 import enforcer_link_pb2 as link
from p2.v1 import enforcer_link_pb2_grpc
from tests.enforcer import plan_ranks, service_ranks
from tests.support.multiproc import run_world
from tests.support.service_process import free_port

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]

JOB = "link-test"
VERSION = 7
EPOCH = 3


class MiniService(enforcer_link_pb2_grpc.EnforcerLinkServicer):
    """Registers ``world`` ranks, then Prepare(``plans[rank]``) to each; all yes → Commit, a no → Abort."""

    def __init__(self, world: int, plans: dict[int, Plan], switch_iteration: int, token: str | None = None,
                 commit_delay: dict[int, float] | None = None, turn_away_first: bool = False) -> None:
        self.world, self.plans, self.switch_iteration, self.token = world, plans, switch_iteration, token
        self.commit_delay = commit_delay or {}       # rank -> seconds its Commit is held back
        self.turn_away_first = turn_away_first       # each rank's first stream ends UNAVAILABLE (still starting)
        self.turned_away: set[int] = set()
        self.lock = threading.Lock()
        self.outboxes: dict[int, queue.Queue] = {}
        self.registers: list[link.Register] = []
        self.votes: dict[int, link.Vote] = {}
        self.acks: dict[int, link.Ack] = {}
        self.telemetry: dict[int, list[link.Telemetry]] = {}
        self.refused = 0
        self.decision: Commit | Abort | None = None
        self.prepared = False

    def Connect(self, request_iterator, context):
        if self.token and (("authorization", f"Bearer {self.token}") not in context.invocation_metadata()):
            self.refused += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "no or wrong bearer token")
        first = next(request_iterator)
        assert first.WhichOneof("body") == "register"
        rank = first.register.rank
        if self.turn_away_first and rank not in self.turned_away:
            self.turned_away.add(rank)
            context.abort(grpc.StatusCode.UNAVAILABLE, "the service is still starting")
        outbox: queue.Queue = queue.Queue()
        with self.lock:
            self.registers.append(first.register)
            self.outboxes[rank] = outbox
            outbox.put(link.ServiceMessage(registered=link.Registered(job_id=JOB, epoch=EPOCH)))
            if len(self.outboxes) == self.world and not self.prepared:
                self.prepared = True
                for r, box in self.outboxes.items():
                    box.put(to_service_message(Prepare(JOB, VERSION, EPOCH, self.switch_iteration, self.plans[r])))
        threading.Thread(target=self._read, args=(rank, request_iterator), daemon=True).start()
        while context.is_active():
            try:
                message = outbox.get(timeout=0.1)
            except queue.Empty:
                continue
            yield message

    def _read(self, rank: int, request_iterator) -> None:
        try:
            for message in request_iterator:
                self._on(rank, message)
        except grpc.RpcError:
            pass

    def _on(self, rank: int, message: link.RankMessage) -> None:
        body = message.WhichOneof("body")
        with self.lock:
            if body == "telemetry":
                self.telemetry.setdefault(rank, []).append(message.telemetry)
            elif body == "ack":
                self.acks[rank] = message.ack
            elif body == "vote":
                assert (message.vote.job_id, message.vote.version, message.vote.epoch) == (JOB, VERSION, EPOCH)
                self.votes[rank] = message.vote
                if self.decision is not None:
                    return
                if not message.vote.yes:            # any no: abort at once
                    self.decision = Abort(JOB, VERSION, EPOCH, f"rank {rank}: {message.vote.reason}")
                elif len(self.votes) == self.world:
                    self.decision = Commit(JOB, VERSION, EPOCH, self.switch_iteration)
                else:
                    return
                for r, box in self.outboxes.items():
                    delay = self.commit_delay.get(r, 0) if isinstance(self.decision, Commit) else 0
                    threading.Timer(delay, box.put, args=(to_service_message(self.decision),)).start()


def serve(service: MiniService, port: int = 0) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    enforcer_link_pb2_grpc.add_EnforcerLinkServicer_to_server(service, server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, port


def training_plan(world: int) -> Plan:
    """Every planned op kind over two channels, for the loop of :func:`service_ranks.train`."""
    return replace(Plan.parse(plan_ranks.build_plan(world, reverse=True, channels=2)), version=VERSION)


def env(port: int, **extra: str) -> dict[str, str]:
    return {"P2_SERVICE": f"127.0.0.1:{port}", "P2_JOB": JOB, "P2_SWITCH_EVERY": "2", **extra}


def iteration_of(result: dict, message: str) -> int:
    """The iteration a rank was in when its link saw ``message`` (a prefix of a history entry's text)."""
    return next(int(line.split(":")[0].removeprefix("it ")) for line in result["history"]
                if line.split(": ", 1)[1].startswith(message))


@pytest.mark.parametrize("late_commit", [False, True], ids=["together", "rank2-hears-late"])
def test_a_committed_plan_switches_every_rank_at_the_same_iteration(late_commit):
    world = 4
    plan = training_plan(world)
    service = MiniService(world, {r: plan for r in range(world)}, switch_iteration=6, token="s3cret",
                          commit_delay={2: 1.5} if late_commit else {})
    server, port = serve(service)
    try:
        results = run_world(world, service_ranks.train, "running", VERSION, 0, 0.02 if late_commit else 0.0,
                            backend="p2enforcer", timeout=240, env=env(port, P2_TOKEN="s3cret"))
    finally:
        server.stop(None)
    assert isinstance(service.decision, Commit) and service.refused == 0
    assert sorted(r.rank for r in service.registers) == list(range(world))
    register = service.registers[0]
    assert (register.job_id, register.world_size, register.switch_every, register.running_version) == (JOB, world, 2, 0)
    assert sorted(service.acks) == list(range(world)) and all(a.committed and a.have_plan for a in service.acks.values())
    switched_at = {result["switches"][0]["iteration"] for result in results}
    assert len(switched_at) == 1, [result["switches"] for result in results]
    boundary = switched_at.pop()
    assert boundary >= 6 and boundary % 2 == 0
    heard = [iteration_of(result, "got Commit(") for result in results]
    assert boundary >= max(heard)
    if late_commit:
        # the others held the committed plan for many check boundaries, and waited for rank 2
        assert heard[2] > max(heard[0], heard[1], heard[3]) + 10, heard
    for rank, result in enumerate(results):
        assert result["mismatches"] == [], f"rank {rank}"
        assert result["running"] == VERSION and result["switches"] == [
            {"iteration": boundary, "version": VERSION, "at": result["switches"][0]["at"]}]
        # ops are enforced from the switch boundary on, every one of them, and none before
        assert result["first_enforced"] == boundary and result["all_enforced_after"]
        assert result["enforced"] == 6 * (result["iterations"] - boundary)
        assert result["bypassed"] == {}                   # the in-band check is not a user op
        assert any(f"switched to plan v{VERSION} at iteration {boundary}" in line for _, line in result["log"])
        assert any(line.endswith(f": sent Vote({JOB} r{rank} v{VERSION} e{EPOCH} yes)") for line in result["history"])
        # telemetry: one message per iteration, the op timings of the iteration, the version it ran
        sent = service.telemetry[rank]
        assert [t.iteration for t in sent] == list(range(len(sent))) and len(sent) >= boundary
        assert len(sent[0].ops) == 6 and sent[0].ops[0].kind == "all_reduce" and sent[0].duration_seconds > 0
        assert {t.running_version for t in sent if t.iteration >= boundary} <= {VERSION}
        assert {t.running_version for t in sent if t.iteration < boundary} == {0}
        # under the plan: every motif this rank takes part in, timed, on the plan's channels, with
        # each op's dispatcher waits summed from its motifs'; before it: no motifs, nothing enforced
        orders = {order for op in plan.ops for order in op.order}
        for message in sent:
            if message.iteration < boundary:
                assert not message.motifs and not any(op.enforced for op in message.ops)
                continue
            if message.iteration == sent[-1].iteration:
                continue                                  # the last iteration may still be in flight
            assert all(op.enforced for op in message.ops) and message.dropped_motifs == 0
            assert message.motifs and {m.order for m in message.motifs} <= orders
            assert {m.channel for m in message.motifs} <= set(plan.channels)
            assert all(m.duration_seconds > 0 for m in message.motifs)
            waits = {}
            for motif in message.motifs:
                waits[motif.op_seq] = waits.get(motif.op_seq, 0.0) + motif.wait_seconds
            assert [op.wait_seconds for op in message.ops] == pytest.approx([waits.get(op.seq, 0.0)
                                                                             for op in message.ops])
            assert [op.group_seq for op in message.ops] == list(range(6))


def test_a_plan_one_rank_cannot_prepare_is_aborted_and_nobody_switches():
    world = 4
    plan = training_plan(world)
    wrong = replace(plan, world_size=world + 1)          # rank 3 is sent a plan for another world
    service = MiniService(world, {0: plan, 1: plan, 2: plan, 3: wrong}, switch_iteration=2)
    server, port = serve(service)
    try:
        results = run_world(world, service_ranks.train, "aborted", VERSION, 0, 0.0, 6, backend="p2enforcer",
                            timeout=240, env=env(port))
    finally:
        server.stop(None)
    assert isinstance(service.decision, Abort) and "rank 3" in service.decision.reason
    assert "world of 5" in service.votes[3].reason and not service.votes[3].yes
    for rank, result in enumerate(results):
        assert result["mismatches"] == [] and result["running"] == 0
        assert result["switches"] == [] and result["enforced"] == 0, f"rank {rank}"
        assert any(f": got Abort({JOB} v{VERSION}" in line for line in result["history"])
    # ranks 0-2 waited at the ready barrier for rank 3, which never came; the Abort released
    # them (long before P2_PREPARE_TIMEOUT) and they never voted
    assert sorted(service.votes) == [3]
    for result in results[:3]:
        assert any(f"did not build plan v{VERSION}: plan v{VERSION} was aborted while waiting" in line
                   for _, line in result["log"])
    assert sorted(service.acks) == list(range(world)) and not any(a.committed for a in service.acks.values())


def outages(result: dict) -> list[str]:
    return [line for level, line in result["log"] if level == "WARNING" and "the optimizer service at" in line
            and ("cannot reach" in line or "lost" in line)]


def test_without_a_reachable_service_the_job_trains_as_in_passthrough():
    port = free_port()                          # nothing listens there
    results = run_world(2, service_ranks.train, "iterations", 0, 50, 0.05, backend="p2enforcer", timeout=240,
                        env=env(port))
    for result in results:
        assert result["mismatches"] == [] and result["running"] == 0 and result["switches"] == []
        assert result["enforced"] == 0 and not result["connected"]
        assert result["attempts"] >= 3                 # it kept trying (0.5 s, 1 s, 2 s apart) ...
        assert len(outages(result)) == 1, outages(result)   # ... and said so once
        assert "training goes on with plan v0" in outages(result)[0]


def test_a_service_that_comes_up_late_is_joined_and_its_plan_runs():
    """The service listens only after 2 s and turns each rank's first stream away, so every rank
    retries whether its first attempt came before the listener (a fast start) or after (a slow one)."""
    world = 2
    port = free_port()
    service = MiniService(world, {r: training_plan(world) for r in range(world)}, switch_iteration=0,
                          turn_away_first=True)
    started: list[grpc.Server] = []
    timer = threading.Timer(2.0, lambda: started.append(serve(service, port)[0]))
    timer.start()
    try:
        results = run_world(world, service_ranks.train, "running", VERSION, 0, 0.02, 3, 2000,
                            backend="p2enforcer", timeout=240, env=env(port))
    finally:
        timer.join()
        for server in started:
            server.stop(None)
    assert isinstance(service.decision, Commit)
    assert len({result["switches"][0]["iteration"] for result in results}) == 1
    for result in results:
        assert result["mismatches"] == [] and result["running"] == VERSION and result["attempts"] >= 2
        assert len(outages(result)) == 1
        assert any("reconnected to the optimizer service" in line for _, line in result["log"])
