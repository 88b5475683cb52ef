"""Issue 30, item 7 (the dashboard's session and API contract), item 2 (the token before any
body) and item 1 (request work off the event loop): what a client without the token can do to
the dashboard, on a real service.

* The login session: the cookie holds a random id (never the token), ``HttpOnly``,
  ``SameSite=Strict``, ``Secure`` on TLS; the page never sees the token; a mutation by session
  needs the page's CSRF value; logout ends the session on the server; sessions expire and are
  bounded; login attempts are rate-limited (429, ``Retry-After``).
* The Host allowlist (DNS rebinding) and the Origin of mutations; CSP and frame-ancestors on
  every answer.
* A token shorter than 16 characters is refused with how to make one.
* Every error body is ``{"error", "field"?}``; OpenAPI states the job id's pattern and every
  status; jobs are paginated and deleted with the token.
* The token is checked before a body is read (a real ``p2 serve``: the 401 arrives before the
  client sent the body); request work runs off the loop with a deadline while gRPC health
  keeps answering, a large plan in a child process the deadline kills; plan answers are bounded.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import re
import socket
import time
from pathlib import Path

import pytest

from optimizer_service.dashboard import plan_reading
from optimizer_service.dashboard.hosts import HostAllowlist
from optimizer_service.dashboard.offload import Offloader, OverloadedError
from optimizer_service.dashboard.sessions import LoginLimiter, LoginRate, SessionStore
from optimizer_service.errors import InvalidInputError
from optimizer_service.plan import Plan
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import comm_op
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.service.auth import read_token
from optimizer_service.service.store.validation import JOB_ID_PATTERN
from optimizer_service.settings import Settings
from optimizer_service.wire.credentials import AuthSetupError
from tests.dashboard.conftest import TOKEN, running_dashboard
from tests.support.cli import p2
from tests.support.responsiveness import HealthProbe
from tests.support.service_process import Ranks, ServeProcess

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CSRF = re.compile(r'<meta name="p2-csrf" content="([^"]+)">')
TEMPLATES = Path(__file__).resolve().parents[2] / "optimizer_service" / "dashboard" / "templates"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def log_in(client, token: str = TOKEN, next: str = "/") -> str:
    """Logs the test client in; the page's CSRF value."""
    answer = client.post("/login", data={"token": token, "next": next}, follow_redirects=False)
    assert answer.status_code == 303, answer.text
    return CSRF.search(client.get("/").text).group(1)


def session_cookie(answer) -> str:
    """The answer's Set-Cookie of the session (another one clears the old token cookie)."""
    return next(c for c in answer.headers.get_list("set-cookie") if c.startswith("p2_session="))


# ------------------------------------------------------------------ pure parts
def test_sessions_slide_expire_and_are_bounded():
    clock = Clock()
    store = SessionStore(clock=clock, idle=60, lifetime=300, capacity=3)
    first, session = store.create()
    assert len(first) >= 40 and store.get(first) is session and len(session.csrf) >= 40
    clock.now += 50
    assert store.get(first) is session                  # used: its idle time starts again
    clock.now += 50
    assert store.get(first) is session
    clock.now += 61
    assert store.get(first) is None and len(store) == 0  # idle too long
    kept, _ = store.create()
    for _ in range(200):                                 # a fixed lifetime, however busy
        clock.now += 10
        if store.get(kept) is None:
            break
    assert clock.now - 1161 <= 310 and store.get(kept) is None
    ids = [store.create()[0] for _ in range(5)]
    assert len(store) == 3 and store.get(ids[0]) is None and store.get(ids[-1]) is not None
    assert store.end(ids[-1]) and store.get(ids[-1]) is None and not store.end(ids[-1])
    assert store.get("x" * 10_000) is None and store.get("") is None and store.get(None) is None


def test_login_attempts_are_limited_per_client_and_in_all():
    clock = Clock()
    limiter = LoginLimiter(LoginRate(per_client_burst=3, per_client_per_minute=6, global_burst=5,
                                     global_per_minute=3, clients=4), clock=clock)
    assert [limiter.check("a") for _ in range(3)] == [0, 0, 0]
    assert limiter.check("a") == 10                      # 6 a minute: one every 10 s
    assert [limiter.check("b") for _ in range(2)] == [0, 0]
    assert limiter.check("c") == 20                      # in all 5 at once, then 3 a minute: the bucket is empty
    clock.now += 20
    assert limiter.check("c") == 0 and limiter.check("b") == 20
    for name in "defghijk":                              # a guesser on many addresses: remembered, bounded
        limiter.check(name)
    assert len(limiter._clients) <= 4


def test_the_host_allowlist():
    hosts = HostAllowlist(("localhost", "127.0.0.1:8080", "::1", "Dash.Example.org"))
    assert hosts.allows("localhost:1234") and hosts.allows("LOCALHOST") and hosts.allows("127.0.0.1:8080")
    assert hosts.allows("[::1]:80") and hosts.allows("dash.example.org.") and hosts.allows("dash.example.org:443")
    assert not hosts.allows("127.0.0.1:8081") and not hosts.allows("evil.example") and not hosts.allows(None)
    assert not hosts.allows("localhost.evil.example") and not hosts.allows("localhost:99999")
    assert not hosts.allows("user@localhost") and not hosts.allows("")
    assert hosts.allows_origin("http://localhost:3000") and hosts.allows_origin("https://dash.example.org")
    assert not hosts.allows_origin("null") and not hosts.allows_origin("http://evil.example")
    assert not hosts.allows_origin("file://localhost") and HostAllowlist(("*",)).allows("anything")
    with pytest.raises(ValueError):
        HostAllowlist(("bad host",))


def test_a_short_token_is_refused_with_how_to_make_one(tmp_path):
    short = tmp_path / "token"
    short.write_text("tok\n")
    with pytest.raises(AuthSetupError, match="openssl rand -hex 32"):
        read_token(short)
    with pytest.raises(AuthSetupError, match="P2_TOKEN holds a token of 5 characters"):
        Settings(token="12345").service_token()
    assert Settings(token="x" * 16).service_token() == "x" * 16
    served = p2("serve", "--listen", "127.0.0.1:0", "--http", "off", "--token-file", str(short),
                "--store", f"sqlite:///{tmp_path / 'service.db'}", timeout=60)
    lines = served.stderr.strip().splitlines()
    assert served.returncode == 2 and len(lines) == 1 and "fewer than the 16 required" in lines[0], served.stderr
    assert "secrets.token_hex(32)" in lines[0] and not (tmp_path / "service.db").exists()


def test_the_templates_have_no_inline_script():
    """The CSP (script-src 'self') would block it: every script is a file."""
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), template.name
        assert not re.search(r"\son[a-z]+\s*=", text), f"{template.name} has an inline event handler"
        assert "style=" not in text, f"{template.name} has an inline style"


# ------------------------------------------------------- the in-process dashboard
def test_the_session_cookie_holds_no_token_and_logout_ends_it(tmp_path):
    with running_dashboard(tmp_path) as dashboard:
        client = dashboard.client
        dashboard.job("alpha", 2, telemetry=False)
        page = client.get("/jobs/alpha")
        assert 'id="controls-login"' in page.text and 'id="controls"' not in page.text   # log in to act
        assert "sessionStorage" not in client.get("/static/dashboard.js").text

        answer = client.post("/login", data={"token": TOKEN, "next": "/jobs/alpha"}, follow_redirects=False)
        assert answer.status_code == 303 and answer.headers["location"] == "/jobs/alpha"
        cookie = session_cookie(answer)
        assert TOKEN not in answer.headers["set-cookie"]
        assert {"httponly", "samesite=strict", "path=/"} <= {part.strip().lower() for part in cookie.split(";")}
        assert "secure" not in cookie.lower()                          # plain HTTP here
        session_id = client.cookies["p2_session"]
        page = client.get("/jobs/alpha")
        assert TOKEN not in page.text and 'id="controls"' in page.text and 'id="token"' not in page.text
        csrf = CSRF.search(page.text).group(1)

        assert client.post("/api/jobs/alpha/replan", json={}).status_code == 403            # no CSRF value
        assert client.post("/api/jobs/alpha/replan", json={}, headers={"X-P2-CSRF": "x" + csrf}).status_code == 403
        acted = client.post("/api/jobs/alpha/replanning", json={"paused": True}, headers={"X-P2-CSRF": csrf})
        assert acted.status_code == 200 and acted.json()["policy"]["paused"] is True
        cross = client.post("/api/jobs/alpha/replanning", json={"paused": False},
                            headers={"X-P2-CSRF": csrf, "Origin": "http://evil.example"})
        assert cross.status_code == 403 and cross.json()["field"] == "Origin"

        assert client.post("/logout", data={"csrf": "wrong"}, follow_redirects=False).status_code == 403
        out = client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        assert out.status_code == 303 and session_cookie(out).startswith('p2_session="";')
        client.cookies.set("p2_session", session_id)               # the old id, replayed: dead on the server
        replayed = client.post("/api/jobs/alpha/replanning", json={"paused": False}, headers={"X-P2-CSRF": csrf})
        assert replayed.status_code == 401 and "log in" in replayed.json()["error"]
        assert client.get("/api/jobs/alpha").json()["policy"]["paused"] is True
    (tmp_path / "tls").mkdir()
    with running_dashboard(tmp_path / "tls", tls=True) as dashboard:
        answer = dashboard.client.post("/login", data={"token": TOKEN}, follow_redirects=False)
        assert "secure" in {part.strip().lower() for part in session_cookie(answer).split(";")}


def test_login_is_rate_limited_with_a_clear_answer(tmp_path):
    rate = LoginRate(per_client_burst=3, per_client_per_minute=2)
    with running_dashboard(tmp_path, login_rate=rate) as dashboard:
        client = dashboard.client
        for _ in range(3):
            assert client.post("/login", data={"token": "wrong-but-long-enough"}).status_code == 401
        limited = client.post("/login", data={"token": TOKEN}, follow_redirects=False)   # the right one too
        assert limited.status_code == 429 and 20 <= int(limited.headers["retry-after"]) <= 30
        assert re.search(r"too many login attempts; try again in \d+ s", limited.text)
        assert "p2_session" not in limited.headers.get("set-cookie", "")
        assert client.get("/api/jobs", headers=AUTH).status_code == 200    # API clients are not limited


def test_unknown_hosts_are_refused_and_every_answer_is_guarded(tmp_path):
    with running_dashboard(tmp_path) as dashboard:
        client = dashboard.client
        for path in ("/", "/api/jobs", "/metrics", "/api/jobs/alpha/replan", "/no/page"):
            refused = client.get(path, headers={"Host": "evil.example"})
            assert refused.status_code == 421, path
            assert refused.json() == {"error": refused.json()["error"], "field": "Host"}
            assert "'evil.example' is not a name this dashboard answers to" in refused.json()["error"]
            assert "P2_DASHBOARD_HOSTS" in refused.json()["error"]
        assert client.get("/healthz", headers={"Host": "10.1.2.3:8080"}).text == "ok"     # probes dial addresses
        assert client.get("/api/jobs", headers={"Host": "localhost:8080"}).status_code == 200
        login = client.post("/login", data={"token": TOKEN}, headers={"Origin": "http://evil.example"})
        assert login.status_code == 403 and "cross-site" in login.text

        answers = [client.get("/"), client.get("/api/jobs"), client.get("/api/jobs/none"), client.get("/nope"),
                   client.get("/static/dashboard.js"), client.get("/healthz"), client.get("/login"),
                   client.get("/", headers={"Host": "evil.example"}), client.post("/api/jobs/x/replan")]
        for answer in answers:
            policy = answer.headers.get("content-security-policy", "")
            assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy, answer.request.url
            assert "script-src 'self'" in policy and "unsafe-inline" not in policy
            assert answer.headers["x-frame-options"] == "DENY" and answer.headers["x-content-type-options"] == "nosniff"


def test_every_error_has_the_one_shape(tmp_path):
    with running_dashboard(tmp_path) as dashboard:
        client = dashboard.client
        dashboard.job("alpha", 2, telemetry=False)

        def shape(answer, status: int, field: str | None = None) -> str:
            assert answer.status_code == status, (answer.status_code, answer.text)
            body = answer.json()
            assert set(body) == ({"error", "field"} if field else {"error"}) and "\n" not in body["error"], body
            assert body.get("field") == field
            return body["error"]

        shape(client.post("/api/jobs/alpha/plans", content=b"{nope", headers=AUTH), 400, "body")
        shape(client.post("/api/jobs/alpha/replan", content=b"\xff\xfe", headers=AUTH), 400, "body")
        shape(client.post("/api/jobs/alpha/replan", json=[1], headers=AUTH), 422, "body")
        shape(client.post("/api/jobs/alpha/plans", json=[], headers=AUTH), 422, "plan")
        shape(client.post("/api/jobs/alpha/replanning", json={"paused": "maybe"}, headers=AUTH), 422, "paused")
        assert "405" not in shape(client.get("/api/jobs/alpha/replan"), 405)
        assert client.get("/api/jobs/alpha/replan").headers["allow"] == "POST"
        shape(client.put("/api/jobs"), 405)
        shape(client.get("/api/no/such/route"), 404)
        shape(client.get("/api/jobs/-bad-id"), 422, "job_id")
        shape(client.get("/api/jobs", params={"limit": 5000}), 422, "limit")
        shape(client.get("/api/jobs", params={"after": "a/b"}), 422, "after")
        shape(client.post("/api/jobs/alpha/replan", json={}), 401)
        assert client.post("/api/jobs/alpha/replan", json={}).headers["www-authenticate"] == "Bearer"
        shape(client.post("/api/jobs/alpha/replan", json={}, headers={"Authorization": "Bearer nope"}),
              401, "Authorization")
        shape(client.post("/api/jobs/alpha/replan", content=b" " * (65 * 1024), headers=AUTH), 413, "body")
        shape(client.delete("/api/jobs/ghost", headers=AUTH), 404)


def test_openapi_states_the_real_patterns_and_statuses(tmp_path):
    with running_dashboard(tmp_path) as dashboard:
        document = dashboard.client.get("/openapi.json").json()
    assert "HTTPValidationError" not in json.dumps(document)      # FastAPI's {"detail"} is answered nowhere
    error = document["components"]["schemas"]["ErrorBody"]
    assert error["required"] == ["error"] and set(error["properties"]) == {"error", "field"}
    patterns = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            statuses = set(operation["responses"])
            if path.startswith("/api/"):
                assert {"413", "421", "503"} <= statuses, (method, path, statuses)
                assert ("422" in statuses) == bool(operation.get("parameters") or "requestBody" in operation)
                for status in statuses - {"200", "202"}:
                    schema = operation["responses"][status]["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
            if method in ("post", "delete"):
                assert {"401", "403", "404", "409"} <= statuses, (method, path)
            if method == "post":
                assert "400" in statuses and "requestBody" in operation, (method, path)
            if method == "delete":
                assert "400" not in statuses and "requestBody" not in operation
            patterns |= {p["schema"].get("pattern") for p in operation.get("parameters", ()) if p["name"] == "job_id"}
    assert patterns == {f"^{JOB_ID_PATTERN.pattern}$"}
    assert "429" in document["paths"]["/api/explore"]["get"]["responses"]
    assert {"limit", "after"} <= {p["name"] for p in document["paths"]["/api/jobs"]["get"]["parameters"]}
    assert document["paths"]["/api/jobs/{job_id}"]["delete"]


def test_jobs_are_paginated_and_deleted_with_the_token(tmp_path):
    with running_dashboard(tmp_path) as dashboard:
        client = dashboard.client
        for job in ("a1", "b2", "c3"):
            dashboard.job(job, 1, telemetry=False)
        first = client.get("/api/jobs", params={"limit": 2}).json()
        assert [j["job_id"] for j in first["jobs"]] == ["a1", "b2"] and first["next"] == "b2"
        rest = client.get("/api/jobs", params={"limit": 2, "after": first["next"]}).json()
        assert [j["job_id"] for j in rest["jobs"]] == ["c3"] and rest["next"] == ""
        page = client.get("/", params={"after": "a1"})
        assert 'data-job="b2"' in page.text and 'data-job="a1"' not in page.text

        assert client.delete("/api/jobs/b2").status_code == 401
        refused = client.delete("/api/jobs/b2", headers=AUTH)
        assert refused.status_code == 409 and "connected" in refused.json()["error"]
        gone = client.delete("/api/jobs/b2", params={"force": "true"}, headers=AUTH)
        assert gone.status_code == 200 and gone.json() == {"job_id": "b2", "deleted": True}
        assert [j["job_id"] for j in client.get("/api/jobs").json()["jobs"]] == ["a1", "c3"]
        assert client.delete("/api/jobs/b2", headers=AUTH).status_code == 404
        assert client.get("/api/jobs/b2").status_code == 404


#: A synthesis that takes over a second here (the explorer's limits allow it); the deadline below is far shorter.
SLOW_EXPLORE = {"topology": "gcp-a100-4n", "axes": "2,2,2,2,4", "reduce": "0,1,2,3,4", "max_size": 8,
                "placements": 32, "programs": 16}


def test_request_work_runs_off_the_loop_with_a_deadline(tmp_path):
    with running_dashboard(tmp_path, deadline_seconds=0.2) as dashboard:
        client = dashboard.client
        with HealthProbe(f"127.0.0.1:{dashboard.service.port}", interval=0.02) as probe:
            started = time.monotonic()
            late = client.get("/api/explore", params=SLOW_EXPLORE)
            took = time.monotonic() - started
            time.sleep(0.3)
        assert late.status_code == 503 and late.json()["error"].startswith("the synthesis took longer than 0.2 s")
        assert late.headers["retry-after"] == "1" and took < 5
        assert probe.worst() < 1.0, probe.summary()
        dashboard.until(lambda: client.get("/api/topologies/gcp-v100-2n").status_code == 200, timeout=60,
                        what="the pool to be free again")


# ------------------------------------------------------------ a real p2 serve
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    (folder / "token").write_text(TOKEN)
    serve = ServeProcess(folder, "--token-file", str(folder / "token"), "--no-replan", dashboard=True)
    try:
        yield serve, serve.http_port
    finally:
        serve.stop()


def raw_request(port: int, head: str, body: bytes = b"", timeout: float = 10.0) -> tuple[int, bytes, float]:
    """Sends ``head`` (and ``body`` only after the answer, if any, has begun); ``(status, answer, seconds to
    the answer)``."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        started = time.monotonic()
        sock.sendall(head.encode())
        if body:
            sock.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        seconds = time.monotonic() - started
        head_text, _, rest = answer.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head_text.lower()).group(1))
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return int(head_text.split()[1]), rest, seconds


@pytest.mark.slow
def test_the_token_is_checked_before_any_body_is_read(served, tmp_path):
    serve, port = served
    announced = 2_000_000
    head = (f"POST /api/jobs/alpha/plans HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {announced}\r\n{{auth}}Connection: close\r\n\r\n")
    ranks = Ranks(serve.address, "alpha", 1, token=TOKEN)
    try:
        with HealthProbe(serve.address) as probe:
            # No byte of the body is sent: the answer can only come from a check that reads none of it.
            for _ in range(20):
                status, body, seconds = raw_request(port, head.format(auth=""))
                assert status == 401 and seconds < 5 and json.loads(body)["error"].startswith("this action needs")
            status, body, _ = raw_request(port, head.format(auth="Authorization: Bearer wrong-token-wrong-token\r\n"))
            assert status == 401 and json.loads(body) == {"error": "wrong token", "field": "Authorization"}
            # With the token the same announced body is read and parsed: the 400 shows what the 401s spared.
            status, body, _ = raw_request(port, head.format(auth=f"Authorization: Bearer {TOKEN}\r\n"),
                                          b"{" * announced)
            assert status == 400 and json.loads(body)["field"] == "body", body
        assert probe.worst() < 1.0, probe.summary()
    finally:
        ranks.close()
    # The whole 2 MB that is not JSON, sent without the token: refused as unauthenticated, never parsed.
    with running_dashboard(tmp_path) as dashboard:
        dashboard.job("alpha", 1, telemetry=False)
        refused = dashboard.client.post("/api/jobs/alpha/plans", content=b"{" * announced,
                                        headers={"Content-Type": "application/json"})
        assert refused.status_code == 401 and "log in" in refused.json()["error"]


def many_ops_plan(ops: int) -> str:
    """A plan of ``ops`` one-rank all-reduces (a few hundred bytes each)."""
    items = tuple(OpPlan.of(OpKey(seq, "all_reduce", 4096, (0,)), comm_op(Collective.ALL_REDUCE, range(1), 1024),
                            base=seq) for seq in range(ops))
    return Plan(1, 1, {0: None}, items).to_json()


def test_a_large_plan_is_read_in_a_child_process_the_deadline_kills():
    offloader = Offloader()

    async def scenario():
        started = time.monotonic()
        with pytest.raises(OverloadedError, match="sleeping took longer than 0.5 s"):
            await offloader.run_isolated("sleeping", time.sleep, 60, deadline=0.5)
        assert time.monotonic() - started < 10 and multiprocessing.active_children() == []     # killed, reaped
        with pytest.raises(InvalidInputError, match="the plan is not JSON"):
            await offloader.run_isolated("reading", plan_reading.diff, None, "{nope")
        return await offloader.run_isolated("reading", plan_reading.diff, None, many_ops_plan(3))

    answer = asyncio.run(scenario())
    assert answer["counts"]["added"] == 3 and answer["ops_listed"] == 3


def test_plan_views_are_bounded_and_a_large_one_never_stalls_the_loop(tmp_path):
    with running_dashboard(tmp_path) as dashboard:
        client = dashboard.client
        dashboard.job("wide", 1, telemetry=False)
        text = many_ops_plan(3000)
        submitted = client.post("/api/jobs/wide/plans", content=text.encode(), headers=AUTH)
        assert submitted.status_code == 202, submitted.text
        offloader = client.app.state.offloader
        offloader.isolate_bytes = len(text) + 1                 # read on a thread
        on_thread = client.get("/api/jobs/wide/plans/1").json()
        offloader.isolate_bytes = 0                             # read in a child process
        with HealthProbe(f"127.0.0.1:{dashboard.service.port}", interval=0.02) as probe:
            in_child = client.get("/api/jobs/wide/plans/1").json()
            diff = client.get("/api/jobs/wide/plans/1/diff").json()
            page = client.get("/jobs/wide/plans/1")
        assert probe.worst() < 1.0, probe.summary()
    assert in_child["plan"] == on_thread["plan"]            # (its 2PC record may move on between the two)
    assert in_child["plan"]["op_count"] == 3000 and in_child["plan"]["ops_listed"] == len(in_child["plan"]["ops"]) == 2000
    assert diff["counts"]["added"] == 3000 and diff["ops_listed"] == len(diff["ops"]) == 2000
    assert page.status_code == 200 and "Showing the first 2000 of 3000 comm-ops" in page.text
