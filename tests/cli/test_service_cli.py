"""``p2 serve``, ``p2 jobs``, ``p2 plan`` through the real entry point: a real
service process, simulated ranks over real gRPC, one-line errors, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from optimizer_service.plan import Plan
from tests.support.cli import ROOT, p2
from tests.support.participants import SimRank, run_rank

pytestmark = pytest.mark.slow


class ServeProcess:
    def __init__(self, tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port_file = tmp_path / "port"
        self.port_file.unlink(missing_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "optimizer_service.cli", "serve", "--listen", "127.0.0.1:0", "--port-file",
             str(self.port_file), "--store", f"sqlite:///{tmp_path / 'service.db'}", *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, **(env or {})))
        deadline = time.monotonic() + 30
        while not self.port_file.exists() or not self.port_file.read_text().strip():
            assert self.process.poll() is None, self.process.communicate()[1]
            assert time.monotonic() < deadline, "p2 serve did not start"
            time.sleep(0.05)
        self.address = f"127.0.0.1:{int(self.port_file.read_text())}"

    def stop(self) -> tuple[int, str]:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=30)
        return self.process.returncode, err


class Ranks:
    """Simulated ranks of one job in a background event loop."""

    def __init__(self, address: str, job: str, world: int, token: str | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.ranks = [SimRank(job, r, world) for r in range(world)]
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(address, token), daemon=True)
        self.thread.start()
        assert self.ready.wait(20), "the simulated ranks did not register"

    def _run(self, address: str, token: str | None) -> None:
        async def main():
            self.stop = asyncio.Event()
            async with grpc.aio.insecure_channel(address) as channel:
                tasks = [asyncio.ensure_future(run_rank(sim, channel, token, self.stop)) for sim in self.ranks]
                await asyncio.gather(*(sim.registered.wait() for sim in self.ranks))
                self.ready.set()
                await asyncio.gather(*tasks)
        self.loop.run_until_complete(main())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


def test_serve_jobs_and_plans_end_to_end(tmp_path):
    serve = ServeProcess(tmp_path)
    try:
        client = ("--service", serve.address)
        listed = p2("jobs", "list", *client, "--json", "-")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"jobs": []}
        ranks = Ranks(serve.address, "train-1", 2)
        try:
            shown = p2("jobs", "show", "train-1", *client, "--json", "-")
            assert shown.returncode == 0, shown.stderr
            job = json.loads(shown.stdout)
            assert job["state"] == "live" and job["world_size"] == 2 and len(job["ranks"]) == 2
            plan_file = tmp_path / "plan.json"
            plan_file.write_text(Plan(1, 2, {0: None}, ()).to_json())
            submitted = p2("plan", "submit", "--job", "train-1", str(plan_file), "--wait", "20", *client,
                           "--json", "-")
            assert submitted.returncode == 0, submitted.stderr
            record = json.loads(submitted.stdout)
            assert record["version"] == 1 and record["state"] == "committed"
            history = json.loads(p2("plan", "list", "--job", "train-1", *client, "--json", "-").stdout)
            assert [p["version"] for p in history["plans"]] == [1]
            one = p2("plan", "show", "--job", "train-1", "1", *client)
            assert one.returncode == 0 and "committed" in one.stdout, one.stderr
            table = p2("jobs", "list", *client)
            assert "train-1" in table.stdout and "live" in table.stdout
        finally:
            ranks.close()
    finally:
        code, log = serve.stop()
    assert code == 0, log
    assert "registered" in log and "commit" in log and "stopping" in log


def test_client_errors_are_one_line_with_exit_codes(tmp_path):
    serve = ServeProcess(tmp_path, env={"P2_TOKEN": "tok"})
    try:
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(Plan(1, 2, {0: None}, ()).to_json())
        token_file = tmp_path / "token"
        token_file.write_text("tok\n")
        cases = [
            (["jobs", "list", "--service", serve.address], 2, "missing bearer token"),
            (["jobs", "list", "--service", serve.address], 2, "wrong bearer token", {"P2_TOKEN": "nope"}),
            (["jobs", "show", "ghost", "--service", serve.address, "--token-file", str(token_file)], 2, "no job 'ghost'"),
            (["plan", "submit", "--job", "ghost", str(tmp_path / "missing.json"), "--service", serve.address],
             2, "cannot read the plan"),
            (["plan", "show", "--job", "ghost", "1", "--service", "127.0.0.1:1", "--timeout", "2"], 1,
             "cannot reach the service"),
        ]
        for args, code, words, *env in cases:
            result = p2(*args, env=env[0] if env else None)
            assert result.returncode == code, (args, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result.stderr
    finally:
        code, _ = serve.stop()
    assert code == 0


def test_serve_refuses_bad_settings_with_one_line(tmp_path):
    for args, words in [(["--store", "mysql://x"], "unsupported scheme"),
                        (["--token-file", str(tmp_path / "none")], "cannot read the token file"),
                        (["--tls-cert", str(tmp_path / "c.pem")], "TLS needs both")]:
        result = p2("serve", "--listen", "127.0.0.1:0", *args)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result.stderr
