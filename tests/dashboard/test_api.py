"""Every dashboard route with FastAPI's test client, on a real service (gRPC on
port 0, SQLite) whose jobs are simulated ranks streaming telemetry over real
gRPC: reads, the token-guarded mutations, and bad input (404 / 422 with the
field, 400 for a body that is not JSON, nothing stored)."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from optimizer_service.dashboard.views import duration, rate
from optimizer_service.plan import Plan
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Par, comm_op, on_channel
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.syndicate.transforms import segment
from tests.dashboard.conftest import TOKEN, running_dashboard
from tests.optimizer_service.syndicate.test_live_search import passthrough_traces

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ELEMENTS = 1 << 18


def two_channel_plan(world: int = 4) -> dict:
    """Two all-reduces (the simulated ranks' ops), each in two halves, one per channel."""
    ops = []
    for seq in range(2):
        half = ELEMENTS // 2
        parts = tuple(on_channel(piece, channel) for channel, piece in
                      enumerate(segment(comm_op(Collective.ALL_REDUCE, range(world), ELEMENTS), half).parts))
        ops.append(OpPlan.of(OpKey(seq, "all_reduce", ELEMENTS * 4, tuple(range(world))), Par(parts),
                             base=2 * seq))
    return json.loads(Plan(1, world, {0: None, 1: None}, tuple(ops)).to_json())


def metric_samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def running_job(dashboard, job: str = "alpha", world: int = 4, iterations: int = 20):
    dashboard.job(job, world)
    return dashboard.until(lambda: next((j for j in dashboard.client.get("/api/jobs").json()["jobs"]
                                        if j["job_id"] == job and j["iteration"] >= iterations
                                        and j["iteration_seconds"]), None), what=f"{job} to run")


def test_reads_show_a_running_job(dashboard):
    client = dashboard.client
    summary = running_job(dashboard)
    assert summary["state"] == "live" and summary["ranks_connected"] == 4 and summary["committed_version"] == 0
    assert 0.04 < summary["iteration_seconds"] < 0.07 and len(summary["sparkline"]) >= 10
    assert summary["replanning"] == {"phase": "waiting", "paused": False} and summary["lagging"] == 0

    job = client.get("/api/jobs/alpha").json()
    assert [r["rank"] for r in job["ranks"]] == [0, 1, 2, 3] and all(r["connected"] for r in job["ranks"])
    assert job["plans"] == [] and job["waits"] == [] and job["policy"]["phase"] == "waiting"
    # one measured iteration time: the policy's window median is the page's iteration time and measured time
    assert job["iteration_seconds"] == job["measured_seconds"] == job["policy"]["median_seconds"] is not None
    # passthrough's times, with a plan's fields: no bound before a search or a plan that carries one
    assert job["passthrough"] == {"version": 0, "predicted_seconds": None, "measured_seconds": job["measured_seconds"],
                                  "bound_iteration_seconds": None, "ratio_to_bound": None,
                                  "predicted_ratio_to_bound": None}
    assert job["bound_iteration_seconds"] is None and job["ratio_to_bound"] is None

    telemetry = client.get("/api/jobs/alpha/telemetry", params={"since": -1}).json()
    indices = [it["iteration"] for it in telemetry["iterations"]]
    assert indices == sorted(indices) and len(indices) >= 15 and telemetry["last"] == indices[-1]
    assert all(it["ranks"] == 4 and it["version"] == 0 for it in telemetry["iterations"])
    newer = client.get("/api/jobs/alpha/telemetry", params={"since": telemetry["last"]}).json()
    assert all(it["iteration"] > telemetry["last"] for it in newer["iterations"])

    events = client.get("/api/jobs/alpha/events", params={"limit": 50}).json()
    kinds = [e["kind"] for e in events["events"]]
    assert kinds.count("registered") == 4 and "live" in kinds

    topology = client.get("/api/jobs/alpha/topology").json()
    assert topology["name"] == "dash-2x2" and topology["device_count"] == 4 and topology["channels"] == [0, 1]
    assert "gcp-v100-2n" in client.get("/api/topologies").json()["presets"]
    preset = client.get("/api/topologies/gcp-v100-2n").json()
    assert preset["device_count"] == 16 and [level["cardinality"] for level in preset["levels"]] == [2, 8]

    explored = client.get("/api/explore", params={"topology": "gcp-v100-2n", "axes": "2,8", "reduce": "1",
                                                  "max_size": 3, "placements": 2, "programs": 2}).json()
    assert explored["placements"] and explored["best"]["predicted_seconds"] > 0
    seconds = [p["programs"][0]["predicted_seconds"] for p in explored["placements"]]
    assert seconds == sorted(seconds) and explored["placements"][0]["programs"][0]["steps"][0]["states_after"]

    assert client.get("/healthz").text == "ok"
    metrics = metric_samples(client.get("/metrics").text)
    assert metrics[("p2_ranks_connected", (("job_id", "alpha"),))] == 4
    assert metrics[("p2_iteration_seconds_count", (("job_id", "alpha"),))] >= 15
    assert metrics[("p2_enforcer_ops_total", (("job_id", "alpha"), ("kind", "all_reduce"), ("planned", "false")))] > 0
    assert ("p2_service_request_seconds_count", (("method", "GET /api/jobs"), ("transport", "http"))) in metrics
    assert client.get("/openapi.json").json()["paths"]["/api/jobs/{job_id}/plans"]["post"]


def test_a_plan_submitted_with_the_token_commits_and_shows_everywhere(dashboard):
    client = dashboard.client
    running_job(dashboard)
    plan = {**two_channel_plan(), "predicted_iteration_seconds": 0.05, "bound_iteration_seconds": 0.04}
    assert client.post("/api/jobs/alpha/plans", json=plan).status_code == 401
    assert client.post("/api/jobs/alpha/plans", json=plan, headers={"Authorization": "Bearer nope"}).status_code == 401
    cross = client.post("/api/jobs/alpha/plans", json=plan, headers={**AUTH, "Origin": "https://evil.example"})
    assert cross.status_code == 403 and "cross-site" in cross.json()["error"]
    assert client.get("/api/jobs/alpha/plans").json()["plans"] == []          # nothing refused was stored

    answer = client.post("/api/jobs/alpha/plans", json=plan, headers={**AUTH, "Origin": "http://testserver"})
    assert answer.status_code == 202 and answer.json()["version"] == 1
    dashboard.until(lambda: client.get("/api/jobs/alpha").json()["committed_version"] == 1, what="the commit")
    record = dashboard.until(lambda: next((p for p in client.get("/api/jobs/alpha/plans").json()["plans"]
                                           if len(p["ranks"]) == 4 and all(r["state"] == "acked_commit"
                                                                           for r in p["ranks"])), None),
                             what="every rank's ack")
    assert record["state"] == "committed" and record["origin"] == ""
    assert record["bound_iteration_seconds"] == 0.04 and record["predicted_ratio_to_bound"] == pytest.approx(1.25)

    detail = client.get("/api/jobs/alpha/plans/1").json()
    ops = detail["plan"]["ops"]
    assert [op["seq"] for op in ops] == [0, 1] and detail["plan"]["priced"]
    assert [m["channel"] for m in ops[0]["motifs"]] == [0, 1] and all(m["predicted_seconds"] > 0
                                                                      for m in ops[0]["motifs"])
    assert ops[0]["predicted_seconds"] == max(m["predicted_seconds"] for m in ops[0]["motifs"])   # ∥ halves
    diff = client.get("/api/jobs/alpha/plans/1/diff").json()
    assert diff["from_version"] == 0 and diff["counts"]["added"] == 2 and diff["channels_changed"]

    gantt = dashboard.until(lambda: (g := client.get("/api/jobs/alpha/plans/1/gantt").json())["measured"] and g,
                            what="a measured timeline of v1")
    lanes = {row["lane"] for row in gantt["measured"]}
    assert {"ch0", "ch1", "compute"} <= lanes and gantt["predicted"] == []     # an operator's plan has no search

    job = dashboard.until(lambda: (j := client.get("/api/jobs/alpha").json())["waits"] and j["running_version"] == 1
                          and j, what="dispatcher waits under v1")
    assert {(w["op"], w["channel"]) for w in job["waits"]} >= {("all_reduce#0", 0), ("all_reduce#1", 1)}
    # the bound beside the running plan, each plan's, and passthrough's (the first plan's: v1's)
    measured = dashboard.until(lambda: (j := client.get("/api/jobs/alpha").json())["plans"][0]["measured_seconds"]
                               and j["measured_seconds"] and j, what="v1 measured")
    assert measured["bound_iteration_seconds"] == measured["plans"][0]["bound_iteration_seconds"] == 0.04
    assert measured["ratio_to_bound"] == pytest.approx(measured["measured_seconds"] / 0.04)
    assert measured["plans"][0]["ratio_to_bound"] == pytest.approx(measured["plans"][0]["measured_seconds"] / 0.04)
    assert measured["passthrough"]["bound_iteration_seconds"] == 0.04
    passthrough = measured["passthrough"]
    assert passthrough["ratio_to_bound"] == pytest.approx(passthrough["measured_seconds"] / 0.04)
    assert client.get("/api/jobs/alpha/plans/1").json()["plan"]["bound_iteration_seconds"] == 0.04
    page = client.get("/jobs/alpha").text
    assert "Measured / bound" in page and "40.0 ms" in page and 'class="passthrough"' in page
    metrics = metric_samples(client.get("/metrics").text)
    assert metrics[("p2_commits_total", (("job_id", "alpha"), ("outcome", "commit")))] == 1
    assert metrics[("p2_plan_version", (("job_id", "alpha"),))] == 1
    assert metrics[("p2_enforcer_ops_total", (("job_id", "alpha"), ("kind", "all_reduce"), ("planned", "true")))] > 0
    assert metrics[("p2_dispatch_wait_seconds_total", (("channel", "1"), ("job_id", "alpha"), ("rank", "2")))] > 0


def test_replan_now_and_pause_reach_the_policy_and_the_log(dashboard):
    client = dashboard.client
    running_job(dashboard)
    assert client.post("/api/jobs/alpha/replan", json={}).status_code == 401
    answer = client.post("/api/jobs/alpha/replan", json={"reason": "driver upgrade"}, headers=AUTH).json()
    assert answer["policy"]["phase"] == "searching" and answer["policy"]["pending"]["trigger"] == "operator"
    events = client.get("/api/jobs/alpha/events").json()["events"]
    assert any(e["kind"] == "replan" and "driver upgrade" in e["message"] for e in events)
    metrics = metric_samples(client.get("/metrics").text)
    assert metrics[("p2_replans_total", (("job_id", "alpha"), ("reason", "operator")))] == 1

    paused = client.post("/api/jobs/alpha/replanning", json={"paused": True, "reason": "incident"}, headers=AUTH)
    assert paused.json()["policy"]["paused"] is True and paused.json()["policy"]["phase"] == "waiting"
    again = client.post("/api/jobs/alpha/replan", json={}, headers=AUTH).json()
    assert again["policy"]["pending"] is None                       # paused: no search
    kinds = [e["kind"] for e in client.get("/api/jobs/alpha/events").json()["events"]]
    assert "paused" in kinds and kinds[-1] == "ignored"
    resumed = client.post("/api/jobs/alpha/replanning", json={"paused": False}, headers=AUTH).json()
    assert resumed["policy"]["paused"] is False
    assert client.get("/api/jobs").json()["jobs"][0]["replanning"]["paused"] is False


def test_a_search_shows_the_model_it_fitted_and_each_values_effect(dashboard):
    """A real search ("replan now"; the ranks answer its trace request): the job's API carries the
    fitted model and the bound as the search's decision has them, and the page renders the
    model per channel and for the host, and the prediction without each fitted value."""
    client = dashboard.client
    ranks, _ = dashboard.job("alpha", 4)
    for sim, trace in zip(ranks.ranks, passthrough_traces([0.02] * 8)):
        sim.trace = trace
    dashboard.until(lambda: client.get("/api/jobs/alpha").json()["iteration"] >= 5, what="alpha to run")
    before = client.get("/api/jobs/alpha").json()
    assert (before["fit"], before["bound"], before["search_version"]) == (None, None, None)
    assert "No search yet" in client.get("/jobs/alpha").text
    assert client.post("/api/jobs/alpha/replan", json={}, headers=AUTH).json()["policy"]["phase"] == "searching"
    job = dashboard.until(lambda: (j := client.get("/api/jobs/alpha").json())["fit"] and j, timeout=60,
                          what="the search's fit")
    searched = dashboard.core.job("alpha").latest_search          # the decision the service stored
    assert searched["kind"] == "searched" and searched["version"] == job["search_version"]
    assert job["fit"] == searched["search"]["fit"] and job["bound"] == searched["search"]["bound"]
    assert job["bound"]["seconds"] == next(p for p in job["plans"]
                                           if p["version"] == job["search_version"])["bound_iteration_seconds"]
    fit = job["fit"]
    assert fit["channels"]["0"]["fitted"] == ["rate", "motif_seconds", "latency"]

    page = client.get("/jobs/alpha").text
    table = page[page.index('<table id="fit">'):]
    body = table[table.index("<tbody>"):table.index("</table>")]
    rows = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]
    zero, host = fit["channels"]["0"], fit["host"]
    assert [row[0] for row in rows] == ["channel 0", "channel 1", "host"]
    assert rows[0] == ["channel 0", duration(zero["motif_seconds"]),
                       f"{duration(zero['round_seconds'])} ({duration(zero['calibrated_round_seconds'])})",
                       f"{rate(zero['rate_bytes_per_s'])} ({rate(zero['calibrated_rate_bytes_per_s'])})",
                       str(zero["samples"]), "rate, motif_seconds, latency"]
    assert rows[2][4:] == [str(host["samples"]), host["how"]]
    effects = re.findall(r"<li>(prediction without .*?)</li>", page)
    assert effects == [f"prediction without {e['parameter']}: {duration(e['predicted_seconds_without'])} "
                       f"(with all: {duration(fit['predicted_seconds'])})" for e in fit["effects"]]
    assert "prediction without channel 0 rate" in page and f"bound by {job['bound']['binding']}" in page
    other, per_motif = fit["other_reading"], fit["per_motif_reading"]     # a first search chose by four readings
    slowest = fit["slowest_round_reading"]
    said = re.search(r'<p id="fit-other" class="muted">(.*?)</p>', page, re.S).group(1)

    def values(reading, value="motif_seconds", unit="per motif"):
        return (f"channel 0 {duration(reading['channels']['0'][value])}, "
                f"channel 1 {duration(reading['channels']['1'][value])}, "
                f"host {duration(reading['host'][value])} {unit}")

    assert said == ("Chosen by the worst of this fit and the window read with every link at its calibrated rate "
                    f"({values(other)}); and with every link at its calibrated rate and round ({values(per_motif)}); "
                    "and with every link at its calibrated rate and fixed cost "
                    f"({values(slowest, 'round_seconds', 'per round')}); "
                    f"the chosen plan at the worst reading {duration(slowest['chosen_seconds'])}."), said


def test_bad_input_is_one_line_with_its_field_and_stores_nothing(dashboard):
    client = dashboard.client
    running_job(dashboard, iterations=2)
    missing = client.get("/api/jobs/nope")
    assert missing.status_code == 404 and "no job 'nope'" in missing.json()["error"]
    assert client.get("/api/jobs/alpha/plans/7").status_code == 404
    assert client.get("/api/jobs/alpha/plans/7/gantt").status_code == 404
    zero = client.get("/api/jobs/alpha/plans/0")
    assert zero.status_code == 422 and zero.json()["field"] == "version"
    assert client.get("/api/jobs/alpha/telemetry", params={"since": -5}).json()["field"] == "since"
    assert client.get("/api/jobs/alpha/events", params={"limit": 0}).json()["field"] == "limit"
    bad_axes = client.get("/api/explore", params={"topology": "gcp-v100-2n", "axes": "x", "reduce": "1"})
    assert bad_axes.status_code == 422 and bad_axes.json()["error"].startswith("axes:")
    nowhere = client.get("/api/topologies/nowhere")
    assert nowhere.status_code == 404 and "no topology preset 'nowhere'" in nowhere.json()["error"]
    assert client.get("/api/explore", params={"topology": "gcp-v100-2n", "axes": "2,8"}).json()["field"] == "reduce"

    not_json = client.post("/api/jobs/alpha/plans", content=b"{not json", headers={**AUTH,
                                                                                "Content-Type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["field"] == "body" and "not JSON" in not_json.json()["error"]
    broken = two_channel_plan()
    broken["ops"][0]["plan"] = "AllReduce(0,1,9)[0:4]"
    answer = client.post("/api/jobs/alpha/plans", json=broken, headers=AUTH)
    assert answer.status_code == 422 and answer.json()["field"] == "plan" and "\n" not in answer.json()["error"]
    wrong_world = two_channel_plan(world=8)
    assert client.post("/api/jobs/alpha/plans", json=wrong_world, headers=AUTH).status_code in (409, 422)
    long_reason = client.post("/api/jobs/alpha/replan", json={"reason": "x" * 500}, headers=AUTH)
    assert long_reason.status_code == 422 and long_reason.json()["field"] == "reason"
    assert client.post("/api/jobs/alpha/replanning", json={}, headers=AUTH).json()["field"] == "paused"
    assert client.get("/api/jobs/alpha/plans").json()["plans"] == []
    assert client.get("/api/jobs/alpha").json()["policy"]["phase"] == "waiting"

    page = client.get("/jobs/nope")
    assert page.status_code == 404 and "text/html" in page.headers["content-type"] and "no job" in page.text
    assert client.get("/no/such/page").status_code == 404


def test_pages_render_what_the_api_returns(dashboard):
    client = dashboard.client
    running_job(dashboard)
    client.post("/api/jobs/alpha/plans", json=two_channel_plan(), headers=AUTH)
    dashboard.until(lambda: client.get("/api/jobs/alpha").json()["committed_version"] == 1, what="the commit")
    jobs = client.get("/")
    assert jobs.status_code == 200 and 'href="/jobs/alpha"' in jobs.text and "<svg" in jobs.text
    job = client.get("/jobs/alpha")
    assert 'data-job="alpha"' in job.text and job.text.count("<tr") >= 4 + 1 and "v1" in job.text
    plan = client.get("/jobs/alpha/plans/1")
    assert plan.status_code == 200 and "all_reduce" in plan.text and "Two-phase commit" in plan.text
    assert "2 added" in plan.text
    topology = client.get("/topology", params={"name": "gcp-v100-2n"})
    assert topology.status_code == 200 and "gcp-v100-2n" in topology.text and "Gbit/s" in topology.text
    explored = client.get("/explore", params={"topology": "gcp-v100-2n", "axes": "2,8", "reduce": "1",
                                              "max_size": 3})
    assert explored.status_code == 200 and "placement" in explored.text and "lowered steps" in explored.text
    refused = client.get("/explore", params={"topology": "gcp-v100-2n", "axes": "2,8", "reduce": "5"})
    assert refused.status_code == 200 and 'class="error"' in refused.text
    assert client.get("/login").status_code == 200 and client.get("/docs").status_code == 200


def test_reads_need_the_token_when_the_dashboard_is_not_public(tmp_path):
    with running_dashboard(tmp_path, public=False) as dashboard:
        client = dashboard.client
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/jobs").status_code == 401 and client.get("/metrics").status_code == 401
        assert client.get("/api/jobs", headers=AUTH).status_code == 200
        redirect = client.get("/", follow_redirects=False)
        assert redirect.status_code == 303 and redirect.headers["location"].startswith("/login")
        assert client.post("/login", data={"token": "wrong", "next": "/"}, follow_redirects=False).status_code == 401
        logged = client.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
        assert logged.status_code == 303 and "httponly" in logged.headers["set-cookie"].lower()
        assert TOKEN not in logged.headers["set-cookie"]                   # a session id, never the token
        page = client.get("/")
        assert page.status_code == 200 and client.get("/api/jobs").status_code == 200
        # the session alone never changes anything: a mutation needs the page's CSRF value as well
        assert client.post("/api/jobs/x/replan", json={}).status_code == 403
        csrf = re.search(r'<meta name="p2-csrf" content="([^"]+)">', page.text).group(1)
        assert client.post("/api/jobs/x/replan", json={}, headers={"X-P2-CSRF": csrf}).status_code == 404


def test_a_service_without_a_token_is_read_only(tmp_path):
    with running_dashboard(tmp_path, token=None) as dashboard:
        dashboard.job("beta", 2)
        dashboard.until(lambda: dashboard.client.get("/api/jobs").json()["jobs"], what="the job")
        answer = dashboard.client.post("/api/jobs/beta/plans", json=two_channel_plan(2))
        assert answer.status_code == 403 and "--token-file" in answer.json()["error"]
        assert "Read-only" in dashboard.client.get("/").text
