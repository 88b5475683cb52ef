"""The Slurm deployment (deploy/slurm/) on a real one-node Slurm, no mocks.

Fast: the scripts parse (``bash -n``), run outside an allocation they stop with one line,
and the systemd unit and its env file name only options and settings ``p2 serve`` has
(``systemd-analyze verify`` too, where it is installed).

Slow: munged, slurmctld and slurmd run as this test's children
(:mod:`tests.support.slurm_cluster`), and ``sbatch --wait`` submits train.sbatch with
examples/train_ddp.py, 2 ranks on the one node (``srun torchrun --rdzv-backend c10d``, gloo
under ``p2enforcer``). With the service the script starts in the allocation, the job registers
its 2 ranks, the service's replanning loop commits a plan, the ranks train under it, the job
exits 0 and the service stopped. With a running one (``P2_SERVICE``) the script starts none and
the ranks register there. The ranks' topology claims 2 nodes with 25 MB/s NICs so the model
predicts a gain for the job.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.emulated.model import cluster_topology
from optimizer_service.service.store import open_store
from optimizer_service.settings import Settings
from tests.support.cli import ROOT, p2
from tests.support.required import unavailable_here
from tests.support.service_process import ServeProcess
from tests.support.slurm_cluster import SlurmCluster, free_port, start_slurm, unavailable

SLURM = ROOT / "deploy" / "slurm"
SBATCH = SLURM / "train.sbatch"
SERVICE_SCRIPT = SLURM / "p2-service.sh"
UNIT = SLURM / "p2-service.service"
ENV_EXAMPLE = SLURM / "p2-service.env.example"
README = SLURM / "README.md"
POLICY = ["min_gain=0", "first_plan_after=8", "warmup=2", "window=8", "min_samples=4", "evaluate=4",
          "consecutive=3", "cooldown=6"]
AFTER_PLAN = 3
MAX_STEPS = 1500          # a cap: --after-plan ends the job a few steps after its plan
FIXED_STEPS = 20          # the job on a running service: registering is what it shows
JOB_TIMEOUT = 240         # a cap for a stuck job; one takes about 30 s on 2 idle cores
#: Variables the unit and the script use themselves; every other P2_* of the env file is a p2 setting.
OWN_VARIABLES = {"P2_LISTEN"}


def serve_flags() -> set[str]:
    """Every option ``p2 serve --help`` lists."""
    shown = p2("serve", "--help")
    assert shown.returncode == 0, shown.stderr
    return set(re.findall(r"^\s+(--[a-z][a-z-]*)", shown.stdout, re.MULTILINE))


def test_the_scripts_parse():
    for script in (SBATCH, SERVICE_SCRIPT):
        checked = subprocess.run(["bash", "-n", str(script)], check=False, capture_output=True, text=True)
        assert checked.returncode == 0, f"{script.name}: {checked.stderr}"


def test_the_sbatch_script_outside_an_allocation_says_so_in_one_line():
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    ran = subprocess.run(["bash", str(SBATCH), "train.py"], check=False, capture_output=True, text=True, env=env,
                         timeout=30)
    assert ran.returncode == 2 and ran.stderr.count("\n") == 1, ran.stderr
    assert ran.stderr.startswith("train.sbatch: error: not inside a Slurm allocation")


def serve_commands(text: str) -> list[str]:
    """Every ``p2 serve ...`` in ``text`` (continued lines joined), comments and docs included, and
    the shell arrays the scripts pass it (``token_args=(...)``)."""
    return re.findall(r"p2 serve\b[^\n`]*|\b\w+_args=\([^)]*\)", text.replace("\\\n", " "))


def test_the_unit_and_the_scripts_name_only_options_p2_serve_has():
    known = serve_flags()
    exec_start = [line for line in UNIT.read_text().splitlines() if line.startswith("ExecStart=")]
    assert len(exec_start) == 1 and serve_commands(exec_start[0]), exec_start
    for path in (UNIT, SERVICE_SCRIPT, SBATCH, README):
        commands = serve_commands(path.read_text())
        used = {flag for command in commands for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", command)}
        assert commands and used <= known, f"{path.name}: {sorted(used - known)} not in 'p2 serve --help'"
    sbatch_flags = set(re.findall(r"(--[a-z][a-z-]*)", " ".join(serve_commands(SBATCH.read_text()))))
    assert {"--listen", "--port-file", "--store", "--token-file"} <= sbatch_flags, sbatch_flags
    # the env file: P2_* settings p2 serve reads (or the unit's own), and no token in it
    settings = {f"P2_{name.upper()}" for name in Settings.model_fields}
    named = set(re.findall(r"^#?\s*(P2_[A-Z_]+)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    assert named and named - settings <= OWN_VARIABLES, named - settings
    assert not re.search(r"^P2_TOKEN=", ENV_EXAMPLE.read_text(), re.MULTILINE)


def test_systemd_accepts_the_unit(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    unit = tmp_path / UNIT.name      # verify needs the executable to exist: this environment's p2
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/p2", str(Path(sys.executable).parent / "p2")))
    verified = subprocess.run(["systemd-analyze", "verify", str(unit)], check=False, capture_output=True, text=True,
                              timeout=60)
    assert verified.returncode == 0 and not verified.stdout + verified.stderr, verified.stdout + verified.stderr


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = unavailable()
    if reason:
        unavailable_here(reason)
    cluster = start_slurm(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


def submit(cluster: SlurmCluster, folder: Path, env: dict[str, str], steps: list[str]) -> tuple[str, str]:
    """``sbatch --wait`` train.sbatch with the DDP example (its ``steps`` flags), 2 ranks on the node;
    the Slurm job id and the job's output. Fails the test with that output when the job does not exit 0."""
    folder.mkdir(parents=True, exist_ok=True)
    topology = folder / "topology.yaml"
    topology.write_text(cluster_topology("slurm", 2, 1, 2.5e7, 2.5e7, 1e9))
    job_env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "P2_NPROC_PER_NODE": "2",
               "P2_TOPOLOGY": str(topology), "P2_SWITCH_EVERY": "4", "P2_RDZV_PORT": str(free_port()),
               "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **env}
    try:
        ran = cluster.command("sbatch", "--wait", "--parsable", "--nodes=1", "--cpus-per-task=2",
                              f"--chdir={folder}", f"--output={folder / 'job.out'}", str(SBATCH),
                              str(ROOT / "examples" / "train_ddp.py"), *steps, "--json", str(folder / "result.json"),
                              env=job_env, cwd=folder, timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        output = (folder / "job.out").read_text(errors="replace") if (folder / "job.out").exists() else ""
        pytest.fail(f"the job ran past {JOB_TIMEOUT} s:\n{output[-4000:]}")
    output = (folder / "job.out").read_text(errors="replace")
    assert ran.returncode == 0, f"sbatch: {ran.returncode} {ran.stderr}\n{output[-4000:]}"
    return ran.stdout.strip().split(";")[0], output


def assert_planned_and_trained(store_url: str, job: str, folder: Path) -> None:
    """The store holds the job with its 2 ranks and a committed plan every rank acknowledged;
    rank 0's JSON shows the last steps ran under that plan."""
    store = open_store(store_url)
    try:
        document = store.get_job(job)
        plans = store.list_plans(job)
        states = [store.get_plan_state(job, plan.version) for plan in plans]
        kinds = [event["kind"] for event in store.recent_events(job, limit=1000)]
    finally:
        store.close()
    assert document is not None and document["world_size"] == 2 and sorted(document["ranks"]) == ["0", "1"]
    committed = [state for state in states if state["decision"] == "commit"]
    assert committed, f"no plan committed: {states} {kinds}"
    assert {tuple(value) for value in committed[0]["ranks"].values()} == {("acked_commit", "")}, committed[0]
    assert kinds[0] == "replan" and "committed" in kinds, kinds
    result = json.loads((folder / "result.json").read_text())
    version = committed[0]["version"]
    assert result["world_size"] == 2 and result["plan_versions"][-1] == version, result["plan_versions"]
    assert 0 < result["steps"] < MAX_STEPS          # --after-plan ended it: the plan arrived while it trained


@pytest.mark.slow
def test_a_slurm_job_is_planned_by_the_service_its_allocation_starts(slurm, tmp_path):
    token = tmp_path / "token"
    token.write_text("slurm-token-0123456789abcdef\n")
    token.chmod(0o600)
    serve_args = " ".join(f"--policy {item}" for item in POLICY) + " --search-budget 1 --http off"
    job_id, output = submit(slurm, tmp_path / "job", {"P2_TOKEN_FILE": str(token), "P2_SERVE_ARGS": serve_args},
                            ["--steps", str(MAX_STEPS), "--after-plan", str(AFTER_PLAN)])
    run_dir = tmp_path / "job" / f"p2-{job_id}"
    log = (run_dir / "service.log").read_text()
    assert "p2 serve is SERVING at" in output and "p2 serve stopped" in output, output
    assert "training exited with code 0" in output and re.search(r"^step \d+ loss", output, re.MULTILINE), output
    assert "token required" in log and "service: stopping" in log, log
    job = f"slurm-{job_id}"
    assert f"job {job} rank 1: registered" in log and f"job {job}: committed" in log, log
    assert_planned_and_trained(f"sqlite:///{run_dir / 'service.db'}", job, tmp_path / "job")


@pytest.mark.slow
def test_a_slurm_job_links_to_a_running_service(slurm, tmp_path):
    """P2_SERVICE set: the script starts no service, and the job's ranks register with the running one."""
    token = tmp_path / "token"
    token.write_text("standing-token-0123456789abcdef\n")
    serve = ServeProcess(tmp_path, "--token-file", str(token), "--http", "off")
    try:
        job_id, output = submit(slurm, tmp_path / "job", {"P2_SERVICE": serve.address, "P2_TOKEN_FILE": str(token),
                                                          "P2_JOB": "standing"}, ["--steps", str(FIXED_STEPS)])
    finally:
        code, log = serve.stop()
    assert code == 0 and "job standing: live: all 2 ranks connected" in log, log
    assert "p2 serve" not in output and not (tmp_path / "job" / f"p2-{job_id}").exists(), output
    assert "training exited with code 0" in output and f"step {FIXED_STEPS} loss" in output, output
    store = open_store(f"sqlite:///{tmp_path / 'service.db'}")
    try:
        document = store.get_job("standing")
    finally:
        store.close()
    assert document["world_size"] == 2 and sorted(document["ranks"]) == ["0", "1"], document
