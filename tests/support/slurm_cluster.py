"""A real one-node Slurm for tests: :func:`start_slurm` runs ``munged``, ``slurmctld`` and
``slurmd`` as child processes on this host, with a test ``slurm.conf`` (``proctrack/linuxproc``,
``task/none``, ``select/cons_tres``, no accounting, no ``cgroup.conf``, free ports, state and
spool in the test's folder), and waits until the node is idle. :meth:`SlurmCluster.stop`
cancels what still runs and stops every daemon it started.

    cluster = start_slurm(tmp_path)          # needs root: slurmd runs jobs as their users
    cluster.command("sbatch", "--wait", "job.sh")
    cluster.stop()

Munge gets its own key and socket, so the host's munged (if any) is left alone. munged wants
every folder above its socket open to all (execute), which pytest's 0700 base folder is not:
its folder is a fresh one in the system's temporary folder, removed by :meth:`stop`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "squeue", "scancel", "scontrol")
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
INSTALL = "apt-get install -y slurm-wlm munge"


def unavailable() -> str | None:
    """Why a one-node Slurm cannot run here (tests skip with it), or None."""
    missing = [name for name in (*DAEMONS, *CLIENTS, "munge") if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed ({INSTALL})"
    if os.geteuid() != 0:
        return "slurmd and munged need root to run jobs (the tests run as an ordinary user)"
    return None


class SlurmStartError(RuntimeError):
    """A daemon did not start, or the node did not become idle; the message holds its log's tail."""


@dataclass
class SlurmCluster:
    folder: Path                      # slurm.conf, state, spool and logs
    munge_folder: Path                # key and socket (see the module's docstring)
    conf: Path
    node: str                         # this host's short name, the one node
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        """This process' environment with ``SLURM_CONF``: what the client commands need."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout: float = 60, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess:
        """A Slurm client command (``sbatch``, ``sinfo``...) against this cluster; ``env`` adds to :attr:`env`."""
        return subprocess.run(list(args), check=False, capture_output=True, text=True, timeout=timeout,
                              env={**self.env, **(env or {})}, cwd=cwd)

    def log(self, name: str) -> str:
        """The tail of a daemon's log (``munged``, ``slurmctld`` or ``slurmd``)."""
        path = self.folder / "log" / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else f"(no {name} log)"

    def node_state(self) -> str:
        shown = self.command("sinfo", "--noheader", "--nodes", self.node, "--format", "%T", timeout=10)
        return shown.stdout.strip() if shown.returncode == 0 else ""

    def stop(self) -> None:
        """Cancel every job, wait for them to end, stop the daemons (SIGTERM, then SIGKILL), remove munge's folder."""
        if self.processes.get("slurmctld") and self.processes["slurmctld"].poll() is None:
            self.command("scancel", "--full", "--user", "root", timeout=10)
            deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
            while time.monotonic() < deadline and self.command("squeue", "--noheader", timeout=10).stdout.strip():
                time.sleep(0.2)
        for name in reversed(DAEMONS):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.munge_folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def node_line(name: str) -> str:
    """This host as a slurm.conf NodeName line: its real CPUs and memory, as ``slurmd -C`` reports."""
    probe = subprocess.run(["slurmd", "-C"], check=False, capture_output=True, text=True, timeout=30)
    first = probe.stdout.splitlines()[0] if probe.returncode == 0 and probe.stdout else ""
    if not first.startswith("NodeName="):
        raise SlurmStartError(f"slurmd -C did not describe this host: {probe.stderr.strip() or probe.stdout.strip()}")
    hardware = first.split(None, 1)[1]
    return f"NodeName={name} {hardware} State=UNKNOWN"


def write_conf(folder: Path, munge_socket: Path, node: str) -> Path:
    """The test's slurm.conf: one node (this host), one partition, nothing outside ``folder``."""
    for name in ("state", "spool", "log"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    plugstack = folder / "plugstack.conf"          # empty: no SPANK plugins of the host's
    plugstack.write_text("")
    lines = [
        "ClusterName=p2test",
        f"SlurmctldHost={node}",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
        f"PlugStackConfig={plugstack}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/builtin",
        "KillWait=5",
        # sbatch --wait polls every 2 s, growing 4-fold while below MinJobAge / 2 (to 32 s with the
        # default 300): 10 keeps it at 8 s, still under the age a finished job is kept for
        "MinJobAge=10",
        node_line(node),
        f"PartitionName=test Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _spawn(cluster: SlurmCluster, name: str, command: list[str]) -> None:
    with (cluster.folder / "log" / f"{name}.out").open("w") as out:
        cluster.processes[name] = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out,
                                                   stderr=subprocess.STDOUT, start_new_session=True)


def _wait(cluster: SlurmCluster, what: str, ready) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not ready():
        for name, process in cluster.processes.items():
            if process.poll() is not None:
                out = (cluster.folder / "log" / f"{name}.out").read_text(errors="replace")[-1500:]
                raise SlurmStartError(f"{name} exited with code {process.returncode} while waiting for {what}: "
                                      f"{out.strip() or cluster.log(name)}")
        if time.monotonic() > deadline:
            raise SlurmStartError(f"{what} not within {START_TIMEOUT_SECONDS:.0f} s; slurmctld: "
                                  f"{cluster.log('slurmctld')[-800:]} slurmd: {cluster.log('slurmd')[-800:]}")
        time.sleep(0.1)


def start_slurm(folder: Path) -> SlurmCluster:
    """munged, slurmctld and slurmd on this host, the node idle when it returns (:func:`unavailable` first)."""
    folder.mkdir(parents=True, exist_ok=True)
    munge_folder = Path(tempfile.mkdtemp(prefix="p2-munge-"))
    munge_folder.chmod(0o755)
    key = munge_folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = munge_folder / "munge.socket"
    node = socket.gethostname().split(".")[0]
    cluster = SlurmCluster(folder, munge_folder, folder / "slurm.conf", node)
    try:
        cluster.conf = write_conf(folder, munge_socket, node)
        _spawn(cluster, "munged", ["munged", "--foreground", f"--key-file={key}", f"--socket={munge_socket}",
                                   f"--pid-file={munge_folder / 'munged.pid'}", f"--seed-file={munge_folder / 'seed'}",
                                   f"--log-file={folder / 'log' / 'munged.log'}"])
        _wait(cluster, "munged's socket", munge_socket.exists)
        # -i: ignore state a previous run might have left; -D: stay in the foreground, our child
        _spawn(cluster, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(cluster.conf)])
        _spawn(cluster, "slurmd", ["slurmd", "-D", "-f", str(cluster.conf), "-N", node])
        _wait(cluster, f"node {node} idle", lambda: cluster.node_state() == "idle")
    except BaseException:
        cluster.stop()
        raise
    return cluster
