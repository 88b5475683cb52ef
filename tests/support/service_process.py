"""A real ``p2 serve`` process, and simulated ranks of one job in a background
event loop, for tests that talk to the service from the outside."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from tests.support.cli import ROOT
from tests.support.participants import SimRank, run_rank

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_pick = random.SystemRandom()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, below the kernel's ephemeral range.

    Tests start a service again on the port it had (a crash, a killed leader). A port
    from the ephemeral range (what binding port 0 gives) can meanwhile be taken as the
    source port of a client's connection to another service, and the restart then fails
    with "address already in use": the failover test's restarted leader did, once in a
    CI run. The kernel never picks a source port below the range."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(100):
        port = _pick.randrange(max(1024, low - 10_000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:          # the range below is all taken: any free port
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: ``python -c`` code that runs ``p2`` (its arguments after the limit) with at most ``argv[1]`` open files.
LIMITED_FILES = ("import resource, runpy, sys; limit = int(sys.argv[1]); "
                 "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)); sys.argv = ['p2', *sys.argv[2:]]; "
                 "runpy.run_module('optimizer_service.cli', run_name='__main__', alter_sys=True)")


class ServeProcess:
    """``p2 serve`` on ``port`` (0: a free one) with its store in ``folder`` (or ``store``).

    Its log (stderr) goes to a file in ``folder`` (:attr:`log_path`, :meth:`log`), never a pipe
    that a service logging a lot could fill and block on. ``preexec`` runs in the child before
    it starts (e.g. to enter a mount namespace of its own). ``open_files`` lowers its file
    descriptor limit from its first line of Python, not in a ``preexec``: Python runs its fork
    handlers around a ``preexec``, and gRPC's (this process serves and dials gRPC) then raced the
    child's closing of inherited descriptors ("epoll_wait error: Bad file descriptor" in the
    child's log, and the child died before it served: twice on 8 December, each time after many
    other tests in the same process, never with the test file alone).
    ``root`` runs the service of another
    checkout of the project (benchmarks/service_abuse.py compares two). With ``dashboard`` it
    also serves the dashboard on a free port: :attr:`http_port`, :attr:`http_url`."""

    _count = itertools.count()

    def __init__(self, folder: Path, *extra: str, env: dict[str, str] | None = None, port: int = 0,
                 store: str | None = None, preexec=None, root: Path = ROOT, dashboard: bool = False,
                 standby: bool = False, open_files: int | None = None) -> None:
        """With ``standby`` (and a ``port``), return once the service answers health checks, as a
        standby does, instead of once it leads (when it writes its port file)."""
        self.port_file = folder / f"port-{port}" if standby else folder / "port"
        self.port_file.unlink(missing_ok=True)
        http_port_file = folder / "http.port"
        if dashboard:
            http_port_file.unlink(missing_ok=True)
            extra = ("--http", "127.0.0.1:0", "--http-port-file", str(http_port_file), *extra)
        self.log_path = folder / f"serve-{next(self._count)}.log"
        environment = dict(os.environ, **(env or {}))
        if root != ROOT:
            environment["PYTHONPATH"] = str(root)
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, *(("-m", "optimizer_service.cli") if open_files is None else
                                   ("-c", LIMITED_FILES, str(open_files))),
                 "serve", "--listen", f"127.0.0.1:{port}",
                 "--port-file", str(self.port_file), "--store", store or f"sqlite:///{folder / 'service.db'}",
                 *extra], cwd=root, stdout=subprocess.DEVNULL, stderr=log, text=True,
                env=environment, preexec_fn=preexec)
        deadline = time.monotonic() + 30
        if standby:
            assert port, "a standby is started on a known port"
            self.port, self.address, self.http_port, self.http_url = port, f"127.0.0.1:{port}", 0, ""
            while health(self.address, "liveness") != "SERVING":
                assert self.process.poll() is None, self.log()
                assert time.monotonic() < deadline, "p2 serve did not start"
                time.sleep(0.05)
            return
        while not self.port_file.exists() or not self.port_file.read_text().strip():
            assert self.process.poll() is None, self.log()
            assert time.monotonic() < deadline, "p2 serve did not start"
            time.sleep(0.05)
        self.port = int(self.port_file.read_text())
        self.address = f"127.0.0.1:{self.port}"
        # p2 serve writes the dashboard's port before the gRPC port: it is there by now
        self.http_port = int(http_port_file.read_text()) if dashboard else 0
        self.http_url = f"http://127.0.0.1:{self.http_port}" if dashboard else ""

    def log(self) -> str:
        """What the service logged so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> tuple[int, str]:
        """SIGTERM; the exit code and what it logged."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        return self.process.returncode, self.log()

    def wait_dead(self, timeout: float = 30) -> tuple[int, str]:
        self.process.wait(timeout=timeout)
        return self.process.returncode, self.log()


def health(address: str, service: str = "") -> str:
    """The health service's answer for ``service`` at ``address`` ("UNREACHABLE" when none comes)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                              timeout=2)
        except grpc.RpcError:
            return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


class Ranks:
    """Simulated ranks of one job, streaming to ``address`` from a background loop
    (reconnecting, with ``reconnect``, whenever the service goes away)."""

    def __init__(self, address: str, job: str, world: int, token: str | None = None, reconnect: bool = False,
                 refuse: dict[int, str] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.ranks = [SimRank(job, r, world, refuse=(refuse or {}).get(r, "")) for r in range(world)]
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(address, token, reconnect), daemon=True)
        self.thread.start()
        assert self.ready.wait(20), "the simulated ranks did not register"

    def _run(self, address: str, token: str | None, reconnect: bool) -> None:
        async def main():
            self.stop_event = asyncio.Event()
            async with grpc.aio.insecure_channel(address) as channel:
                tasks = [asyncio.ensure_future(run_rank(sim, channel, token, self.stop_event, reconnect))
                         for sim in self.ranks]
                await asyncio.gather(*(sim.registered.wait() for sim in self.ranks))
                self.ready.set()
                await asyncio.gather(*tasks)
        self.loop.run_until_complete(main())

    def registered(self) -> bool:
        return all(sim.registered.is_set() for sim in self.ranks)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(10)
