"""The service link in one process: backoff, one log line per outage, Register, telemetry, token and TLS.

Real gRPC servers on port 0 (or a port where nothing listens); no torch.distributed world — the
plan builder is a stand-in that records what it is asked (the multi-rank tests with real
builds are in ``test_service_link.py``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent import futures

import grpc
import pytest
import torch.distributed as dist

from enforcer.link.identity import RankIdentity, register_topology, store_address
from enforcer.link.link import Link
from enforcer.link.stream import BACKOFF_MAX, TELEMETRY_FLUSH, TELEMETRY_QUEUE, backoff
from enforcer.link.traces import trace_chunks
from enforcer.settings import EnforcerSettings
from enforcer.trace import Tracer
from optimizer_service.wire.leader import LEADER_METADATA_KEY
from optimizer_service.wire.limits import MAX_TOPOLOGY_CHARACTERS, MAX_TRACE_BYTES, RANK_TRACE_CHUNK
from p2.v1 import enforcer_link_pb2 as link_pb2
from p2.v1 import enforcer_link_pb2_grpc
from tests.support.certs import MISSING, have_openssl, make_certificates
from tests.support.service_process import free_port

IDENTITY = RankIdentity("unit-job", 1, 2, "host", 1, "cpu:gloo", "2.x", "test", 5, "hgx2-4n")


class NoPlans:
    """Stands in for :class:`enforcer.link.prepare.PreparedPlans` (these tests build nothing)."""

    def __init__(self) -> None:
        self.closed = False

    def build(self, version, plan, report) -> None:
        raise AssertionError("nothing is prepared in these tests")

    def discard(self, version) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Recorder(enforcer_link_pb2_grpc.EnforcerLinkServicer):
    """Answers Register with Registered and records what came, and with which metadata."""

    def __init__(self) -> None:
        self.registers: list[link_pb2.Register] = []
        self.metadata: list[dict] = []
        self.telemetry: list[link_pb2.Telemetry] = []
        self.registered = threading.Event()

    def Connect(self, request_iterator, context):
        self.metadata.append(dict(context.invocation_metadata()))
        first = next(request_iterator)
        self.registers.append(first.register)
        threading.Thread(target=self._read, args=(request_iterator,), daemon=True).start()
        yield link_pb2.ServiceMessage(registered=link_pb2.Registered(job_id=first.register.job_id, epoch=1))
        self.registered.set()
        while context.is_active():
            time.sleep(0.05)

    def _read(self, request_iterator) -> None:
        try:
            for message in request_iterator:
                if message.WhichOneof("body") == "telemetry":
                    self.telemetry.append(message.telemetry)
        except grpc.RpcError:
            pass


def serve(servicer, credentials=None) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    enforcer_link_pb2_grpc.add_EnforcerLinkServicer_to_server(servicer, server)
    port = (server.add_insecure_port("127.0.0.1:0") if credentials is None
            else server.add_secure_port("127.0.0.1:0", credentials))
    server.start()
    return server, port


def wait_for(condition, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_backoff_doubles_from_half_a_second_to_thirty_with_jitter():
    assert [backoff(n, lambda: 0.5) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert backoff(0, lambda: 0.0) == 0.375 and backoff(0, lambda: 1.0) == 0.625
    assert backoff(10, lambda: 1.0) == BACKOFF_MAX and backoff(10_000, lambda: 0.0) == BACKOFF_MAX


def test_an_unreachable_service_is_logged_once_while_the_link_keeps_trying(caplog):
    caplog.set_level(logging.DEBUG, logger="enforcer")
    plans = NoPlans()
    link = Link(EnforcerSettings(service=f"127.0.0.1:{free_port()}"), IDENTITY, Tracer(1, 2), plans).start()
    try:
        # attempts counts a try when it starts: once the 4th has started, the 2nd and 3rd have logged their failure
        wait_for(lambda: link.stream.attempts >= 4)
    finally:
        link.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "rank 1 cannot reach the optimizer service" in warnings[0], warnings
    assert "training goes on with plan v0" in warnings[0]
    assert sum("attempt" in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG) >= 2
    assert plans.closed and not link.stream.connected


def test_register_carries_the_rank_and_its_state_and_the_token_goes_as_metadata(tmp_path):
    recorder = Recorder()
    server, port = serve(recorder)
    token_file = tmp_path / "token"
    token_file.write_text("file-token\n")
    tracer = Tracer(1, 2)
    for _ in range(3):
        tracer.step()
    link = Link(EnforcerSettings(service=f"127.0.0.1:{port}", token="env-token", token_file=str(token_file)),
                IDENTITY, tracer, NoPlans()).start()
    try:
        wait_for(lambda: link.stream.connected)
        link.iteration_done(3)
        wait_for(lambda: recorder.telemetry)
    finally:
        link.close()
        server.stop(None)
    register, = recorder.registers
    assert (register.job_id, register.rank, register.world_size, register.host, register.local_rank) == \
        ("unit-job", 1, 2, "host", 1)
    assert (register.backend, register.switch_every, register.iteration, register.running_version) == \
        ("cpu:gloo", 5, 3, 0)
    assert register.topology == "hgx2-4n"
    assert recorder.metadata[0]["authorization"] == "Bearer file-token"      # the file wins over P2_TOKEN
    assert recorder.telemetry[0].iteration == 3 and recorder.telemetry[0].job_id == "unit-job"
    assert any("got Registered(e1" in line for line in link.stream.history)


class Standby(enforcer_link_pb2_grpc.EnforcerLinkServicer):
    """Answers as a standby service does: UNAVAILABLE, naming the leader in the trailing metadata."""

    def __init__(self, leader: str) -> None:
        self.leader = leader
        self.calls = 0

    def Connect(self, request_iterator, context):
        self.calls += 1
        context.set_trailing_metadata(((LEADER_METADATA_KEY, self.leader),))
        context.abort(grpc.StatusCode.UNAVAILABLE, f"this p2 serve is a standby; the leader is at {self.leader}")


def test_a_link_given_several_addresses_follows_a_standby_to_the_leader():
    recorder = Recorder()
    server, port = serve(recorder)
    standby = Standby(f"127.0.0.1:{port}")
    standby_server, standby_port = serve(standby)
    service = f"127.0.0.1:{standby_port},127.0.0.1:{free_port()}"         # the standby first, then nothing
    link = Link(EnforcerSettings(service=service), IDENTITY, Tracer(1, 2), NoPlans()).start()
    try:
        wait_for(lambda: link.stream.connected)
    finally:
        link.close()
        server.stop(None)
        standby_server.stop(None)
    assert standby.calls == 1 and len(recorder.registers) == 1
    assert link.stream.attempts == 2, "the named leader is tried next, not the list's next address"
    assert link.stream.targets.current == f"127.0.0.1:{port}"


def test_a_rotated_token_file_is_read_again_when_the_link_reconnects(tmp_path):
    """Each new stream carries the file's token as it is then; a file caught mid-rotation (empty)
    keeps the last token."""
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    recorder = Recorder()
    server, port = serve(recorder)
    link = Link(EnforcerSettings(service=f"127.0.0.1:{port}", token_file=str(token_file)), IDENTITY, Tracer(1, 2),
                NoPlans()).start()

    def restart() -> grpc.Server:
        """End the stream (the link reconnects) and serve again on the same port."""
        server.stop(None)
        again = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        enforcer_link_pb2_grpc.add_EnforcerLinkServicer_to_server(recorder, again)
        assert again.add_insecure_port(f"127.0.0.1:{port}") == port
        again.start()
        return again

    try:
        wait_for(lambda: link.stream.connected)
        token_file.write_text("second-token\n")
        server = restart()
        wait_for(lambda: len(recorder.registers) == 2)
        token_file.write_text("")
        server = restart()
        wait_for(lambda: len(recorder.registers) == 3)
    finally:
        link.close()
        server.stop(None)
    assert [m["authorization"] for m in recorder.metadata] == \
        ["Bearer first-token", "Bearer second-token", "Bearer second-token"]


def test_telemetry_waits_in_a_bounded_queue_that_drops_the_oldest():
    tracer = Tracer(0, 1)
    record = tracer.issue("all_reduce", "float32", 64, (0,), "0")
    tracer.complete(record)
    link = Link(EnforcerSettings(service="127.0.0.1:1"), IDENTITY, tracer, NoPlans())     # never started
    link.iteration_done(0)
    for iteration in range(1, 100):
        tracer.step()
        link.iteration_done(iteration)
    assert link.stream.telemetry_dropped == 100 - TELEMETRY_QUEUE
    requests = link.stream._requests(link.stream._generation)
    assert next(requests).WhichOneof("body") == "register"
    first = next(requests).telemetry
    assert first.iteration == 100 - TELEMETRY_QUEUE and first.ops == []
    link2 = Link(EnforcerSettings(service="127.0.0.1:1", telemetry_every=1), IDENTITY, Tracer(0, 1), NoPlans())
    link2.tracer.complete(link2.tracer.issue("broadcast", "float32", 8, (0, 1), "0"))
    link2.iteration_done(0)
    requests = link2.stream._requests(link2.stream._generation)
    next(requests)
    op, = next(requests).telemetry.ops
    assert (op.seq, op.kind, op.bytes, list(op.group)) == (0, "broadcast", 8, [0, 1])
    assert 0 <= op.issue_seconds <= op.complete_seconds


def test_the_ops_of_the_iteration_that_ended_newest_first_cut_to_the_limit():
    tracer = Tracer(0, 1)
    for nbytes in (1, 2, 3):
        tracer.issue("all_reduce", "float32", nbytes, (0,), "0")
    tracer.step()
    tracer.issue("broadcast", "float32", 9, (0,), "0")        # the next iteration began on another thread
    assert [r.bytes for r in tracer.iteration_ops(0, 2)] == [2, 3]
    assert [r.bytes for r in tracer.iteration_ops(0, 10)] == [1, 2, 3]


def test_motif_timings_go_with_their_iteration_and_sum_into_their_op_wait():
    tracer = Tracer(0, 2)
    first = tracer.issue("all_reduce", "float32", 64, (0, 1), "0")
    second = tracer.issue("broadcast", "float32", 8, (0, 1), "0")
    tracer.motif(first, 0, 0, 0.25, tracer.now(), 0.01)
    tracer.motif(second, 1, 1, 0.0, tracer.now(), 0.02)
    tracer.motif(first, 2, 1, 0.5, tracer.now(), 0.03)
    tracer.step()
    tracer.motif(tracer.issue("all_reduce", "float32", 64, (0, 1), "0"), 0, 0, 9.0, tracer.now(), 0.01)
    assert [m.order for m in tracer.iteration_motifs(0, 10)[0]] == [0, 1, 2]
    assert [m.order for m in tracer.iteration_motifs(0, 2)[0]] == [0, 1] and tracer.iteration_motifs(0, 2)[1] == 1
    link = Link(EnforcerSettings(service="127.0.0.1:1", telemetry_every=1), IDENTITY, tracer, NoPlans())     # never started
    link.iteration_done(0)
    requests = link.stream._requests(link.stream._generation)
    next(requests)
    sent = next(requests).telemetry
    assert [(m.op_seq, m.order, m.channel) for m in sent.motifs] == [(0, 0, 0), (1, 1, 1), (0, 2, 1)]
    assert [op.wait_seconds for op in sent.ops] == pytest.approx([0.75, 0.0])
    assert [op.group_seq for op in sent.ops] == [0, 1]
    assert sent.dropped_motifs == 0 and tracer.to_dict()["motifs"][0]["waited"] == 0.25


def _read_on_a_thread(requests) -> list:
    """The list a daemon thread appends every message ``requests`` yields to, as it yields it
    (read on a thread: a generator that waits blocks)."""
    sent: list = []
    threading.Thread(target=lambda: [sent.append(message) for message in requests], daemon=True).start()
    return sent


def test_telemetry_goes_out_every_few_iterations_or_once_the_oldest_has_waited():
    """With ``telemetry_every=3`` two iterations wait; the third sends all three, in order; a
    lone iteration goes out after TELEMETRY_FLUSH; a control message goes at once."""
    tracer = Tracer(0, 1)
    link = Link(EnforcerSettings(service="127.0.0.1:1", telemetry_every=3), IDENTITY, tracer, NoPlans())
    stream = link.stream
    requests = stream._requests(stream._generation)
    assert next(requests).WhichOneof("body") == "register"
    for iteration in range(2):
        link.iteration_done(iteration)
        tracer.step()
    sent = _read_on_a_thread(requests)
    time.sleep(0.3)
    assert sent == [], "two of three iterations are held back"
    link.iteration_done(2)
    wait_for(lambda: len(sent) == 3, 5)
    assert [message.telemetry.iteration for message in sent] == [0, 1, 2]
    started = time.monotonic()
    link.iteration_done(3)
    wait_for(lambda: len(sent) == 4, 5)
    waited = time.monotonic() - started
    assert TELEMETRY_FLUSH * 0.9 <= waited and sent[3].telemetry.iteration == 3
    stream.send(link_pb2.RankMessage(), "a control message")
    wait_for(lambda: len(sent) == 5, 0.5)
    stream.close()


def test_p2_topology_goes_as_a_documents_text_or_a_presets_name(tmp_path, caplog):
    document = tmp_path / "topology.yaml"
    document.write_text("name: mine\nlevels: []\n")
    assert register_topology(str(document)) == "name: mine\nlevels: []\n"
    assert register_topology("hgx2-4n") == "hgx2-4n" and register_topology(None) == ""
    with caplog.at_level(logging.WARNING, logger="enforcer"):
        assert register_topology(str(tmp_path / "missing.yaml")) == ""
    assert "cannot be read" in caplog.text
    longest = tmp_path / "longest.yaml"
    longest.write_text("é" * MAX_TOPOLOGY_CHARACTERS)            # the service counts characters, not bytes
    assert register_topology(str(longest)) == "é" * MAX_TOPOLOGY_CHARACTERS
    longest.write_text("é" * (MAX_TOPOLOGY_CHARACTERS + 1))
    with caplog.at_level(logging.WARNING, logger="enforcer"):
        assert register_topology(str(longest)) == ""
    assert "not sent" in caplog.text


def test_a_trace_request_is_answered_in_chunks_the_last_one_marked():
    class Window:
        """A tracer whose window is ``size`` bytes, recording the bound it was asked for."""

        def __init__(self, size: int) -> None:
            self.size, self.asked = size, []

        def window(self, iterations: int, limit: int) -> bytes:
            self.asked.append((iterations, limit))
            return (bytes(range(251)) * (self.size // 251 + 1))[:self.size]

    tracer = Window(2 * RANK_TRACE_CHUNK + 5)
    answer = trace_chunks("unit-job", tracer, link_pb2.RequestTrace(request_id=7, iterations=3))
    chunks = [message.trace_chunk for message, _ in answer]
    assert tracer.asked == [(3, MAX_TRACE_BYTES)]                  # max_bytes 0: the contract's bound
    assert [text for _, text in answer] == ["TraceChunk(#7 1/3)", "TraceChunk(#7 2/3)", "TraceChunk(#7 3/3)"]
    assert [(c.job_id, c.request_id, c.offset, len(c.data), c.last) for c in chunks] == [
        ("unit-job", 7, 0, RANK_TRACE_CHUNK, False), ("unit-job", 7, RANK_TRACE_CHUNK, RANK_TRACE_CHUNK, False),
        ("unit-job", 7, 2 * RANK_TRACE_CHUNK, 5, True)]
    assert b"".join(c.data for c in chunks) == tracer.window(3, 0)
    empty = Window(0)
    (message, text), = trace_chunks("unit-job", empty,
                                    link_pb2.RequestTrace(request_id=8, max_bytes=10 * MAX_TRACE_BYTES))
    assert empty.asked == [(0, MAX_TRACE_BYTES)] and text == "TraceChunk(#8 1/1)"
    assert message.trace_chunk.data == b"" and message.trace_chunk.last
    small = Window(10)
    trace_chunks("unit-job", small, link_pb2.RequestTrace(iterations=1, max_bytes=100))
    assert small.asked == [(1, 100)]


def test_a_trace_window_holds_the_last_finished_iterations_and_fits_its_bound():
    tracer = Tracer(0, 1)
    for iteration in range(6):
        for nbytes in (100, 200):
            record = tracer.issue("all_reduce", "float32", nbytes, (0,), "0")
            tracer.complete(record)
            tracer.motif(record, 0, 0, 0.0, tracer.now(), 0.001)
        tracer.step()
    tracer.issue("all_reduce", "float32", 100, (0,), "0")            # iteration 6 runs: never sent
    window = json.loads(tracer.window(3, 1 << 20))
    assert sorted({op["iteration"] for op in window["ops"]}) == [3, 4, 5]
    assert sorted({m["iteration"] for m in window["motifs"]}) == [3, 4, 5]
    assert [span["index"] for span in window["iterations"]] == [3, 4, 5] and window["rank"] == 0
    everything = json.loads(tracer.window(0, 1 << 20))
    assert sorted({op["iteration"] for op in everything["ops"]}) == list(range(6))
    small = len(tracer.window(1, 1 << 20))
    assert len(json.loads(tracer.window(6, small + 10))["iterations"]) == 1    # halved until it fits
    assert tracer.window(1, 10) == b""



def test_a_trace_window_is_taken_while_channel_workers_record_motifs_and_waits():
    """Motifs and waits are recorded without the tracer's lock (a worker never waits behind an
    export): the window copies them first. Taking it while they were appended raised "deque
    mutated during iteration" on the link thread, and the rank lost its stream (p2 demo)."""
    tracer = Tracer(0, 1, limit=5_000)
    for _ in range(3):
        record = tracer.issue("all_reduce", "float32", 100, (0,), "0")
        tracer.complete(record)
        tracer.step()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            tracer.motif(record, 0, 0, 0.0, tracer.now(), 0.001)
            tracer.wait(0, 0.0)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        for _ in range(20):
            assert json.loads(tracer.window(0, 1 << 26))["motifs"]
    finally:
        stop.set()
        thread.join()

@pytest.mark.skipif(not have_openssl(), reason=MISSING)
def test_mutual_tls(tmp_path):
    certs = make_certificates(tmp_path)
    credentials = grpc.ssl_server_credentials([(certs.server_key.read_bytes(), certs.server_cert.read_bytes())],
                                              root_certificates=certs.ca.read_bytes(), require_client_auth=True)
    recorder = Recorder()
    server, port = serve(recorder, credentials)
    settings = EnforcerSettings(service=f"localhost:{port}", tls_ca=str(certs.ca), tls_cert=str(certs.client_cert),
                                tls_key=str(certs.client_key))
    link = Link(settings, IDENTITY, Tracer(1, 2), NoPlans()).start()
    try:
        wait_for(lambda: link.stream.connected)
    finally:
        link.close()
    without = Link(EnforcerSettings(service=f"localhost:{port}", tls_ca=str(certs.ca)), IDENTITY, Tracer(1, 2),
                   NoPlans()).start()
    try:
        wait_for(lambda: without.stream.attempts >= 2)
        assert not without.stream.connected                     # no client certificate: refused
    finally:
        without.close()
        server.stop(None)
    assert len(recorder.registers) == 1


def test_a_missing_token_file_is_logged_and_the_link_stays_idle(caplog, tmp_path):
    link = Link(EnforcerSettings(service="127.0.0.1:1", token_file=str(tmp_path / "absent")), IDENTITY,
                Tracer(0, 1), NoPlans()).start()
    link.stream._thread.join(5)
    link.close()
    assert link.stream.attempts == 0
    assert any("cannot read P2_TOKEN_FILE" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


def test_the_store_address_is_found_under_the_prefixes():
    server = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    wrapped = dist.PrefixStore("default_pg/", dist.PrefixStore("attempt_0/", server))
    assert store_address(wrapped) == f"127.0.0.1:{server.port}"
    assert store_address(dist.HashStore()) is None

