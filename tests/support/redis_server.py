"""A real ``redis-server`` for tests: :func:`start_redis` runs one on a free
loopback port with its data in a folder of the test's, durable as the docs ask
(``--appendonly yes --appendfsync always``, no RDB snapshots), and waits until it
answers PING. Restarting on the same folder replays its append-only file.

    server = start_redis(tmp_path)          # or: with start_redis(tmp_path) as server:
    store = open_store(server.url)
    server.kill()                           # SIGKILL, as a crash would
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_SECONDS = 10.0


def redis_server_path() -> str | None:
    """Where ``redis-server`` is, or None (tests skip with this reason: :data:`MISSING`)."""
    return shutil.which("redis-server")


MISSING = "redis-server is not on PATH (apt-get install redis-server)"


@dataclass
class RedisServer:
    url: str                    # redis://[:password@]127.0.0.1:PORT/0
    port: int
    process: subprocess.Popen
    directory: Path
    password: str | None = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited after 5 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL: the server gets no chance to flush anything."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _answers_ping(port: int, password: str | None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            if password is not None:
                conn.sendall(f"AUTH {password}\r\n".encode())
                conn.recv(64)
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(directory: Path, *, port: int | None = None, password: str | None = None) -> RedisServer:
    """A ``redis-server`` keeping its data in ``directory`` (created), on ``port``
    (a free one by default), requiring ``password`` if given; ready when it returns."""
    executable = redis_server_path()
    if executable is None:
        raise RuntimeError(MISSING)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):            # a free port can be taken before the server binds it
        chosen = port or _free_port()
        command = [executable, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "yes", "--appendfsync", "always", "--dir", str(directory),
                   "--daemonize", "no", "--logfile", str(directory / "redis.log")]
        if password is not None:
            command += ["--requirepass", password]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while process.poll() is None and time.monotonic() < deadline:
            if _answers_ping(chosen, password):
                auth = "" if password is None else f":{password}@"
                return RedisServer(f"redis://{auth}127.0.0.1:{chosen}/0", chosen, process, directory, password)
            time.sleep(0.02)
        if process.poll() is None:
            process.kill()
            process.wait()
        if port is not None or attempt == 2:
            log = directory / "redis.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"redis-server did not answer on port {chosen}: {tail}")
    raise AssertionError("unreachable")
