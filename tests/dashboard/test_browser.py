"""The dashboard in a real browser: Debian's headless chromium driven by
Playwright (no browser download), against a real ``p2 serve`` process with a
token, whose job is simulated ranks streaming telemetry over real gRPC.

Every page loads without console errors (so without a Content-Security-Policy
violation); the job page's chart grows while the job runs; the page's controls
need a login, the browser then holds a session (never the token), and a plan
submitted from the page commits; a search's fitted model appears on an open job
page by itself. Screenshots of every page go to ``test-artifacts/dashboard/``."""

from __future__ import annotations

import json
import shutil
import time
import urllib.request

import pytest

from tests.dashboard.conftest import TOKEN, TOPOLOGY
from tests.optimizer_service.syndicate.test_live_search import passthrough_traces
from tests.dashboard.test_api import two_channel_plan
from tests.support.cli import ROOT
from tests.support.service_process import Ranks, ServeProcess
from tests.support.telemetry import TelemetryFeed

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"

pytestmark = [pytest.mark.browser, pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/setup.sh installs it)")]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``(base URL, the job's id)``: p2 serve with a token and its dashboard on a free port, a live job of 4 ranks."""
    folder = tmp_path_factory.mktemp("browser")
    (folder / "token").write_text(TOKEN)
    (folder / "topology.yaml").write_text(TOPOLOGY)
    serve = ServeProcess(folder, "--token-file", str(folder / "token"), "--http", "127.0.0.1:0", "--http-port-file",
                         str(folder / "http.port"), "--topology", str(folder / "topology.yaml"),
                         "--policy", "first_plan_after=100000")
    ranks = Ranks(serve.address, "browser-job", 4, token=TOKEN)
    feed = TelemetryFeed(ranks, period=0.1)
    try:
        yield f"http://127.0.0.1:{int((folder / 'http.port').read_text())}", "browser-job"
    finally:
        feed.close()
        ranks.close()
        serve.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


class Console:
    """A page that records its console errors and uncaught exceptions."""

    def __init__(self, browser) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))

    def open(self, url: str, shot: str):
        response = self.page.goto(url, wait_until="networkidle")
        self.page.wait_for_timeout(1500)             # a few polls of the live parts
        self.page.screenshot(path=str(ARTIFACTS / f"{shot}.png"), full_page=True)
        return response


def wait_for(predicate, timeout: float = 20.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value


def test_every_page_loads_without_console_errors(site, browser):
    base, job = site
    pages = {"jobs": "/", "job": f"/jobs/{job}", "topology": f"/topology?job={job}",
             "topology-preset": "/topology?name=gcp-a100-4n",
             "explore": "/explore?topology=gcp-v100-2n&axes=2,8&reduce=1&max_size=3",
             "api-docs": "/docs", "login": "/login"}
    for shot, path in pages.items():
        console = Console(browser)
        response = console.open(base + path, shot)
        assert response.status == 200, f"{path}: HTTP {response.status}"
        assert console.errors == [], f"{path}: console errors {console.errors}"
        console.page.close()
    console = Console(browser)
    console.open(base + "/", "jobs-live")
    row = console.page.locator(f"tr[data-job='{job}']")
    assert row.count() == 1 and "live" in row.inner_text() and row.locator("svg polyline").count() == 1
    console.page.close()


def test_the_job_page_chart_updates_while_the_job_runs(site, browser):
    base, job = site
    console = Console(browser)
    console.open(f"{base}/jobs/{job}", "job-chart")
    chart = console.page.locator("#chart")
    assert chart.locator("canvas").count() >= 1, "uPlot drew no canvas (is static/vendor/uPlot.iife.min.js there?)"
    first = int(chart.get_attribute("data-points"))
    last = int(chart.get_attribute("data-last"))
    console.page.wait_for_timeout(2500)
    assert int(chart.get_attribute("data-points")) > first and int(chart.get_attribute("data-last")) > last
    iteration = int(console.page.locator("#s-iteration").inner_text())
    console.page.wait_for_timeout(2500)
    assert int(console.page.locator("#s-iteration").inner_text()) > iteration
    assert console.errors == []
    console.page.close()


def test_a_plan_from_the_page_needs_a_login_and_the_page_never_holds_the_token(site, browser):
    base, job = site
    console = Console(browser)
    page = console.page
    console.open(f"{base}/jobs/{job}", "job-before-login")
    assert page.locator("#controls").count() == 0 and page.locator("#controls-login a").count() == 1
    post = ("([path, headers]) => fetch(path, {method: 'POST', headers: {'Content-Type': 'application/json', "
            "...headers}, body: JSON.stringify({reason: 'x'})}).then(r => r.status)")
    assert page.evaluate(post, [f"/api/jobs/{job}/replan", {}]) == 401          # no session: refused

    page.click("#controls-login a")
    page.fill("input[name=token]", TOKEN)
    page.click("form[action='/login'] button")
    page.wait_for_url(f"{base}/jobs/{job}")
    assert page.locator("#controls").count() == 1 and page.locator("#logout").count() == 1
    # The browser holds a session, never the token: not in a cookie script can read, not in storage, not in the page.
    assert page.evaluate("document.cookie") == "" and page.evaluate("sessionStorage.length + localStorage.length") == 0
    assert TOKEN not in page.content()
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert set(cookies) == {"p2_session"} and cookies["p2_session"]["httpOnly"]
    assert cookies["p2_session"]["sameSite"] == "Strict" and TOKEN not in cookies["p2_session"]["value"]
    assert page.evaluate(post, [f"/api/jobs/{job}/replan", {}]) == 403          # the session without its CSRF value

    page.locator("details summary", has_text="Submit a plan").click()
    page.fill("#plan-json", json.dumps(two_channel_plan(4)))
    page.click("#submit-plan")
    result = page.locator("#action-result")
    wait_for(lambda: result.get_attribute("data-status") == "202", what="the accepted submission")
    assert "plan v1 submitted" in result.inner_text()
    plans = page.locator("#plans")
    wait_for(lambda: "committed" in plans.inner_text(), what="v1 committed in the page's plans table")
    wait_for(lambda: page.locator("#s-committed").inner_text() == "v1", what="the summary's committed plan")
    page.screenshot(path=str(ARTIFACTS / "job-after-plan.png"), full_page=True)
    # the only console errors are the browser's own lines for the two refused requests
    assert all("401" in error or "403" in error for error in console.errors), console.errors

    page.click("#logout")
    page.wait_for_url(f"{base}/")
    assert page.context.cookies() == [] and page.locator("#login").count() == 1
    page.close()

    plan_page = Console(browser)
    wait_for(lambda: (plan_page.open(f"{base}/jobs/{job}/plans/1", "plan") or True)
             and plan_page.page.locator("svg.gantt").count() >= 1, what="the plan page's measured Gantt")
    text = plan_page.page.inner_text("body")
    assert "acked_commit" in text and "2 added" in text and "all_reduce" in text
    assert plan_page.errors == []
    plan_page.page.close()
    assert {"job-after-plan.png", "jobs.png", "plan.png"} <= {p.name for p in ARTIFACTS.glob("*.png")}


def test_a_searchs_fitted_model_appears_on_the_open_job_page(tmp_path, browser):
    """The job page is open before the search; the script's polling fills the fitted-model table and
    the effects from the job's API once the search (real: the ranks answer its trace request) is done."""
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "topology.yaml").write_text(TOPOLOGY)
    serve = ServeProcess(tmp_path, "--token-file", str(tmp_path / "token"), "--topology",
                         str(tmp_path / "topology.yaml"), "--policy", "first_plan_after=100000", dashboard=True)
    ranks = Ranks(serve.address, "fit-job", 4, token=TOKEN)
    for sim, trace in zip(ranks.ranks, passthrough_traces([0.02] * 8)):
        # the ranks share one host of 2 cores and record each iteration's CPU (enforcer.host_cpu)
        sim.trace = {**trace, "host": {"id": "boot-1", "cores": 2},
                     "cpu": [{"iteration": k, "wall": 0.2, "process_cpu": 0.06, "step_thread_cpu": 0.02}
                             for k in range(8)]}
    feed = TelemetryFeed(ranks, period=0.1)
    try:
        console = Console(browser)
        page = console.page
        console.open(f"{serve.http_url}/jobs/fit-job", "job-before-search")
        assert "No search yet" in page.locator("#fit-caption").inner_text()
        assert page.locator("#fit tbody tr").count() == 0
        asked = urllib.request.Request(f"{serve.http_url}/api/jobs/fit-job/replan", data=b"{}", method="POST",
                                       headers={"Authorization": f"Bearer {TOKEN}",
                                                "Content-Type": "application/json"})
        with urllib.request.urlopen(asked, timeout=10) as answer:
            assert json.load(answer)["policy"]["phase"] == "searching"
        wait_for(lambda: page.locator("#fit tbody tr").count() == 3, timeout=60, what="the fitted model on the page")
        with urllib.request.urlopen(f"{serve.http_url}/api/jobs/fit-job", timeout=10) as answer:
            fit = json.load(answer)["fit"]
        rows = [row.split("\t") for row in page.locator("#fit tbody tr").all_inner_texts()]
        assert [row[0] for row in rows] == ["channel 0", "channel 1", "host"]
        assert rows[0][5] == "rate, motif_seconds, latency" and rows[0][4] == str(fit["channels"]["0"]["samples"])
        effects = page.locator("#fit-effects li").all_inner_texts()
        assert len(effects) == len(fit["effects"]) and effects[0].startswith(
            f"prediction without {fit['effects'][0]['parameter']}: ")
        assert "bound by" in page.locator("#fit-caption").inner_text()
        other = page.locator("#fit-other").inner_text()       # a first search: chosen by four readings
        assert other.startswith("Chosen by the worst of this fit and the window read with every link at its "
                                "calibrated rate (channel 0 ") and "host " in other, other
        assert "; and with every link at its calibrated rate and round (channel 0 " in other, other
        assert "; and with every link at its calibrated rate and fixed cost (channel 0 " in other, other
        assert " per round); the chosen plan at the worst reading " in other, other
        assert (" Predicted " in other and ": the middle of the window read with all its excess per motif ("
                in other and ") and all of it per round (" in other), other
        with urllib.request.urlopen(f"{serve.http_url}/api/jobs/fit-job", timeout=10) as answer:
            hosts = json.load(answer)["bound"]["hosts"]
        shown = page.locator("#fit-hosts li").all_inner_texts()      # the ranks' traces carry their CPU
        assert len(shown) == len(hosts) >= 1 and "% busy; training loops" in shown[0]
        page.screenshot(path=str(ARTIFACTS / "job-fitted-model.png"), full_page=True)
        assert console.errors == []
        page.close()
    finally:
        feed.close()
        ranks.close()
        serve.stop()
