"""The service's ``/metrics`` as Prometheus itself sees it: ``promtool`` lints
the exposition of a running job, and a real ``prometheus`` scrapes ``p2 serve``
and answers the Grafana dashboard's queries (deploy/grafana/p2-dashboard.json)
with the job's series."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.test_grafana import concrete, load, panels
from tests.support.service_process import Ranks, ServeProcess, free_port
from tests.support.telemetry import TelemetryFeed

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install "
                                    "prometheus); the /metrics exposition is not linted")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (Debian: apt-get "
                                      "install prometheus); no real scrape of /metrics")
pytestmark = pytest.mark.slow

JOB = "job-a"
TOKEN = "prometheus-test-token"
#: The scrape job deploy/grafana/README.md shows. The service names a training job ``job_id``, so Prometheus'
#: own ``job`` label (the scrape job) and the training job's live side by side without honor_labels.
SCRAPE_JOB = "p2-service"
#: Scrapes of a service whose /metrics needs its token (P2_DASHBOARD_PUBLIC=0), with and without the token.
TOKEN_JOB, NO_TOKEN_JOB = "p2-service-token", "p2-service-no-token"


def until(predicate, timeout: float, what):
    """``predicate()``'s first truthy value, polled until ``timeout`` (``what()``: the failure message)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.2)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class RunningJob:
    serve: ServeProcess
    http_port: int

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/metrics"


@pytest.fixture(scope="module")
def running_job(tmp_path_factory):
    """``p2 serve`` with its HTTP port, and a job of 4 simulated ranks sending an iteration every 50 ms."""
    folder = tmp_path_factory.mktemp("serve")
    port_file = folder / "http.port"
    serve = ServeProcess(folder, "--http", "127.0.0.1:0", "--http-port-file", str(port_file), "--no-replan")
    ranks = feed = None
    try:
        http_port = int(until(lambda: port_file.exists() and port_file.read_text().strip(), 10,
                              "p2 serve wrote no --http-port-file"))
        ranks = Ranks(serve.address, JOB, 4)
        feed = TelemetryFeed(ranks)
        yield RunningJob(serve, http_port)
    finally:
        if feed is not None:
            feed.close()
        if ranks is not None:
            ranks.close()
        serve.stop()


@pytest.fixture(scope="module")
def guarded_service(tmp_path_factory):
    """``p2 serve`` with a token, whose /metrics needs it (no job runs on it)."""
    folder = tmp_path_factory.mktemp("guarded")
    (folder / "token").write_text(TOKEN + "\n")
    serve = ServeProcess(folder, "--http", "127.0.0.1:0", "--http-port-file", str(folder / "http.port"),
                         "--no-replan", "--token-file", str(folder / "token"), env={"P2_DASHBOARD_PUBLIC": "0"})
    try:
        http_port = int(until(lambda: (folder / "http.port").exists() and (folder / "http.port").read_text().strip(),
                              10, "p2 serve wrote no --http-port-file"))
        assert get(f"http://127.0.0.1:{http_port}/metrics")[0] == 401
        yield RunningJob(serve, http_port), folder / "token"
    finally:
        serve.stop()


@needs_promtool
def test_promtool_finds_no_problem_in_the_metrics_of_a_running_job(running_job):
    status, _ = get(f"http://127.0.0.1:{running_job.http_port}/api/jobs/no-such-job")
    assert status == 404                     # an error sample for p2_service_request_errors_total

    def exposition() -> str | None:
        status, text = get(running_job.metrics_url)
        populated = f'p2_iteration_seconds_count{{job_id="{JOB}"}}' in text and "p2_service_request_errors_total{" in text
        return text if status == 200 and populated else None

    text = until(exposition, 15, "the job's iterations and the 404 never showed on /metrics")
    assert f'p2_ranks_connected{{job_id="{JOB}"}} 4.0' in text
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    problems = (lint.stdout + lint.stderr).strip()
    assert lint.returncode == 0 and not problems, f"promtool check metrics (exit {lint.returncode}):\n{problems}"


class Prometheus:
    """A ``prometheus`` server in ``folder`` running ``scrape_configs`` every second (:meth:`start`), and its
    HTTP API."""

    def __init__(self, folder: Path, scrape_configs: list[dict]) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = folder / "prometheus.yml"
        self.config.write_text(json.dumps({     # JSON is YAML
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": scrape_configs}, indent=1))
        self.log_path = folder / "prometheus.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"],
                cwd=self.folder, stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return f"prometheus log ({self.log_path}):\n" + self.log_path.read_text()[-6000:]

    def ready(self) -> bool:
        assert self.process.poll() is None, f"prometheus exited with {self.process.returncode}\n{self.log()}"
        try:
            return get(f"{self.url}/-/ready")[0] == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict]:
        """The instant vector ``expr`` evaluates to now (its ``result``); asserts the API answered success."""
        status, body = get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", f"{expr}: {status} {body}\n{self.log()}"
        return answer["data"]["result"]

    def values(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """``expr``'s series: their sorted labels → value."""
        return {tuple(sorted(series["metric"].items())): float(series["value"][1]) for series in self.query(expr)}

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def scrape(job_name: str, service: RunningJob, **options) -> dict:
    return {"job_name": job_name, "metrics_path": "/metrics",
            "static_configs": [{"targets": [f"127.0.0.1:{service.http_port}"]}], **options}


@pytest.fixture(scope="module")
def prometheus(running_job, guarded_service, tmp_path_factory):
    guarded, token_file = guarded_service
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), [
        scrape(SCRAPE_JOB, running_job),
        scrape(TOKEN_JOB, guarded, authorization={"credentials_file": str(token_file)}),
        scrape(NO_TOKEN_JOB, guarded)])
    try:
        server.start()
        until(server.ready, 20, lambda: f"prometheus never answered /-/ready\n{server.log()}")
        yield server
    finally:
        server.stop()


def job_series(server: Prometheus, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
    values = server.values(expr)
    return values if any(dict(labels).get("job_id") == JOB and value > 0 for labels, value in values.items()) else {}


@needs_prometheus
def test_prometheus_scrapes_the_jobs_iterations(prometheus):
    up = until(lambda: prometheus.values(f'up{{job="{SCRAPE_JOB}"}}'), 15,
               lambda: f"no scrape of the service yet\n{prometheus.log()}")
    assert list(up.values()) == [1.0], f"{up}\n{prometheus.log()}"

    counts = until(lambda: job_series(prometheus, "p2_iteration_seconds_count"), 20,
                   lambda: f"no p2_iteration_seconds_count of {JOB}: "
                           f"{prometheus.values('p2_iteration_seconds_count')}\n{prometheus.log()}")
    (labels, count), = [(dict(labels), value) for labels, value in counts.items() if dict(labels)["job_id"] == JOB]
    assert labels["instance"] == prometheus.query(f'up{{job="{SCRAPE_JOB}"}}')[0]["metric"]["instance"]
    assert count >= 1

    rate = f'rate(p2_iteration_seconds_sum{{job_id="{JOB}"}}[1m])'
    until(lambda: job_series(prometheus, rate), 15, lambda: f"{rate} never rose above 0\n{prometheus.log()}")
    mean = prometheus.values(f'{rate} / rate(p2_iteration_seconds_count{{job_id="{JOB}"}}[1m])')
    # The feed's iterations take 0.050 to 0.056 s (tests.support.telemetry.TelemetryFeed).
    assert len(mean) == 1 and 0.049 <= next(iter(mean.values())) <= 0.057, mean

    # Prometheus' job label is the scrape job; the training job is job_id (nothing renamed to exported_job).
    assert labels["job"] == SCRAPE_JOB and "exported_job" not in labels


@needs_prometheus
def test_prometheus_scrapes_a_service_that_needs_its_token_with_the_token(prometheus):
    def both_scraped() -> dict[str, float]:
        up = prometheus.values(f'up{{job=~"{TOKEN_JOB}|{NO_TOKEN_JOB}"}}')
        return {dict(labels)["job"]: value for labels, value in up.items()} if len(up) == 2 else {}

    up = until(both_scraped, 15, lambda: f"no scrape of the guarded service yet\n{prometheus.log()}")
    assert up == {TOKEN_JOB: 1.0, NO_TOKEN_JOB: 0.0}, up
    requests = prometheus.values(f'p2_service_request_seconds_count{{job="{TOKEN_JOB}", method="GET /metrics"}}')
    assert requests and all(value >= 1 for value in requests.values()), requests


#: Dashboard queries (panel title, refId) that have series for a job that has no plan yet (no commit, replan,
#: dispatcher wait, prediction or error: those panels stay empty, and the committed version has no sample yet).
LIVE_QUERIES = {("Iteration time", "A"), ("Iteration time", "B"), ("Iteration time", "C"),
                ("Iterations per second", "A"), ("Ranks connected", "A"), ("Plan version", "B"),
                ("Enforcer ops by kind", "A"), ("Request latency p99 by method", "A"), ("Requests by method", "A")}


def dashboard_answers(server: Prometheus) -> dict[tuple[str, str], dict]:
    """Every dashboard query's series, by (panel title, refId), its variables made concrete (job: job-a)."""
    return {(panel["title"], target["refId"]): server.values(concrete(target["expr"]))
            for panel in panels(load()) for target in panel.get("targets", [])}


@needs_prometheus
def test_prometheus_answers_every_dashboard_query(prometheus):
    answers = {}

    def live() -> bool:
        answers.update(dashboard_answers(prometheus))       # each query answers success, or this fails at once
        return all(answers.get(key) for key in LIVE_QUERIES)

    until(live, 30, lambda: f"dashboard queries with no series: {sorted(k for k in LIVE_QUERIES if not answers.get(k))}"
                            f"\n{prometheus.log()}")
    assert list(answers["Ranks connected", "A"].values()) == [4.0]
    assert list(answers["Plan version", "B"].values()) == [0.0]       # passthrough: no plan runs
    p50, p99, mean = (next(iter(answers["Iteration time", ref].values())) for ref in "ABC")
    assert 0.04 <= p50 <= p99 <= 0.1 and 0.049 <= mean <= 0.057, (p50, p99, mean)
    methods = {dict(labels)["method"] for labels in answers["Requests by method", "A"]}
    assert "GET /metrics" in methods, methods
