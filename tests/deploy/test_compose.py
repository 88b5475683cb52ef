"""The docker-compose stack (``docker-compose.yml``, ``deploy/docker/``).

Fast: the compose file validates (``docker-compose config``) and holds the stack
the issue asks for; Prometheus' config passes ``promtool check config`` and
scrapes what the compose file serves; Grafana's provisioning points at them; the
service image's health check answers as it should against a real ``p2 serve``.

Slow, real: Docker's daemon (started here as root when none answers), the images
built by ``deploy/docker/build.sh``, ``docker-compose up``: the example job's
worker containers train to the end (exit 0) through ``p2enforcer``, the service
committed a plan for the job, and Prometheus scraped the service; ``down -v``
always. It prints the image sizes, the build's time and the time from ``up`` to
the first committed plan (measured, never asserted).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cli import ROOT
from tests.support.required import unavailable_here
from tests.support.service_process import ServeProcess, free_port

COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
BUILD = ROOT / "deploy" / "docker" / "build.sh"
SECRETS = ROOT / "deploy" / "docker" / "secrets.sh"
STACK = {"p2-a", "p2-b", "redis", "prometheus", "worker-0", "worker-1"}
WORKERS = ("worker-0", "worker-1")
REPLICAS = ("p2-a", "p2-b")
#: Every port the stack publishes, on a free loopback port (tests never take the default ones).
FREE_PORTS = {name: "127.0.0.1:" for name in ("P2_A_GRPC_PUBLISH", "P2_A_HTTP_PUBLISH", "P2_B_GRPC_PUBLISH",
                                               "P2_B_HTTP_PUBLISH", "P2_PROMETHEUS_PUBLISH", "P2_GRAFANA_PUBLISH")}
BUILD_TIMEOUT = 3600        # a cold build on two busy cores: the base, torch, the C++ backend
TRAIN_TIMEOUT = 600


def compose_command() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        unavailable_here("docker-compose is not installed (apt-get install docker-compose)")
    return found


def project_version() -> str:
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("pyproject.toml has no version")


def compose_env(secrets: Path, **more: str) -> dict[str, str]:
    return dict(os.environ, P2_SECRETS_DIR=str(secrets), **FREE_PORTS, **more)


def make_secrets(folder: Path) -> Path:
    made = subprocess.run([str(SECRETS)], env=dict(os.environ, P2_SECRETS_DIR=str(folder)), capture_output=True,
                          text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    return folder


def rendered(compose: str, secrets: Path, *options: str) -> dict:
    """``docker-compose config`` of the stack: what compose itself makes of the file."""
    result = subprocess.run([compose, "-f", str(COMPOSE_FILE), *options, "config"], capture_output=True, text=True,
                            env=compose_env(secrets), timeout=60)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


# ------------------------------------------------------------------ fast
def test_docker_compose_config_validates_the_stack(tmp_path):
    compose = compose_command()
    secrets = make_secrets(tmp_path / "secrets")
    config = rendered(compose, secrets)
    services = config["services"]
    assert {name for name, service in services.items() if not service.get("profiles")} == STACK
    assert services["grafana"]["profiles"] == ["grafana"]      # up only with --profile grafana (no image here)
    # The images are the ones build.sh tags with the project's version.
    version = project_version()
    for name in sorted(STACK):
        assert services[name]["image"].endswith(f":{version}"), (name, services[name]["image"])
    # Two replicas, each advertising its own address, on Redis through the secret, with the token.
    for name in REPLICAS:
        service = services[name]
        assert service["environment"]["P2_ADVERTISE"] == f"{name}:50051" and service["hostname"] == name
        entrypoint = " ".join(service["entrypoint"]).replace("$$", "$")     # compose's escape of a literal $
        assert 'P2_STORE="redis://:$(cat /run/secrets/redis_password)@redis:6379/0" exec p2 serve' in entrypoint
        command = service["command"]
        assert command[command.index("--token-file") + 1] == "/run/secrets/p2_token"
        assert command[command.index("--listen") + 1] == "0.0.0.0:50051"
        assert command[command.index("--http") + 1] == "0.0.0.0:8080"
        assert {s["source"] for s in service["secrets"]} == {"p2_token", "redis_password"}
    assert {s["source"] for s in services["redis"]["secrets"]} == {"redis_password"}
    assert "redis-data:/data:rw" in services["redis"]["volumes"] and "redis-data" in config["volumes"]
    # The example job: torchrun with a c10d rendezvous across the workers, every rank linked to both replicas.
    for name in WORKERS:
        worker = services[name]
        command = worker["command"]
        assert command[:1] == ["torchrun"] and command[command.index("--rdzv-backend") + 1] == "c10d"
        assert command[command.index("--nnodes") + 1] == str(len(WORKERS))
        assert command[command.index("--backend") + 1] == "p2enforcer"
        environment = worker["environment"]
        assert environment["P2_SERVICE"] == "p2-a:50051,p2-b:50051"
        assert environment["P2_TOKEN_FILE"] == "/run/secrets/p2_token" and environment["P2_JOB"]
    # Secrets come from files, none is written in the compose file.
    assert {name: Path(spec["file"]).parent for name, spec in config["secrets"].items()} == {
        "p2_token": secrets, "redis_password": secrets, "grafana_admin_password": secrets}
    text = COMPOSE_FILE.read_text()
    assert all((secrets / name).read_text() not in text for name in config["secrets"])


def test_prometheus_config_passes_promtool_and_scrapes_both_replicas():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    checked = subprocess.run([promtool, "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True,
                             timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    scrape = yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]
    targets = {target for job in scrape for group in job["static_configs"] for target in group["targets"]}
    assert targets == {f"{name}:8080" for name in REPLICAS}      # the services' --http port
    assert [job.get("metrics_path", "/metrics") for job in scrape] == ["/metrics"]


def test_grafana_provisioning_names_the_stacks_prometheus_and_dashboard():
    compose = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    sources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert [(s["type"], s["url"], s["isDefault"]) for s in sources] == [("prometheus", "http://prometheus:9090", True)]
    assert "prometheus" in compose
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "p2.yaml").read_text())["providers"]
    mounted = {volume.split(":")[1] for volume in compose["grafana"]["volumes"]}
    assert f"{providers[0]['options']['path']}/p2-dashboard.json" in mounted
    assert "/etc/grafana/provisioning" in mounted


def test_the_service_images_health_check_asks_the_grpc_health_service(tmp_path):
    """deploy/docker/healthcheck.py (the service image's HEALTHCHECK) on a real ``p2 serve``: healthy
    (liveness, and readiness on the one service of an SQLite file); a port nobody serves is not."""
    script = ROOT / "deploy" / "docker" / "healthcheck.py"
    serve = ServeProcess(tmp_path)
    try:
        live = run(sys.executable, str(script), serve.address)
        ready = run(sys.executable, str(script), serve.address, "--service", "")
    finally:
        serve.stop()
    assert (live.returncode, ready.returncode) == (0, 0), live.stderr + ready.stderr
    gone = run(sys.executable, str(script), f"127.0.0.1:{free_port()}")
    assert gone.returncode == 1 and gone.stderr.startswith("unhealthy: ") and "UNAVAILABLE" in gone.stderr


# ------------------------------------------------------------------ slow
def docker_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="module")
def docker_daemon(tmp_path_factory) -> Iterator[None]:
    """A Docker daemon: the running one, else ``dockerd`` started here (root), stopped after the module."""
    if docker_answers():
        yield
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        unavailable_here("no Docker daemon answers and none can be started here (needs root and dockerd: "
                    "apt-get install docker.io)")
    folder = tmp_path_factory.mktemp("dockerd")
    started, log = None, ""
    # overlay2 first (Docker's default); vfs where the kernel or the file system refuses overlay.
    for driver in ("overlay2", "vfs"):
        log_path = folder / f"dockerd-{driver}.log"
        with log_path.open("w") as output:
            process = subprocess.Popen([dockerd, "--storage-driver", driver], stdout=output, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline and not docker_answers():
            time.sleep(1)
        if process.poll() is None and docker_answers():
            started = process
            print(f"dockerd started here (storage driver {driver})")
            break
        if process.poll() is None:
            process.terminate()
            process.wait(30)
        log += log_path.read_text()[-2000:]
    if started is None:
        unavailable_here(f"no Docker daemon answers and dockerd did not start here:\n{log}")
    try:
        yield
    finally:
        started.terminate()
        started.wait(60)


def run(*command: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


class Stack:
    """``docker-compose -p PROJECT`` of the repository's compose file, with its own secrets and free ports."""

    def __init__(self, secrets: Path, job: str, replicas: tuple[str, ...]) -> None:
        self.project = f"p2test{uuid.uuid4().hex[:10]}"
        self.replicas = replicas
        service = ",".join(f"{name}:50051" for name in replicas)
        self.env = compose_env(secrets, P2_EXAMPLE_JOB=job, P2_EXAMPLE_SERVICE=service)
        self.service = service

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return run(compose_command(), "-f", str(COMPOSE_FILE), "-p", self.project, *args, env=self.env,
                   timeout=timeout)

    def up(self) -> None:
        scale = [] if "p2-b" in self.replicas else ["--scale", "p2-b=0"]
        started = self.compose("up", "-d", *scale)
        assert started.returncode == 0, started.stderr

    def container(self, service: str) -> str:
        found = self.compose("ps", "-q", service).stdout.strip()
        assert found, f"no container of {service}"
        return found

    def state(self, service: str) -> dict:
        return json.loads(run("docker", "inspect", "-f", "{{json .State}}", self.container(service)).stdout)

    def p2(self, *args: str) -> subprocess.CompletedProcess:
        """``p2 ARGS`` inside the first replica, with the stack's token and service addresses."""
        return self.compose("exec", "-T", self.replicas[0], "p2", *args, "--service", self.service,
                            "--token-file", "/run/secrets/p2_token", "--json", "-", timeout=60)

    def published(self, service: str, port: int) -> str:
        return self.compose("port", service, str(port)).stdout.strip()

    def down(self) -> subprocess.CompletedProcess:
        return self.compose("down", "-v", "--remove-orphans", timeout=300)


def committed_plans(stack: Stack, job: str) -> list[dict]:
    listed = stack.p2("plan", "list", "--job", job)
    if listed.returncode != 0:
        return []
    return [plan for plan in json.loads(listed.stdout)["plans"] if plan["state"] == "committed"]


def prometheus_query(address: str, query: str) -> list[dict]:
    url = f"http://{address}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        document = json.load(answer)
    assert document["status"] == "success", document
    return document["data"]["result"]


def leader_election_built(tag: str) -> bool:
    """Whether the images have several replicas' leader election (``p2 serve --advertise``) and ranks that
    take several addresses; until then the stack runs one replica."""
    serve = run("docker", "run", "--rm", f"p2-service:{tag}", "serve", "--help", timeout=120)
    ranks = run("docker", "run", "--rm", f"p2-worker:{tag}", "python", "-c",
                "from enforcer.settings import EnforcerSettings; "
                "EnforcerSettings.from_env({'P2_SERVICE': 'p2-a:50051,p2-b:50051'})", timeout=120)
    return "--advertise" in serve.stdout and ranks.returncode == 0


@pytest.mark.slow
def test_docker_compose_up_trains_the_example_job_planned_by_the_service(tmp_path, docker_daemon):
    tag = project_version()
    started = time.monotonic()
    built = run(str(BUILD), timeout=BUILD_TIMEOUT)
    build_seconds = time.monotonic() - started
    print(built.stderr)
    assert built.returncode == 0, built.stderr[-4000:]
    print(f"build.sh: {build_seconds:.0f} s")

    job = f"compose-{uuid.uuid4().hex[:8]}"
    replicas = REPLICAS if leader_election_built(tag) else REPLICAS[:1]
    if len(replicas) == 1:
        print("one service replica: the images have no leader election yet (p2 serve --advertise)")
    stack = Stack(make_secrets(tmp_path / "secrets"), job, replicas)
    try:
        up_unix = time.time()
        stack.up()
        first_commit, exits = None, {}
        deadline = time.monotonic() + TRAIN_TIMEOUT
        while time.monotonic() < deadline and len(exits) < len(WORKERS):
            for worker in WORKERS:
                state = stack.state(worker)
                if worker not in exits and state["Status"] == "exited":
                    exits[worker] = state["ExitCode"]
            if first_commit is None:
                plans = committed_plans(stack, job)
                first_commit = min((plan["decided_unix"] for plan in plans), default=None)
            time.sleep(2)
        logs = {worker: stack.compose("logs", "--no-color", "--tail", "40", worker).stdout for worker in WORKERS}
        assert len(exits) == len(WORKERS), f"the job did not end within {TRAIN_TIMEOUT} s:\n{logs}"
        assert exits == {worker: 0 for worker in WORKERS}, logs

        # The service committed a plan for the job, every rank acknowledged it, and the ranks ran it.
        plans = committed_plans(stack, job)
        assert plans, stack.compose("logs", "--no-color", "--tail", "60", *replicas).stdout
        assert {rank["state"] for rank in plans[0]["ranks"]} == {"acked_commit"} and len(plans[0]["ranks"]) == 4
        first_commit = min(plan["decided_unix"] for plan in plans)
        assert "step" in logs["worker-0"] + logs["worker-1"]

        # Prometheus scraped the service: the job's series come from the leader, whose target is up. (A
        # standby's /metrics has the service's own series only, p2_service_leader 0 among them.)
        prometheus = stack.published("prometheus", 9090)
        deadline, up, versions = time.monotonic() + 60, {}, []
        while time.monotonic() < deadline:
            up = {series["metric"]["instance"]: series["value"][1]
                  for series in prometheus_query(prometheus, 'up{job="p2-service"}')}
            versions = prometheus_query(prometheus, f'max_over_time(p2_plan_version{{job_id="{job}"}}[10m])')
            if versions and all(up.get(series["metric"]["instance"]) == "1" for series in versions):
                break
            time.sleep(2)
        print(f"Prometheus' targets (up): {up}")
        assert versions, f"Prometheus has no p2_plan_version of {job}: {up}"
        assert max(float(series["value"][1]) for series in versions) >= plans[0]["version"], versions
        leaders = {series["metric"]["instance"] for series in versions}
        assert leaders <= {f"{name}:8080" for name in replicas} and all(up[name] == "1" for name in leaders), up
    finally:
        down = stack.down()
        print(down.stderr[-2000:])
    sizes = {image: int(run("docker", "image", "inspect", "-f", "{{.Size}}", f"{image}:{tag}").stdout)
             for image in ("p2-service", "p2-worker", "p2-redis", "p2-prometheus")}
    print("image sizes: " + ", ".join(f"{image} {size / 1e6:.0f} MB" for image, size in sizes.items()))
    print(f"docker-compose up to the first committed plan: {first_commit - up_unix:.1f} s "
          f"({len(replicas)} service replica(s))")
    assert down.returncode == 0, down.stderr
