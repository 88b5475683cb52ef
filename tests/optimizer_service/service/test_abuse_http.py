"""Issue 30, items 2, 3 and 7 (TLS, the warning): what an HTTP client can make a real ``p2 serve`` do.

Before: bodies were read whole before any check (an unauthenticated 120 MB ``POST
/api/jobs/J/plans`` grew the service by 670 MB and stalled gRPC health 2.9 s), and a connection
that never finished its request head was held forever (300 of them under a descriptor limit of
256: gRPC health DEADLINE_EXCEEDED, ``p2 jobs list`` failed, 74 MB of "Too many open files" in the
log in 8 s). Now each route has a body limit checked before and while the body is read
(dashboard/body_limit.py), and connections are capped, with header and idle deadlines
(service/http_server.py, service/http_protocol.py). The dashboard speaks TLS with gRPC's
certificate, and ``p2 serve`` warns once when it listens beyond loopback without a token or TLS.

Clients here are raw sockets (or ``http.client``), so each test controls exactly what is sent and
when; every attack is bounded in bytes and in time.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import ssl
import time
from pathlib import Path

import grpc
import pytest

from optimizer_service.service.exposure import exposure_warning, listen_host
from optimizer_service.wire.credentials import bearer
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc
from tests.support.certs import MISSING, have_openssl, make_certificates
from tests.support.cli import p2
from tests.support.responsiveness import HealthProbe, peak_rss_bytes
from tests.support.service_process import Ranks, ServeProcess

TOKEN = "abuse-http-test-token-0123456789abcdef"
JOB = "body-job"
CAP = 8                     # P2_HTTP_MAX_CONNECTIONS of the body attacks' service
MB = 1_000_000
MIB = 1024 * 1024
HEADER_TIMEOUT = 3.0        # short, so the tests wait little for the service to drop a connection
IDLE_TIMEOUT = 1.0
SHORT_DEADLINES = {"P2_HTTP_HEADER_TIMEOUT": str(HEADER_TIMEOUT), "P2_HTTP_IDLE_TIMEOUT": str(IDLE_TIMEOUT)}
#: Time allowed on top of a deadline before a test calls the connection held (a loaded machine is slow).
SLACK = 5.0


def start(folder: Path, *extra: str, env: dict[str, str] | None = None, token: bool = True,
          open_files: int | None = None) -> ServeProcess:
    """``p2 serve`` with the dashboard on a free loopback port (``.http_port``)."""
    token_args = ()
    if token:
        (folder / "token").write_text(TOKEN + "\n")
        token_args = ("--token-file", str(folder / "token"))
    return ServeProcess(folder, *token_args, "--no-replan", *extra, env=env, open_files=open_files, dashboard=True)


#: The service's file descriptor limit in the issue's reproduction.
DESCRIPTOR_LIMIT = 256


# ------------------------------------------------------------------ raw HTTP
def head(method: str, path: str, port: int, token: str | None, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(conn: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer (status, headers, body); status 0 when the connection ends without one."""
    conn.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            piece = conn.recv(65536)
            if not piece:
                return 0, {}, data
            data += piece
        top, _, body = data.partition(b"\r\n\r\n")
        status_line, *header_lines = top.decode("latin-1").split("\r\n")
        headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)}
        while len(body) < int(headers.get("content-length", 0)):
            piece = conn.recv(65536)
            if not piece:
                break
            body += piece
    except (ConnectionResetError, TimeoutError):
        if b"\r\n\r\n" not in data:
            return 0, {}, data
    return int(status_line.split()[1]), headers, body


def stream_body(port: int, path: str, size: int, token: str | None, chunked: bool) -> tuple[int, dict, int]:
    """POSTs a JSON-looking body of ``size`` bytes in 1 MiB pieces (announced with Content-Length, or
    chunked), stopping as soon as the service answers or closes; (status, JSON answer, bytes sent)."""
    framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(size)}
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(head("POST", path, port, token, {"Content-Type": "application/json", **framing}))
        piece = b'{"p": "' + b"a" * (MIB - 7)
        try:
            while sent < size and not select.select([conn], [], [], 0)[0]:
                part = piece[:size - sent]
                conn.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                sent += len(part)
            if chunked and sent >= size:
                conn.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, body = read_answer(conn)
    return status, json.loads(body) if body.startswith(b"{") else {"raw": body[:200]}, sent


def request(port: int, method: str, path: str, body: bytes = b"", token: str | None = None,
            content_type: str = "application/json") -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head(method, path, port, token, {"Content-Type": content_type,
                                                     "Content-Length": str(len(body))}) + body)
        status, _, answer = read_answer(conn)
    return status, answer


# ------------------------------------------------------------------ item 2: bodies
@pytest.fixture(scope="module")
def bodies(tmp_path_factory):
    """One service (with one job, ``JOB``) for the body attacks: each measures the growth of the
    service's peak memory over the peak before it, so they can share it."""
    serve = start(tmp_path_factory.mktemp("bodies"), env={"P2_HTTP_MAX_CONNECTIONS": str(CAP)})
    ranks = Ranks(serve.address, JOB, 1, token=TOKEN)
    yield serve
    ranks.close()
    serve.stop()


def attack(serve: ServeProcess, send) -> tuple[object, int, HealthProbe]:
    """What ``send()`` returns, how much the service's peak memory grew meanwhile, the health probe."""
    before = peak_rss_bytes(serve.process.pid)
    with HealthProbe(serve.address) as probe:
        result = send()
    return result, peak_rss_bytes(serve.process.pid) - before, probe


@pytest.mark.parametrize("token", [None, TOKEN], ids=["without-token", "with-token"])
def test_an_announced_120_MB_body_is_refused_before_it_is_read(bodies, token):
    (status, answer, sent), grown, probe = attack(
        bodies, lambda: stream_body(bodies.http_port, f"/api/jobs/{JOB}/plans", 120 * MB, token, chunked=False))
    assert status == 413, answer
    assert answer["field"] == "body" and "64 MiB" in answer["error"], answer
    assert sent < 120 * MB, "the service read the whole body before answering"
    assert grown < 20 * MB, f"the service grew {grown / MB:.0f} MB"
    assert probe.worst() < 1.0, probe.summary()


def test_a_chunked_plan_is_refused_once_it_passes_64_MiB(bodies):
    """With the token, to a job that exists: the body is read, and cut where it passes the limit."""
    (status, answer, sent), grown, probe = attack(
        bodies, lambda: stream_body(bodies.http_port, f"/api/jobs/{JOB}/plans", 96 * MIB, TOKEN, chunked=True))
    assert status == 413, answer
    assert answer["field"] == "body" and "64 MiB" in answer["error"], answer
    assert sent < 96 * MIB
    # What a plan of the largest allowed size costs (the pieces read so far), not twice the body or more.
    assert grown < 100 * MB, f"the service grew {grown / MB:.0f} MB"
    assert probe.worst() < 1.0, probe.summary()
    assert "Traceback" not in bodies.log(), bodies.log()[-3000:]


def test_small_routes_take_small_bodies_chunked_or_not(bodies):
    """Everything but a plan takes 64 KiB, the login form 8 KiB; under the limit a body goes through."""
    port = bodies.http_port
    with HealthProbe(bodies.address) as probe:
        for path, token in (("/login", None), (f"/api/jobs/{JOB}/replan", TOKEN)):
            status, answer, sent = stream_body(port, path, 8 * MIB, token, chunked=True)
            assert status == 413 and answer["field"] == "body", (path, answer)
            assert sent < 8 * MIB
        status, answer = request(port, "POST", "/login", b"token=" + b"x" * 9000,
                                 content_type="application/x-www-form-urlencoded")
        assert status == 413 and b"8 KiB" in answer, answer
        status, answer = request(port, "POST", f"/api/jobs/{JOB}/replan", b'{"reason": "' + b"r" * 70_000 + b'"}',
                                 token=TOKEN)
        assert status == 413 and b"64 KiB" in answer, answer
        # Under the limits the application reads the body and answers as before: not a plan (2 MiB).
        status, answer = request(port, "POST", f"/api/jobs/{JOB}/plans", json.dumps({"pad": "x" * 2 * MIB}).encode(),
                                 token=TOKEN)
        assert status == 422 and json.loads(answer)["field"] == "plan", answer[:300]
    assert probe.worst() < 1.0, probe.summary()
    assert "beyond loopback" not in bodies.log()        # loopback with a token: no warning


def test_the_connection_cap_is_a_setting(bodies):
    port = bodies.http_port
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(CAP)]
    try:
        time.sleep(0.2)                 # all accepted (the service accepts as they come)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as extra:
            status, _, answer = read_answer(extra)
        assert status == 503 and json.loads(answer)["error"], answer
    finally:
        for conn in held:
            conn.close()
    deadline = time.monotonic() + SLACK
    while (status := request(port, "GET", "/healthz")[0]) == 503 and time.monotonic() < deadline:
        time.sleep(0.05)                # until the service has seen them close
    assert status == 200
    assert bodies.log().count(f"{CAP} connections are open") == 1, bodies.log()


# ------------------------------------------------------------------ item 3: connections
@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A service under the issue's descriptor limit (256), with short header and idle deadlines."""
    serve = start(tmp_path_factory.mktemp("guarded"), env=SHORT_DEADLINES, open_files=DESCRIPTOR_LIMIT)
    yield serve
    serve.stop()


def outcome(conn: socket.socket, deadline: float) -> str:
    """What the service did with a connection we never finished: 'refused' (a 503), 'closed', or 'open'."""
    conn.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        data = conn.recv(4096)
    except ConnectionResetError:
        return "closed"
    except TimeoutError:
        return "open"
    return "refused" if data.startswith(b"HTTP/1.1 503") else "closed" if not data else f"answered {data[:40]!r}"


def test_hundreds_of_idle_sockets_under_a_low_descriptor_limit(guarded, tmp_path):
    """The cap (a quarter of 256) holds 64 and refuses the rest at once; the 64, silent, are closed at
    the idle timeout (a head that trickles in is cut at the header timeout, below)."""
    port = guarded.http_port
    (tmp_path / "token").write_text(TOKEN)
    with HealthProbe(guarded.address) as probe:
        held = []
        for _ in range(300):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")       # never finished
            held.append(conn)
        opened = time.monotonic()
        with grpc.insecure_channel(guarded.address) as channel:          # while they are held
            listed = optimizer_pb2_grpc.OptimizerStub(channel).ListJobs(api.ListJobsRequest(), timeout=5,
                                                                          metadata=bearer(TOKEN))
        assert listed is not None
        cli = p2("jobs", "list", "--service", guarded.address, "--token-file", str(tmp_path / "token"))
        assert cli.returncode == 0, cli.stderr
        outcomes = [outcome(conn, opened + HEADER_TIMEOUT + SLACK) for conn in held]
        for conn in held:
            conn.close()
        status, page = request(port, "GET", "/")
    assert probe.worst() < 1.0, probe.summary()
    counts = {kind: outcomes.count(kind) for kind in set(outcomes)}
    assert set(counts) <= {"refused", "closed"}, counts
    assert counts.get("refused", 0) >= 300 - 64 and counts.get("closed", 0) >= 1, counts
    assert status == 200, page[:300]
    log = guarded.log()
    assert "Too many open files" not in log and len(log) < 8_000, log[-3000:]
    assert log.count("64 connections are open") == 1, log


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_header_timeout(guarded):
    """Never silent for the idle timeout, so only the header deadline can end it."""
    with socket.create_connection(("127.0.0.1", guarded.http_port), timeout=5) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ")
        deadline = time.monotonic() + HEADER_TIMEOUT + SLACK
        closed = False
        while not closed and time.monotonic() < deadline:
            try:
                conn.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            readable = select.select([conn], [], [], IDLE_TIMEOUT / 4)[0]
            if readable:
                try:
                    closed = conn.recv(4096) == b""
                except ConnectionResetError:
                    closed = True
        assert closed, "the service kept a connection whose head never ended"


def test_keep_alive_between_requests_and_idle_connections_closed(guarded):
    port = guarded.http_port
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    client.request("GET", "/healthz")
    first = client.getresponse()
    assert first.status == 200 and first.read() == b"ok"
    sock = client.sock
    time.sleep(IDLE_TIMEOUT / 4)
    client.request("GET", "/api/jobs")
    second = client.getresponse()
    assert second.status == 200 and "jobs" in json.loads(second.read())
    assert client.sock is sock, "the second request needed a new connection"
    client.close()
    # A kept-alive connection that stays silent is closed after the idle timeout.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head("GET", "/healthz", port, None, {}))
        assert read_answer(conn)[0] == 200
        assert outcome(conn, time.monotonic() + 2 * IDLE_TIMEOUT + SLACK) == "closed"


def test_a_body_that_stops_is_dropped_after_the_idle_timeout(guarded):
    port = guarded.http_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(head("POST", "/api/jobs/none/replan", port, TOKEN, {"Content-Type": "application/json",
                                                                        "Content-Length": "100"}) + b'{"reason"')
        assert outcome(conn, time.monotonic() + 2 * IDLE_TIMEOUT + SLACK) == "closed"
    assert "Traceback" not in guarded.log(), guarded.log()[-3000:]


# ------------------------------------------------------------------ item 7: TLS and the warning
@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    if not have_openssl():
        pytest.skip(MISSING)
    return make_certificates(tmp_path_factory.mktemp("certs"))


def https_get(port: int, path: str, context: ssl.SSLContext) -> tuple[int, bytes]:
    client = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        client.request("GET", path)
        answer = client.getresponse()
        return answer.status, answer.read()
    finally:
        client.close()


def test_the_dashboard_speaks_tls_with_the_grpc_certificate(tmp_path, certificates):
    serve = start(tmp_path, "--tls-cert", str(certificates.server_cert), "--tls-key", str(certificates.server_key),
                  env={"P2_HTTP_HEADER_TIMEOUT": "1"})
    port = serve.http_port
    try:
        trusting = ssl.create_default_context(cafile=str(certificates.ca))
        assert https_get(port, "/healthz", trusting) == (200, b"ok")
        with pytest.raises(ssl.SSLCertVerificationError):       # the certificate is the CA's, not the system's
            https_get(port, "/healthz", ssl.create_default_context())
        status, _ = request(port, "GET", "/healthz")              # plain HTTP gets no answer
        assert status == 0
        with socket.create_connection(("127.0.0.1", port), timeout=10) as idle:     # never starts its handshake
            assert outcome(idle, time.monotonic() + 1 + SLACK) == "closed"
        assert f"dashboard on https://127.0.0.1:{port}/" in serve.log()
    finally:
        serve.stop()


def test_the_dashboard_with_mutual_tls_requires_a_client_certificate(tmp_path, certificates):
    serve = start(tmp_path, "--tls-cert", str(certificates.server_cert), "--tls-key", str(certificates.server_key),
                  "--tls-ca", str(certificates.ca))
    try:
        anonymous = ssl.create_default_context(cafile=str(certificates.ca))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            https_get(serve.http_port, "/healthz", anonymous)
        known = ssl.create_default_context(cafile=str(certificates.ca))
        known.load_cert_chain(str(certificates.client_cert), str(certificates.client_key))
        assert https_get(serve.http_port, "/healthz", known) == (200, b"ok")
    finally:
        serve.stop()


def test_one_warning_line_when_listening_beyond_loopback_without_a_token(tmp_path):
    exposed = ServeProcess(tmp_path, "--no-replan", "--listen", "0.0.0.0:0", "--http", "off")
    try:
        log = exposed.log()
    finally:
        exposed.stop()
    warnings = [line for line in log.splitlines() if "beyond loopback" in line]
    assert len(warnings) == 1, log
    assert "gRPC on every interface" in warnings[0] and "--token-file" in warnings[0], warnings


@pytest.mark.parametrize(("listeners", "token", "tls", "says"), [
    ({"gRPC": "127.0.0.1", "the dashboard": "::1"}, False, False, None),
    ({"gRPC": "localhost"}, False, False, None),
    ({"gRPC": "0.0.0.0"}, True, True, None),
    ({"gRPC": "0.0.0.0"}, False, True, "gRPC on every interface beyond loopback without a token:"),
    ({"gRPC": "127.0.0.1", "the dashboard": "10.1.2.3"}, False, False,
     "the dashboard on 10.1.2.3 beyond loopback without a token or TLS"),
    ({"gRPC": "::", "the dashboard": "0.0.0.0"}, True, False,
     "gRPC on every interface and the dashboard on every interface beyond loopback without TLS"),
    ({"gRPC": "node7.cluster"}, True, False, "gRPC on node7.cluster beyond loopback without TLS"),
])
def test_the_exposure_warning(listeners, token, tls, says):
    warning = exposure_warning(listeners, token=token, tls=tls)
    if says is None:
        assert warning is None
    else:
        assert warning is not None and says in warning and "\n" not in warning, warning


def test_the_grpc_listen_host():
    assert [listen_host(a) for a in ("127.0.0.1:50051", "[::1]:0", "0.0.0.0:1", ":50051", "unix:/run/p2.sock")] == \
        ["127.0.0.1", "::1", "0.0.0.0", "", None]
