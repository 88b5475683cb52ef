"""No single point of failure: several ``p2 serve`` on one Redis store elect a
leader with a lease in the store (optimizer_service/service/leadership.py);
one service per SQLite file.

The lease's operations on a real ``redis-server``, then real ``p2 serve``
processes with a short lease (3 s, renewed every 0.5 s, given up after 2 s):
a standby answers health checks and names the leader; the CLI finds the
leader among several addresses; the standby takes over when the leader is
SIGKILLed; a standby's dashboard port serves /metrics (``p2_service_leader``)
and /healthz and refuses the rest naming the leader, then serves everything
on the same port once it leads; a leader cut off from Redis stops before its
lease can pass; a leader paused past its lease decides nothing once it resumes
(the epoch fences it); a second service on an SQLite file is refused with one
line, and its dashboard's port is let go.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import urlsplit

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from optimizer_service.plan import Plan
from optimizer_service.service.leadership import StoreInUseError
from optimizer_service.service.server import Service, ServiceConfig
from optimizer_service.service.store import open_store
from optimizer_service.wire.leader import LEADER_METADATA_KEY
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc
from tests.support.cli import ROOT, p2
from tests.support.service_process import Ranks, ServeProcess, free_port, health
from tests.support.tcp_proxy import TcpProxy

TTL, RENEW, GIVE_UP = 3.0, 0.5, 2.0
LEASE_ENV = {"P2_LEASE_SECONDS": str(TTL), "P2_LEASE_RENEW_SECONDS": str(RENEW),
             "P2_LEASE_GIVE_UP_SECONDS": str(GIVE_UP)}


@pytest.fixture
def redis_url(redis_server) -> str:
    return f"{redis_server.url}?prefix=lead-{uuid.uuid4().hex[:10]}:"


def _until(predicate, timeout: float, what: str) -> float:
    """Wait until ``predicate()``; the monotonic time it first held."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic()


# ----------------------------------------------------------------- the lease in the store
def test_the_lease_is_taken_with_the_next_epoch_and_kept_from_others(redis_url):
    with open_store(redis_url) as store:
        assert store.lease_holder() is None
        epoch, holder = store.take_lease("a:1", 30)
        assert (epoch, holder) == (1, "a:1") and store.lease_holder() == "a:1"
        assert store.take_lease("b:1", 30) == (None, "a:1")         # held by another: refused, no epoch taken
        assert store.renew_lease("a:1", 1, 30) and not store.renew_lease("b:1", 1, 30)
        assert store.take_lease("a:1", 30) == (2, "a:1")            # a restart at the same address: at once
        assert not store.renew_lease("a:1", 1, 30)                  # the old term's renewal fails
        assert not store.release_lease("b:1", 2) and store.release_lease("a:1", 2)
        assert store.take_lease("b:1", 30) == (3, "b:1")            # released: free at once


def test_an_expired_lease_passes_to_a_standby_and_the_old_term_cannot_renew(redis_url):
    with open_store(redis_url) as store:
        assert store.take_lease("a:1", 0.2) == (1, "a:1")
        time.sleep(0.3)
        assert store.lease_holder() is None
        assert store.take_lease("b:1", 30) == (2, "b:1")
        assert not store.renew_lease("a:1", 1, 30)


def test_a_newer_epoch_taken_outside_the_lease_stops_its_renewal(redis_url):
    """``next_epoch`` (an older service version, or an operator) fences the leader: its next
    renewal fails, so it stops at once instead of deciding into a fence."""
    with open_store(redis_url) as store:
        assert store.take_lease("a:1", 30) == (1, "a:1")
        assert store.next_epoch() == 2
        assert not store.renew_lease("a:1", 1, 30)


# ----------------------------------------------------------------- real services
def _stop(ranks: Ranks | None, *services: ServeProcess) -> None:
    if ranks is not None:
        ranks.close()
    for service in services:
        if service.process.poll() is None:
            service.stop()


def _refusal(address: str) -> grpc.RpcError:
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as raised:
        optimizer_pb2_grpc.OptimizerStub(channel).ListJobs(api.ListJobsRequest(), timeout=5)
    return raised.value


@pytest.mark.slow
def test_a_standby_names_the_leader_and_takes_over_when_it_is_killed(tmp_path, redis_url):
    leader = ServeProcess(tmp_path, env=LEASE_ENV, store=redis_url)
    standby_port = free_port()
    standby = ServeProcess(tmp_path, env=LEASE_ENV, store=redis_url, port=standby_port, standby=True)
    ranks = None
    try:
        assert (health(leader.address), health(leader.address, "liveness")) == ("SERVING", "SERVING")
        assert (health(standby.address), health(standby.address, "liveness")) == ("NOT_SERVING", "SERVING")
        refused = _refusal(standby.address)
        assert refused.code() is grpc.StatusCode.UNAVAILABLE
        assert f"standby; the leader is at {leader.address}" in refused.details()
        assert (LEADER_METADATA_KEY, leader.address) in tuple(refused.trailing_metadata())
        ranks = Ranks(leader.address, "ha", 2)
        both = f"{standby.address},{leader.address}"                   # the standby first: the CLI follows
        listed = p2("jobs", "list", "--service", both, "--json", "-")
        assert listed.returncode == 0, listed.stderr
        assert [job["job_id"] for job in json.loads(listed.stdout)["jobs"]] == ["ha"]
        ranks.close()
        ranks = None
        leader.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        ready = _until(lambda: health(standby.address) == "SERVING", 3 * TTL, "the standby to lead")
        # The lease passes once it expires: at most TTL after the leader's last renewal, plus a retry.
        assert ready - killed <= TTL + 2 * RENEW + 1.5, ready - killed
        listed = p2("jobs", "list", "--service", f"{leader.address},{standby.address}", "--json", "-")
        assert listed.returncode == 0, listed.stderr
        assert [job["job_id"] for job in json.loads(listed.stdout)["jobs"]] == ["ha"]    # recovered from Redis
        assert "leads with epoch 2" in standby.log()
    finally:
        _stop(ranks, leader, standby)


def _get(port: int, path: str) -> tuple[int, str, str]:
    """``(status, content type, body)`` of GET ``path`` on the dashboard at ``port`` (0: no answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers.get("content-type", ""), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("content-type", ""), error.read().decode()
    except OSError:
        return 0, "", ""


def _metrics(port: int) -> dict[tuple[str, tuple], float]:
    status, _, text = _get(port, "/metrics")
    assert status == 200, text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.slow
def test_a_standbys_dashboard_answers_metrics_and_health_and_serves_all_once_it_leads(tmp_path, redis_url):
    leader = ServeProcess(tmp_path, env=LEASE_ENV, store=redis_url, dashboard=True)
    http = free_port()
    standby = ServeProcess(tmp_path, "--http", f"127.0.0.1:{http}", env=LEASE_ENV, store=redis_url,
                           port=free_port(), standby=True)
    ranks = Ranks(leader.address, "seen", 2)
    try:
        _until(lambda: _get(http, "/healthz")[0] == 200, 30, "the standby's dashboard")
        standby_metrics, leader_metrics = _metrics(http), _metrics(leader.http_port)
        assert standby_metrics[("p2_service_leader", ())] == 0 and leader_metrics[("p2_service_leader", ())] == 1
        assert leader_metrics[("p2_ranks_connected", (("job_id", "seen"),))] == 2
        assert not [name for name, labels in standby_metrics if dict(labels).get("job_id")], standby_metrics
        status, kind, body = _get(http, "/healthz")
        assert (status, json.loads(body)) == (200, {"status": "standby", "leader": leader.address}), body
        assert _get(leader.http_port, "/healthz")[::2] == (200, "ok")
        status, kind, body = _get(http, "/")
        assert status == 503 and kind.startswith("text/html") and f"the leader is at {leader.address}" in body
        status, kind, body = _get(http, "/api/jobs")
        assert status == 503 and kind == "application/json", body
        assert json.loads(body)["leader"] == leader.address and leader.address in json.loads(body)["error"]
        assert "service: dashboard on" in standby.log() and "until it leads" in standby.log()

        ranks.close()
        ranks = None
        leader.process.send_signal(signal.SIGKILL)
        _until(lambda: health(standby.address) == "SERVING", 3 * TTL, "the standby to lead")
        assert _metrics(http)[("p2_service_leader", ())] == 1
        status, kind, body = _get(http, "/")
        assert status == 200 and "seen" in body, body                 # the same port, the jobs recovered
        status, _, body = _get(http, "/api/jobs")
        assert status == 200 and [job["job_id"] for job in json.loads(body)["jobs"]] == ["seen"], body
        assert _get(http, "/healthz")[::2] == (200, "ok")
    finally:
        _stop(ranks, leader, standby)


def test_a_standbys_dashboard_stops_with_it_and_a_failed_start_lets_its_port_go(tmp_path, redis_url):
    """``stop()`` of a service that never led stops its dashboard; a second service on an SQLite file
    served a standby's dashboard while it listened, and its refused start closes that port."""
    async def main():
        never_led = Service(ServiceConfig(listen="127.0.0.1:0", store_url=redis_url, http="127.0.0.1:0"))
        await never_led.listen()
        answer = await asyncio.to_thread(_get, never_led.http_port, "/healthz")
        assert answer[0] == 200 and json.loads(answer[2])["status"] == "standby", answer
        await never_led.stop()
        assert _refuses_connections(never_led.http_port)

        store = f"sqlite:///{tmp_path / 'service.db'}"
        first = Service(ServiceConfig(listen="127.0.0.1:0", store_url=store))
        await first.start()
        second = Service(ServiceConfig(listen="127.0.0.1:0", store_url=store, http="127.0.0.1:0"))
        try:
            await second.listen()
            assert (await asyncio.to_thread(_get, second.http_port, "/healthz"))[0] == 200
            with pytest.raises(StoreInUseError):
                await second.lead()
            assert _refuses_connections(second.http_port)
        finally:
            await first.stop()
    asyncio.run(main())


@pytest.mark.slow
def test_a_leader_cut_off_from_redis_stops_before_its_lease_can_pass(tmp_path, redis_server, redis_url):
    parts = urlsplit(redis_server.url)
    proxy = TcpProxy((parts.hostname, parts.port))
    through_proxy = redis_url.replace(f":{parts.port}/", f":{proxy.port}/")
    leader = ServeProcess(tmp_path, env=LEASE_ENV, store=through_proxy)
    standby = ServeProcess(tmp_path, env=LEASE_ENV, store=redis_url, port=free_port(), standby=True)
    try:
        proxy.cut()
        cut = time.monotonic()
        code, log = leader.wait_dead(timeout=4 * TTL)
        stopped = time.monotonic()
        took_over = _until(lambda: health(standby.address) == "SERVING", 3 * TTL, "the standby to lead")
        assert code == 1, log
        last = log.strip().splitlines()[-1]
        assert last.startswith("p2 serve: error: ") and "stopped leading: no renewal of its lease succeeded" in last
        assert stopped - cut <= GIVE_UP + RENEW + 1.0, stopped - cut
        assert stopped < took_over, "the standby led while the old leader still acted"
    finally:
        proxy.close()
        for service in (leader, standby):
            if service.process.poll() is None:
                service.stop()


@pytest.mark.slow
def test_a_leader_paused_past_its_lease_decides_nothing_when_it_resumes(tmp_path, redis_url):
    """SIGSTOP the leader with a plan submission on its way to it; a standby takes over; SIGCONT:
    the old leader stops (its lease is gone, or its Prepare is fenced by the newer epoch) and the
    store's log holds no Prepare of its."""
    leader = ServeProcess(tmp_path, env=LEASE_ENV, store=redis_url)
    standby = ServeProcess(tmp_path, env=LEASE_ENV, store=redis_url, port=free_port(), standby=True)
    ranks = Ranks(leader.address, "paused", 2)
    submit = None
    try:
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(Plan(1, 2, {0: None}, ()).to_json())
        leader.process.send_signal(signal.SIGSTOP)
        submit = subprocess.Popen([sys.executable, "-m", "optimizer_service.cli", "plan", "submit", "--job", "paused",
                                   str(plan_file), "--service", leader.address, "--timeout", "30"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _until(lambda: health(standby.address) == "SERVING", 3 * TTL, "the standby to lead")
        leader.process.send_signal(signal.SIGCONT)
        code, log = leader.wait_dead(timeout=30)
        _, submit_error = submit.communicate(timeout=30)
    finally:
        ranks.close()
        leader.process.send_signal(signal.SIGCONT)
        for service in (leader, standby):
            if service.process.poll() is None:
                service.stop()
    assert code == 1 and log.strip().splitlines()[-1].startswith("p2 serve: error: "), log
    assert "stopped leading" in log or "belongs to a newer service" in log, log
    assert submit.returncode != 0, submit_error
    assert not any(sim.state.prepared for sim in ranks.ranks), "a replaced leader sent a Prepare"
    with open_store(redis_url) as store:
        records = store.read_log("paused")
    assert not [r for r in records if r["type"] != "recover"], records


def test_a_second_service_on_one_sqlite_file_is_refused_in_one_line(tmp_path):
    first = ServeProcess(tmp_path)
    try:
        second = p2("serve", "--listen", "127.0.0.1:0", "--http", "off", "--store",
                    f"sqlite:///{tmp_path / 'service.db'}", timeout=60)
    finally:
        first.stop()
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert lines[-1].startswith("p2 serve: error: store sqlite:///") and "already served by another" in lines[-1]
    assert "Traceback" not in second.stderr
    # The first one gone, the file serves again.
    again = ServeProcess(tmp_path)
    assert health(again.address) == "SERVING"
    again.stop()
