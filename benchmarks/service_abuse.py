"""What an outsider can do to a running ``p2 serve``: each attack of issue 30, measured.

Every attack runs against a fresh ``p2 serve`` process (SQLite in a temporary folder, a token, the
dashboard on ``127.0.0.1:0``), started from ``--tree`` (default: this checkout; give another checkout,
e.g. ``git worktree add /tmp/before <commit>``, to measure the code before a change). While it runs,
a second thread asks gRPC health every 50 ms (tests/support/responsiveness.py). Recorded per attack:
the answer (HTTP status or gRPC code), the answer's size, the service's resident memory before and
its peak after (VmRSS, VmHWM), the slowest health answer and how many failed, and what the service
logged (bytes, tracebacks).

* ``yaml-explore`` — a 507-byte YAML of seven levels of nested aliases as ``/api/explore``'s
  topology (no token: the explorer is public by default).
* ``yaml-register`` — the same YAML as a rank's ``Register.topology`` (with the token), then the
  job's public reads (``GET /api/jobs/J``, gRPC ``GetJob``).
* ``big-body`` — an unauthenticated 120 MB ``POST /api/jobs/J/plans``.
* ``idle-sockets`` — 300 HTTP connections that never finish their headers, against a service
  whose descriptor limit is 256; then ``ListJobs`` with the token.
* ``grpc-bytes`` — 200 calls of random bytes to ``SubmitPlan`` without a token.
* ``grpc-big`` — three concurrent 75 MiB ``SubmitPlan`` calls without a token.
* ``telemetry`` — two ranks report ``duration_seconds = 1.7e308``.
* ``phantom-rank`` — a rank registers while the store (a real ``redis-server`` whose maxmemory
  refuses writes, as a full disk would) cannot write; then the job is read back.

    .venv/bin/python benchmarks/service_abuse.py --label after
    .venv/bin/python benchmarks/service_abuse.py --label before --tree /tmp/before

Results of every label run so far are kept in ``service_abuse.json`` under ``--out``
(benchmarks/results); ``service_abuse.png`` compares them; a summary is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from tests.support.participants import SimRank, run_rank  # noqa: E402
from tests.support.redis_server import redis_server_path, start_redis  # noqa: E402
from tests.support.responsiveness import HealthProbe, peak_rss_bytes, rss_bytes  # noqa: E402
from tests.support.service_process import ServeProcess  # noqa: E402
from tests.support.telemetry import iteration_message  # noqa: E402

TOKEN = "abuse-benchmark-token-0123456789abcdef"
MIB = 1 << 20


def alias_bomb(depth: int = 7) -> str:
    """A topology whose first level's name is ``depth`` levels of ten-fold aliases (10**depth strings)."""
    anchors = ["&a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, depth):
        name, inner = chr(ord("a") + level), chr(ord("a") + level - 1)
        anchors.append(f"&{name} [{', '.join([f'*{inner}'] * 10)}]")
    return (f"name: bomb\nlinks: []\nlevels:\n- cardinality: 1\n  name: [{', '.join(anchors)}]\n")


# ------------------------------------------------------------------ transport helpers
def http(server: ServeProcess, method: str, path: str, body: bytes | None = None,
         token: str | None = None, timeout: float = 120) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}{path}", data=body, method=method,
                                     headers=headers | ({"Content-Type": "application/json"} if body else {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def grpc_raw(server: ServeProcess, method: str, payload: bytes, token: str | None = None) -> str:
    """A call of ``method`` with ``payload`` as its serialized request; the status code's name."""
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", 64 * MIB)]
    with grpc.insecure_channel(server.address, options=options) as channel:
        call = channel.unary_unary(method)
        try:
            call(payload, timeout=60, metadata=[("authorization", f"Bearer {token}")] if token else None)
            return "OK"
        except grpc.RpcError as error:
            return error.code().name


def ranks(server: ServeProcess, job: str, world: int, register: Callable[[SimRank], None] = lambda sim: None,
          then: Callable[[list[SimRank]], None] = lambda sims: None, hold: float = 1.0) -> list[SimRank]:
    """``world`` simulated ranks of ``job`` stream to the service for ``hold`` seconds after ``then``."""
    async def main() -> list[SimRank]:
        sims = [SimRank(job, rank, world) for rank in range(world)]
        for sim in sims:
            plain = sim.register_message
            sim.register_message = lambda iteration=0, sim=sim, plain=plain: _edited(plain(iteration), register, sim)
        stop = asyncio.Event()
        async with grpc.aio.insecure_channel(server.address) as channel:
            tasks = [asyncio.ensure_future(run_rank(sim, channel, TOKEN, stop)) for sim in sims]
            await asyncio.wait([asyncio.ensure_future(sim.registered.wait()) for sim in sims], timeout=10)
            then(sims)
            await asyncio.sleep(hold)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        return sims
    return asyncio.run(main())


def _edited(message, register, sim):
    register(message.register)
    return message


# ------------------------------------------------------------------------ attacks
def yaml_explore(server: ServeProcess) -> dict:
    query = urllib.parse.urlencode({"topology": alias_bomb(7), "axes": "4", "reduce": "0"})
    status, body = http(server, "GET", f"/api/explore?{query}")
    return {"answer": status, "answer_bytes": len(body)}


def yaml_register(server: ServeProcess) -> dict:
    sims = ranks(server, "bomb-job", 1, register=lambda message: setattr(message, "topology", alias_bomb(7)),
                 hold=2.0)
    status, body = http(server, "GET", "/api/jobs/bomb-job")
    return {"answer": sims[0].error.code().name if sims[0].error else "OK", "job_read_status": status,
            "answer_bytes": len(body)}


def big_body(server: ServeProcess, size: int = 120 * 10**6) -> dict:
    """An unauthenticated JSON body of ``size`` bytes, streamed; the status line the service answers."""
    sent = 0
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=120) as conn:
        conn.sendall(f"POST /api/jobs/none/plans HTTP/1.1\r\nHost: 127.0.0.1:{server.http_port}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n".encode())
        body = b'{"p": "' + b"a" * (MIB - 7)
        try:
            while sent < size:
                piece = body if sent == 0 else b"a" * min(MIB, size - sent - 2)
                if sent + len(piece) >= size - 2:
                    piece = piece[:size - 2 - sent] + b'"}'
                conn.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            answer = conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
        except (ConnectionResetError, TimeoutError):
            answer = "no answer (connection reset)"
    return {"answer": answer, "body_bytes_sent": sent}


def idle_sockets(server: ServeProcess, count: int = 300, hold: float = 8.0) -> dict:
    held, refused = [], 0
    for _ in range(count):
        try:
            conn = socket.create_connection(("127.0.0.1", server.http_port), timeout=2)
            conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(conn)
        except OSError:
            refused += 1
    time.sleep(hold)
    listed = grpc_raw(server, "/p2.v1.Optimizer/ListJobs", b"", TOKEN)
    closed = 0
    for conn in held:
        conn.setblocking(False)
        try:
            closed += conn.recv(4096) is not None
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        conn.close()
    return {"answer": listed, "connections_opened": len(held), "connect_failures": refused,
            "closed_by_service": closed}


def grpc_bytes(server: ServeProcess, calls: int = 200) -> dict:
    codes: dict[str, int] = {}
    for _ in range(calls):
        code = grpc_raw(server, "/p2.v1.Optimizer/SubmitPlan", os.urandom(64))
        codes[code] = codes.get(code, 0) + 1
    return {"answer": ", ".join(f"{c}×{n}" for c, n in sorted(codes.items()))}


def grpc_big(server: ServeProcess, calls: int = 3, size: int = 75 * MIB) -> dict:
    codes: list[str] = []
    payload = os.urandom(size)
    threads = [threading.Thread(target=lambda: codes.append(grpc_raw(server, "/p2.v1.Optimizer/SubmitPlan",
                                                                       payload))) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"answer": ", ".join(sorted(codes))}


def huge_telemetry(server: ServeProcess) -> dict:
    def send(sims: list[SimRank]) -> None:
        for sim in sims:
            sim.send(iteration_message(sim.job, sim.rank, sim.world_size, 1, 1.7e308))
    sims = ranks(server, "huge-telemetry", 2, then=send, hold=2.0)
    return {"answer": ", ".join(sim.error.code().name if sim.error else "OK" for sim in sims)}


def phantom_rank(tree: Path, folder: Path) -> dict:
    """Register while the store refuses writes; what the job then shows."""
    import redis
    if redis_server_path() is None:
        return {"answer": "skipped: no redis-server"}
    with start_redis(folder / "redis") as store:
        server = start(tree, folder, store=store.url)
        try:
            client = redis.Redis.from_url(store.url)
            client.config_set("maxmemory-policy", "noeviction")
            client.config_set("maxmemory", 1)
            sims = ranks(server, "phantom", 2, hold=0.5)
            client.config_set("maxmemory", 0)
            status, body = http(server, "GET", "/api/jobs/phantom")
            job = json.loads(body) if status == 200 else {}
            connected = [r for r in job.get("ranks", []) if r.get("connected")]
            return {"answer": sims[0].error.code().name if sims[0].error else "OK", "job_read_status": status,
                    "job_state": job.get("state", "-"), "connected_ranks": len(connected)}
        finally:
            server.stop()


SERVE_ARGS: tuple[str, ...] = ()
ATTACKS: dict[str, Callable[[ServeProcess], dict]] = {
    "yaml-explore": yaml_explore, "yaml-register": yaml_register, "big-body": big_body,
    "idle-sockets": idle_sockets, "grpc-bytes": grpc_bytes, "grpc-big": grpc_big, "telemetry": huge_telemetry,
}


def low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def start(tree: Path, folder: Path, **options) -> ServeProcess:
    """``p2 serve`` of ``tree`` with the token and the dashboard on a free port (``server.http_port``)."""
    return ServeProcess(folder, *SERVE_ARGS, root=tree, dashboard=True, **options)


def run_attack(name: str, tree: Path, folder: Path) -> dict:
    if name == "phantom-rank":
        return phantom_rank(tree, folder)
    server = start(tree, folder, preexec=low_fd_limit if name == "idle-sockets" else None)
    pid = server.process.pid
    time.sleep(0.5)
    before = rss_bytes(pid)
    log_before = len(server.log())
    started = time.monotonic()
    with HealthProbe(server.address, timeout=5.0) as probe:
        result = ATTACKS[name](server)
    seconds = time.monotonic() - started
    peak = peak_rss_bytes(pid)
    log = server.log()[log_before:]
    server.stop()
    return result | {"seconds": round(seconds, 2), "rss_before_mb": round(before / MIB, 1),
                     "rss_peak_mb": round(peak / MIB, 1), "health_worst_ms": round(probe.worst() * 1e3, 1),
                     "health_failed": len(probe.failures), "log_bytes": len(log.encode()),
                     "log_tracebacks": log.count("Traceback")}


def plot(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(results)
    attacks = [a for a in [*ATTACKS, "phantom-rank"] if any(a in results[label] for label in labels)]
    panels = (("rss growth (MB)", lambda r: r.get("rss_peak_mb", 0) - r.get("rss_before_mb", 0)),
              ("slowest gRPC health answer (ms)", lambda r: r.get("health_worst_ms", 0)),
              ("log written (KB)", lambda r: r.get("log_bytes", 0) / 1024))
    figure, axes = plt.subplots(1, len(panels), figsize=(15, 4.5))
    width = 0.8 / max(len(labels), 1)
    for axis, (title, value) in zip(axes, panels):
        for index, label in enumerate(labels):
            heights = [max(value(results[label].get(a, {})), 1e-3) for a in attacks]
            axis.bar([i + index * width for i in range(len(attacks))], heights, width, label=label)
        axis.set_yscale("log")
        axis.set_title(title)
        axis.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(attacks))], attacks, rotation=40,
                        ha="right")
    axes[0].legend()
    figure.suptitle("p2 serve under issue 30's attacks (one fresh service per attack; log scale)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    global SERVE_ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose 'p2 serve' is attacked")
    parser.add_argument("--label", default="after", help="the name these results are kept under")
    parser.add_argument("--attacks", default=",".join([*ATTACKS, "phantom-rank"]))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out / "service_abuse.json"
    results = json.loads(store.read_text()) if store.exists() else {}
    found = results.setdefault(args.label, {})
    for name in args.attacks.split(","):
        with tempfile.TemporaryDirectory(prefix="p2-abuse-") as folder:
            folder = Path(folder)
            (folder / "token").write_text(TOKEN)
            SERVE_ARGS = ("--token-file", str(folder / "token"))
            print(f"{args.label}: {name} …", flush=True)
            found[name] = run_attack(name, args.tree.resolve(), folder)
            print(f"  {json.dumps(found[name])}", flush=True)
    store.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, args.out / "service_abuse.png")
    print(f"\n{'attack':<14} {'label':<8} {'answer':<34} {'bytes':>10} {'rss +MB':>8} {'health ms':>10} "
          f"{'log KB':>8} {'tracebacks':>10}")
    for name in [*ATTACKS, "phantom-rank"]:
        for label, found in results.items():
            r = found.get(name)
            if r is None:
                continue
            grown = r.get("rss_peak_mb", 0) - r.get("rss_before_mb", 0)
            print(f"{name:<14} {label:<8} {str(r.get('answer'))[:34]:<34} {r.get('answer_bytes', '-'):>10} "
                  f"{grown:>8.1f} {r.get('health_worst_ms', '-'):>10} {r.get('log_bytes', 0) / 1024:>8.1f} "
                  f"{r.get('log_tracebacks', '-'):>10}")
    print(f"\nwrote {store} and {args.out / 'service_abuse.png'}")


if __name__ == "__main__":
    main()
