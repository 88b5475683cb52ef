"""The service SIGKILLed at each point of a commit and restarted on the same
store: every rank ends on the same plan, and that plan is the decision the
store holds (a decided commit is never lost, an undecided one is aborted).

Real ``p2 serve`` processes (``P2_CRASH_AT`` makes one kill itself at a named
point), real SQLite and Redis, ranks that speak the real protocol over real
gRPC and reconnect (tests/support/participants.py)."""

from __future__ import annotations

import time

import grpc
import pytest

from optimizer_service.control.switch import agree, proposal
from optimizer_service.plan import Plan
from optimizer_service.service.store import open_store
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc
from tests.support.cli import p2
from tests.support.service_process import Ranks, ServeProcess, free_port

pytestmark = pytest.mark.slow

POINTS = ["prepare-persisted", "prepare-sent-to-one", "before-decision-persisted", "decision-persisted",
          "commit-sent-to-one"]
WORLD = 3


def _settled(address: str, ranks: Ranks) -> api.PlanRecord:
    """The plan record once the service decided and every rank agrees with it."""
    with grpc.insecure_channel(address) as channel:
        admin = optimizer_pb2_grpc.OptimizerStub(channel)
        deadline = time.monotonic() + 40
        while True:
            record = admin.GetPlan(api.GetPlanRequest(job_id="crash", version=1), timeout=5)
            holders = [1 in sim.state.held() or sim.state.running == 1 for sim in ranks.ranks]
            if record.state == api.COMMITTED and all(holders):
                return record
            if record.state == api.ABORTED and not any(sim.state.prepared.get(1) for sim in ranks.ranks):
                return record
            assert time.monotonic() < deadline, f"not settled: {record.state} holders {holders}"
            time.sleep(0.05)


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_crash_at_any_point_ends_with_every_rank_on_the_same_plan(tmp_path, store, point, request):
    url = (f"sqlite:///{tmp_path / 'service.db'}" if store == "sqlite"
           else f"{request.getfixturevalue('redis_server').url}?prefix={point}:")
    port = free_port()
    doomed = ServeProcess(tmp_path, env={"P2_CRASH_AT": point, "P2_VOTE_TIMEOUT": "3"}, port=port, store=url)
    ranks = Ranks(doomed.address, "crash", WORLD, reconnect=True)
    try:
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(Plan(1, WORLD, {0: None}, ()).to_json())
        p2("plan", "submit", "--job", "crash", str(plan_file), "--service", doomed.address, "--timeout", "5")
        code, log = doomed.wait_dead()
        assert code == -9 and f"crashing at {point}" in log, log
        survivor = ServeProcess(tmp_path, env={"P2_VOTE_TIMEOUT": "3"}, port=port, store=url)
        try:
            record = _settled(survivor.address, ranks)
        finally:
            survivor.stop()
    finally:
        ranks.close()
    committed = record.state == api.COMMITTED
    if point in ("decision-persisted", "commit-sent-to-one"):
        assert committed, "a durable commit decision was lost"
    if point in ("prepare-persisted", "prepare-sent-to-one", "before-decision-persisted"):
        assert not committed and record.state == api.ABORTED
    acked = {sim.rank for sim in ranks.ranks if 1 in sim.acked}
    aborted = {sim.rank for sim in ranks.ranks if 1 in sim.aborted}
    assert not (acked and aborted), f"ranks {acked} acked a commit and ranks {aborted} an abort of the same plan"
    # The in-band check at the next switch boundary: every rank takes the same plan.
    boundary = 10 ** 6
    common = min(proposal(sim.state, boundary) for sim in ranks.ranks)
    running = {agree(sim.state, boundary, common)[0].running for sim in ranks.ranks}
    assert running == {1 if committed else 0}


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_a_second_service_on_the_store_of_a_running_one_takes_nothing_over(tmp_path, store, request):
    """Two ``p2 serve`` on one store: the second does not take the store over while the first
    runs (before leases it did, and fenced the first). On SQLite it is refused with one line;
    on Redis it waits as a standby. The first commits the plan; the store's log holds one epoch.
    (A leader paused past its lease is fenced: test_leadership.py.)"""
    url = (f"sqlite:///{tmp_path / 'service.db'}" if store == "sqlite"
           else f"{request.getfixturevalue('redis_server').url}?prefix=fence:")
    old = ServeProcess(tmp_path, store=url)
    ranks = Ranks(old.address, "fence", WORLD)
    newer = None
    try:
        if store == "sqlite":
            refused = p2("serve", "--listen", "127.0.0.1:0", "--http", "off", "--store", url)
            assert refused.returncode == 2 and "already served by another 'p2 serve'" in refused.stderr
        else:
            newer = ServeProcess(tmp_path, store=url, port=free_port(), standby=True)
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(Plan(1, WORLD, {0: None}, ()).to_json())
        submitted = p2("plan", "submit", "--job", "fence", str(plan_file), "--service", old.address,
                       "--wait", "20", "--json", "-")
    finally:
        ranks.close()
        if newer is not None:
            newer.stop()
        code, log = old.stop()
    assert submitted.returncode == 0, submitted.stderr
    assert code == 0, log
    with open_store(url) as opened:
        records = opened.read_log("fence")
    assert {r["epoch"] for r in records if "epoch" in r} == {1}, records
    assert any(r["type"] == "decision" and r.get("decision") == "commit" for r in records), records
