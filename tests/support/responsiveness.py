"""What the abuse tests watch while they attack a real ``p2 serve``: that gRPC
health keeps answering, and how much memory the service process holds.

:class:`HealthProbe` asks ``grpc.health.v1.Health/Check`` in a background
thread every ``interval`` seconds on its own channel and records each answer's
latency (a call that fails or times out counts as its timeout), so a test can
assert the service stayed responsive *throughout* an attack::

    with HealthProbe(server.address) as probe:
        attack()
    assert probe.worst() < 1.0, probe.summary()

:func:`rss_bytes` / :func:`peak_rss_bytes` read ``/proc/PID/status`` (VmRSS,
VmHWM) of the service process.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


class HealthProbe:
    """Polls gRPC health on ``address`` until closed; latencies in seconds."""

    def __init__(self, address: str, interval: float = 0.05, timeout: float = 5.0) -> None:
        self.address, self.interval, self.timeout = address, interval, timeout
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.latencies and not self.failures and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def _run(self) -> None:
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=self.timeout)
                    self.latencies.append(time.monotonic() - started)
                except grpc.RpcError as error:
                    self.latencies.append(max(time.monotonic() - started, self.timeout))
                    self.failures.append(f"{error.code().name}: {error.details()}")
                self._stop.wait(self.interval)

    def worst(self) -> float:
        """The slowest answer so far (seconds); a failed call counts as its timeout."""
        return max(self.latencies, default=float("inf"))

    def summary(self) -> str:
        if not self.latencies:
            return "no health answer"
        ordered = sorted(self.latencies)
        return (f"{len(ordered)} health checks: median {ordered[len(ordered) // 2] * 1e3:.1f} ms, worst "
                f"{ordered[-1] * 1e3:.1f} ms, {len(self.failures)} failed{': ' + self.failures[0] if self.failures else ''}")


def _status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(f"{name} not in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    """The process' resident set now."""
    return _status_field(pid, "VmRSS")


def peak_rss_bytes(pid: int) -> int:
    """The process' largest resident set so far (VmHWM)."""
    return _status_field(pid, "VmHWM")
