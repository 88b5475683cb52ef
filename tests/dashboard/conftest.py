"""A service with its dashboard for the dashboard's tests: in process (FastAPI's
test client drives the app on the event loop that runs the gRPC service), with
simulated ranks of real jobs streaming telemetry over real gRPC."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from optimizer_service.control.coordinator import Timing
from optimizer_service.control.policy import PolicyConfig
from optimizer_service.dashboard.app import DashboardConfig, create_app
from optimizer_service.service.replanning import ReplanConfig
from optimizer_service.service.server import Service, ServiceConfig
from tests.support.service_process import Ranks
from tests.support.telemetry import TelemetryFeed

TOKEN = "dashboard-test-token"
#: The jobs' topology: two nodes of two ranks, a second NIC on channel 1.
TOPOLOGY = """
name: dash-2x2
levels:
  - {name: node, cardinality: 2}
  - {name: rank, cardinality: 2}
links:
  - {name: loopback, levels: [rank], bandwidth: 2GB/s, latency: 20us}
  - {name: nic, levels: [node], bandwidth: 25MB/s, latency: 100us, shared_by: 2}
  - {name: nic2, levels: [node], bandwidth: 25MB/s, latency: 100us, shared_by: 2, channel: 1}
"""
#: No search starts by itself during a test (only "replan now" asks for one).
QUIET = PolicyConfig(first_plan_after=100_000)


class Dashboard:
    def __init__(self, service: Service, client: TestClient) -> None:
        self.service, self.client = service, client
        self.core = service.core
        self._jobs: list[tuple[Ranks, TelemetryFeed | None]] = []

    def job(self, job: str, world: int = 4, telemetry: bool = True, **feed) -> tuple[Ranks, TelemetryFeed | None]:
        ranks = Ranks(f"127.0.0.1:{self.service.port}", job, world, token=TOKEN)
        stream = TelemetryFeed(ranks, **feed) if telemetry else None
        self._jobs.append((ranks, stream))
        return ranks, stream

    def until(self, predicate, timeout: float = 15.0, what: str = "the condition"):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def close(self) -> None:
        for ranks, stream in self._jobs:
            if stream is not None:
                stream.close()
            ranks.close()


@contextlib.contextmanager
def running_dashboard(folder: Path, token: str | None = TOKEN, public: bool = True, **config):
    """The service and its dashboard in this process; ``config``: more :class:`DashboardConfig` fields
    (the test client's Host, ``testserver``, is on the allowlist unless ``allowed_hosts`` says otherwise)."""
    service = Service(ServiceConfig(listen="127.0.0.1:0", store_url=f"sqlite:///{folder / 'service.db'}",
                                    token=token, timing=Timing(vote_timeout=3.0, resend_interval=0.2,
                                                               switch_margin=2),
                                    tick_seconds=0.05, replan=ReplanConfig(policy=QUIET, topology=TOPOLOGY)))
    config.setdefault("allowed_hosts", ("testserver", "127.0.0.1", "localhost"))
    app = create_app(service.core, DashboardConfig(token=token, public=public, **config))

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await service.start()
        yield
        await service.stop(0.5)

    app.router.lifespan_context = lifespan
    with TestClient(app) as client:
        dashboard = Dashboard(service, client)
        try:
            yield dashboard
        finally:
            dashboard.close()


@pytest.fixture
def dashboard(tmp_path):
    with running_dashboard(tmp_path) as value:
        yield value
