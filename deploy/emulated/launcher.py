"""Running one command as N×K ranks of an emulated cluster (``p2 cluster run``).

Rank ``r`` runs on node ``r // K``: it is entered into that node's namespace
with ``nsenter --net`` and given the node's sysfs in a private mount namespace
(:func:`deploy.emulated.probe.in_namespace`; each step ``exec``s the next, so
the rank *is* the process we started) and gets torchrun's variables — ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` (node 0's channel-0
address), ``MASTER_PORT`` — plus ``GLOO_SOCKET_IFNAME=nic0``,
``OMP_NUM_THREADS=1``, ``PYTHONUNBUFFERED=1`` and ``P2_TOPOLOGY`` (the
cluster's ``topology.yaml``, for the optimizer service) unless set, and
``P2_CLUSTER``, ``P2_NODE``, ``P2_CHANNEL_IFNAMES`` (``nic0[,nic1]``) and
``P2_CHANNEL_ADDRS`` (this node's address per channel). Gloo binds to the
node's ``nic0`` address, yet two ranks of one node still talk through ``lo``:
the kernel routes a namespace's own addresses via the local table. Unshaped
(``no_shaping``, or a loopback-only cluster) every rank runs on the host with
``MASTER_ADDR=127.0.0.1`` and ``GLOO_SOCKET_IFNAME=lo``.

Supervision, in one thread with one ``select`` loop (no reader threads, so
signal handling stays simple):

* each rank's stdout and stderr share one pipe, so its lines keep their order;
  every line is written whole, prefixed ``[r<rank>] ``;
* the *first* rank to fail decides the exit code (``128 + n`` for a signal);
  every other rank's process group then gets SIGTERM and, after ``grace``
  seconds, SIGKILL (each rank leads its own session, so its children go too);
* SIGINT/SIGTERM sent to the launcher are forwarded to every rank (a second
  one kills them); ``timeout`` stops everything with exit code 124;
* if the launcher itself is killed, the kernel kills each rank
  (``PR_SET_PDEATHSIG``, set by util-linux ``setpriv`` ahead of the namespace
  steps; it survives the ``exec`` of each); their own children are found later by
  ``p2 cluster down`` through the namespaces and the ``P2_CLUSTER`` marker.
  No Python runs between ``fork`` and ``exec`` (no ``preexec_fn``): a launcher
  that also holds gRPC threads (a test, ``p2 demo``) forked its children
  through Python's slow path before, and one rank in a few hundred died there
  on gRPC's fork handlers ("epoll_wait error: Bad file descriptor"). Without
  ``setpriv`` the ranks start without the death signal. A launcher killed
  between ``fork`` and ``setpriv``'s ``prctl`` leaves its rank to
  ``p2 cluster down``.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from deploy.emulated import netns, probe
from deploy.emulated.privileges import require_namespace_privileges
from deploy.emulated.processes import MARKER
from deploy.emulated.state import ClusterInfo
from deploy.errors import DeployError

TIMEOUT_EXIT = 124
DEFAULT_GRACE = 3.0
DRAIN_SECONDS = 1.0
MAX_LINE = 1 << 16
_POLL = 0.05


def rank_environment(info: ClusterInfo, rank: int, master_port: int, on_host: bool) -> dict[str, str]:
    """The variables rank ``rank`` gets on top of the launcher's environment."""
    node = info.node_of(rank)
    if on_host:
        ifnames = ["lo"] * info.channels
        addresses = ["127.0.0.1"] * info.channels
        master = "127.0.0.1"
    else:
        nics = [info.nic(node, channel) for channel in range(info.channels)]
        ifnames = [nic.ifname for nic in nics]
        addresses = [nic.address for nic in nics]
        master = info.master_addr
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(info.world_size),
        "LOCAL_RANK": str(rank % info.per_node),
        "LOCAL_WORLD_SIZE": str(info.per_node),
        "GROUP_RANK": str(node),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(master_port),
        "GLOO_SOCKET_IFNAME": ifnames[0],
        MARKER: info.name,
        "P2_NODE": str(node),
        "P2_CHANNEL_IFNAMES": ",".join(ifnames),
        "P2_CHANNEL_ADDRS": ",".join(addresses),
    }


@dataclass
class _Rank:
    rank: int
    process: subprocess.Popen
    partial: bytearray = field(default_factory=bytearray)
    open: bool = True
    code: int | None = None


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run with SIGKILL as its parent-death signal (unchanged without ``setpriv``)."""
    setpriv = shutil.which("setpriv")
    return list(argv) if setpriv is None else [setpriv, "--pdeathsig", "KILL", "--", *argv]


class _Supervisor:
    """The select loop of :func:`run_ranks` (module docstring)."""

    def __init__(self, ranks: list[_Rank], out: TextIO, err: TextIO, timeout: float | None, grace: float) -> None:
        self.ranks = ranks
        self.out: TextIO | None = out
        self.err = err
        self.timeout = timeout
        self.grace = grace
        self.selector = selectors.DefaultSelector()
        self.signals: list[int] = []
        self.result: int | None = None
        self.stop_since: float | None = None
        self.killed = False

    # ---------------------------------------------------------------- output
    def note(self, text: str) -> None:
        try:
            self.err.write(f"[launcher] {text}\n")
            self.err.flush()
        except (OSError, ValueError):
            pass

    def _emit(self, rank: _Rank, data: bytes) -> None:
        if self.out is None:
            return
        try:
            self.out.write(f"[r{rank.rank}] {data.decode('utf-8', 'replace')}\n")
            self.out.flush()
        except (OSError, ValueError):  # reader went away (| head): keep supervising silently
            self.out = None

    def _read(self, rank: _Rank) -> None:
        fd = rank.process.stdout.fileno()
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(rank)
            return
        rank.partial += chunk
        *lines, rest = rank.partial.split(b"\n")
        for line in lines:
            self._emit(rank, bytes(line))
        rank.partial = bytearray(rest)
        if len(rank.partial) >= MAX_LINE:  # no newline in sight: pass it on in pieces
            self._emit(rank, bytes(rank.partial))
            rank.partial.clear()

    def _close(self, rank: _Rank) -> None:
        if rank.partial:
            self._emit(rank, bytes(rank.partial))
            rank.partial.clear()
        if rank.open:
            self.selector.unregister(rank.process.stdout)
            rank.process.stdout.close()
            rank.open = False

    # -------------------------------------------------------------- control
    def signal_all(self, sig: int) -> None:
        for rank in self.ranks:
            try:
                os.killpg(rank.process.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self, why: str, result: int | None) -> None:
        if self.result is None and result is not None:
            self.result = result
        if self.stop_since is not None:
            return
        live = sum(rank.code is None for rank in self.ranks)
        self.note(f"{why}; stopping {live} rank(s)" if live else why)
        self.stop_since = time.monotonic()
        self.signal_all(signal.SIGTERM)

    def on_signal(self, sig: int, _frame) -> None:
        self.signals.append(sig)

    def _handle_signals(self) -> None:
        while self.signals:
            sig = self.signals.pop(0)
            name = signal.Signals(sig).name
            if self.stop_since is None:
                self.note(f"got {name}, passing it on to the ranks")
                self.stop_since = time.monotonic()
                if self.result is None:
                    self.result = 128 + sig
                self.signal_all(sig)
            else:
                self.note(f"got {name} again, killing the ranks")
                self.signal_all(signal.SIGKILL)
                self.killed = True

    def _reap(self) -> None:
        for rank in self.ranks:
            if rank.code is not None or rank.process.poll() is None:
                continue
            rank.code = _exit_code(rank.process.returncode)
            if rank.code != 0 and self.result is None:
                self.stop(f"rank {rank.rank} exited with code {rank.code}", rank.code)

    def run(self) -> int:
        for rank in self.ranks:
            os.set_blocking(rank.process.stdout.fileno(), False)
            self.selector.register(rank.process.stdout, selectors.EVENT_READ, rank)
        started = time.monotonic()
        all_done_at: float | None = None
        while True:
            for key, _ in self.selector.select(_POLL):
                self._read(key.data)
            self._handle_signals()
            self._reap()
            now = time.monotonic()
            if self.timeout is not None and self.stop_since is None and now - started > self.timeout:
                self.stop(f"timeout: ranks still running after {self.timeout:g} s", TIMEOUT_EXIT)
            if self.stop_since is not None and not self.killed and now - self.stop_since > self.grace:
                if any(rank.code is None for rank in self.ranks):
                    self.note(f"ranks still running {self.grace:g} s after SIGTERM; sending SIGKILL")
                self.signal_all(signal.SIGKILL)
                self.killed = True
            if all(rank.code is not None for rank in self.ranks):
                all_done_at = all_done_at or now
                holding = [rank for rank in self.ranks if rank.open]
                if not holding:
                    break
                if now - all_done_at > DRAIN_SECONDS:
                    # Children of finished ranks still hold the pipe: end them.
                    for rank in holding:
                        try:
                            os.killpg(rank.process.pid, signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
                        self._close(rank)
                    break
        if self.stop_since is not None:
            self.signal_all(signal.SIGKILL)  # leftovers in the ranks' process groups
        self.selector.close()
        return self.result if self.result is not None else 0


def run_ranks(info: ClusterInfo, command: Sequence[str], env: Mapping[str, str] | None = None,
              no_shaping: bool = False, timeout: float | None = None, out: TextIO | None = None,
              err: TextIO | None = None, grace: float = DEFAULT_GRACE, master_port: int | None = None) -> int:
    """Run ``command`` as every rank of ``info`` and supervise them (module
    docstring). ``env`` adds to (and overrides) each rank's environment.
    ``master_port`` is rank 0's rendezvous port (None: a free one). Rank
    output goes to ``out`` (default stdout), launcher notes to ``err``
    (default stderr). Returns 0 if every rank succeeded, else the first
    failure's exit code (124 on timeout)."""
    command = list(command)
    if not command:
        raise DeployError("no command to run; give it after --, e.g. p2 cluster run -- python train.py")
    if timeout is not None and not timeout > 0:
        raise DeployError(f"--timeout {timeout!r} must be a positive number of seconds")
    extra = dict(env or {})
    if shutil.which(command[0], path={**os.environ, **extra}.get("PATH")) is None:
        raise DeployError(f"cannot start {command[0]!r}: no such executable (give its path or put it on PATH)")
    on_host = no_shaping or not info.shaped
    if not on_host:
        require_namespace_privileges("entering the cluster's namespaces",
                                     "use --no-shaping to run every rank unshaped on the host")
        present = set(netns.list_namespaces())
        missing = [ns for ns in info.namespaces if ns not in present]
        if missing:
            raise DeployError(f"cluster {info.name!r} is partial (namespace {missing[0]} is missing); "
                                    f"recreate it with p2 cluster down --name {info.name} and p2 cluster up")
    node_ns = [] if on_host else list(info.node_namespaces)
    if master_port is None:
        master_port = probe.free_port(None if on_host else node_ns[0])
    elif not 0 < master_port < 65536:
        raise DeployError(f"master port {master_port!r} is not a TCP port number (1-65535)")

    base = dict(os.environ)
    base.setdefault("OMP_NUM_THREADS", "1")
    base.setdefault("PYTHONUNBUFFERED", "1")
    if info.topology_path.is_file():        # what the optimizer service plans the job on
        base.setdefault("P2_TOPOLOGY", str(info.topology_path))
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    ranks: list[_Rank] = []
    supervisor = _Supervisor(ranks, out, err, timeout, grace)
    in_main = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, supervisor.on_signal)
    try:
        for rank in range(info.world_size):
            rank_env = {**base, **rank_environment(info, rank, master_port, on_host), **extra}
            argv = _dying_with_parent(probe.in_namespace(None if on_host else node_ns[info.node_of(rank)], command))
            try:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, env=rank_env, start_new_session=True)
            except OSError as exc:
                supervisor.signal_all(signal.SIGKILL)
                for started in ranks:
                    started.process.wait()
                    started.process.stdout.close()
                raise DeployError(f"cannot start {command[0]!r}: {exc.strerror or exc}") from None
            ranks.append(_Rank(rank=rank, process=process))
        return supervisor.run()
    finally:
        if any(rank.process.poll() is None for rank in ranks):  # only after an error in the loop itself
            supervisor.signal_all(signal.SIGKILL)
            for rank in ranks:
                rank.process.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
