"""A standby's dashboard app (optimizer_service/dashboard/standby.py) in process, over a service
core that never starts: ``/metrics`` and ``/healthz`` answer, everything else is a 503 naming the
leader, and the token and Host protections hold. The same app serves everything once its role
says it leads. (Real ``p2 serve`` standbys: tests/optimizer_service/service/test_leadership.py.)"""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from optimizer_service.dashboard.app import DashboardConfig, create_app
from optimizer_service.service.server import Service, ServiceConfig

LEADER = "10.0.0.5:50051"
TOKEN = "standby-test-token"
HOSTS = ("testserver",)


class Role:
    """Whether the app's service leads, flipped by the test as leadership.py would."""

    def __init__(self) -> None:
        self.leading = False

    def __call__(self) -> tuple[bool, str | None]:
        return self.leading, LEADER


def standby_app(tmp_path, role, public: bool = True) -> TestClient:
    service = Service(ServiceConfig(listen="127.0.0.1:0", store_url=f"sqlite:///{tmp_path / 'service.db'}",
                                    token=TOKEN))          # built from values: nothing is opened or started
    return TestClient(create_app(service.core, DashboardConfig(token=TOKEN, public=public, allowed_hosts=HOSTS),
                                 role=role))


def test_a_standby_serves_metrics_and_health_and_refuses_the_rest_naming_the_leader(tmp_path):
    role = Role()
    with standby_app(tmp_path, role) as client:
        metrics = client.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        samples = {s.name: s for family in text_string_to_metric_families(metrics.text) for s in family.samples}
        assert samples["p2_service_leader"].value == 0
        assert not [s for s in samples.values() if "job_id" in s.labels], "a standby has no job's series"
        health = client.get("/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "standby", "leader": LEADER})
        for path, json_answer in [("/", False), ("/jobs/alpha", False), ("/docs", False), ("/static/dashboard.js",
                                  False), ("/api/jobs", True), ("/api/jobs/alpha/plans", True),
                                  ("/openapi.json", True)]:
            refused = client.get(path)
            assert refused.status_code == 503, path
            if json_answer:
                assert refused.json() == {"error": f"this p2 serve is a standby; the leader is at {LEADER} (gRPC; "
                                                   "its dashboard is on its own HTTP port)", "leader": LEADER}, path
            else:
                assert refused.headers["content-type"].startswith("text/html"), path
                assert f"the leader is at {LEADER}" in refused.text, path
            assert "frame-ancestors 'none'" in refused.headers["content-security-policy"], path
        posted = client.post("/api/jobs/alpha/replan", headers={"Authorization": f"Bearer {TOKEN}"}, json={})
        assert posted.status_code == 503 and posted.json()["leader"] == LEADER
        refused = client.get("/api/jobs", headers={"Host": "evil.example"})
        assert refused.status_code == 421, refused.text             # the Host check runs first, as on a leader
        assert "leader" not in client.get("/healthz", headers={"Host": "evil.example"}).json()

        role.leading = True                                         # it leads: the same app serves everything
        assert client.get("/healthz").text == "ok"
        assert client.get("/docs").status_code == 200
        assert client.get("/static/dashboard.js").status_code == 200


def test_a_token_guarded_standby_names_the_leader_to_readers_only(tmp_path):
    with standby_app(tmp_path, Role(), public=False) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/healthz").json() == {"status": "standby"}
        assert client.get("/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).json()["leader"] == LEADER
        hidden = client.get("/api/jobs")
        assert hidden.status_code == 503 and LEADER not in hidden.text and "leader" not in hidden.json()
        assert client.get("/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"}).json()["leader"] == LEADER
