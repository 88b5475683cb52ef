"""Small measurements taken inside a node: loopback bandwidth and a free port.

Each runs as a short Python child, entered into the node's namespace with
``nsenter --net`` (or on the host for a loopback-only cluster), so it sees
exactly what the ranks will see.

The loopback rate is what ranks of one node get from each other over TCP
(gloo's transport): one stream of ``LOOPBACK_BYTES`` through ``127.0.0.1``,
best of a few repeats within well under a second. It is rounded to three
significant digits so ``topology.yaml`` stays readable.
"""

from __future__ import annotations

import math
import subprocess
import sys

from deploy.emulated.netns import NETNS_DIR
from deploy.errors import DeployError

LOOPBACK_BYTES = 48 * 2**20
LOOPBACK_REPEATS = 3

_LOOPBACK = r"""
import socket, sys, threading, time
size, repeats = int(sys.argv[1]), int(sys.argv[2])
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
def drain():
    conn, _ = server.accept()
    buf = bytearray(1 << 20)
    while conn.recv_into(buf):
        pass
    conn.close()
best = 0.0
chunk = memoryview(bytearray(1 << 20))
for _ in range(repeats):
    thread = threading.Thread(target=drain); thread.start()
    client = socket.create_connection(server.getsockname())
    start = time.perf_counter()
    left = size
    while left > 0:
        left -= client.send(chunk[:min(left, len(chunk))])
    client.shutdown(socket.SHUT_WR)
    thread.join()
    best = max(best, size / (time.perf_counter() - start))
    client.close()
print(best)
"""

_FREE_PORT = r"""
import socket
with socket.socket() as s:
    s.bind(("", 0))
    print(s.getsockname()[1])
"""


#: Run inside a node with the node's own sysfs (what ``ip netns exec`` does): ``nsenter --net``
#: keeps the host's ``/sys``, where UCX (the UCC transport) lists network devices, so it
#: would see none of the node's NICs. A private mount namespace keeps the host's ``/sys``
#: untouched; every step ``exec``s, so the command keeps the process we started.
WITH_NODE_SYSFS = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t sysfs sysfs /sys && exec "$0" "$@"')


def in_namespace(namespace: str | None, argv: list[str]) -> list[str]:
    """``argv`` entered into ``namespace`` with its sysfs (unchanged for ``None``: the host)."""
    if namespace is None:
        return list(argv)
    return ["nsenter", f"--net={NETNS_DIR / namespace}", "--", *WITH_NODE_SYSFS, *argv]


def _python(namespace: str | None, code: str, *args: str, timeout: float = 30) -> str:
    argv = in_namespace(namespace, [sys.executable, "-c", code, *args])
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise DeployError(f"{argv[0]} is not installed (entering a node needs util-linux nsenter)") from None
    except subprocess.TimeoutExpired:
        raise DeployError(f"probe in {namespace or 'the host'} did not finish within {timeout:g} s") from None
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        raise DeployError(f"probe in {namespace or 'the host'} failed: {last}")
    return result.stdout.strip()


def round_rate(rate: float, digits: int = 3) -> float:
    scale = 10 ** (math.floor(math.log10(rate)) - digits + 1)
    return float(round(rate / scale) * scale)


def measure_loopback(namespace: str | None) -> float:
    """TCP bandwidth over ``lo`` in ``namespace`` (bytes/s, 3 digits)."""
    return round_rate(float(_python(namespace, _LOOPBACK, str(LOOPBACK_BYTES), str(LOOPBACK_REPEATS))))


def free_port(namespace: str | None) -> int:
    """A TCP port nothing listens on in ``namespace`` right now."""
    return int(_python(namespace, _FREE_PORT))
