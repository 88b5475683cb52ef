"""Issue 30, item 1: a YAML alias bomb sent to a real ``p2 serve``.

Before: a 507-byte topology of seven levels of nested aliases sent to the
public ``GET /api/explore`` was expanded on the event loop — an 80 MB 422 body
echoing the expanded text, RSS 105 MB → 1.18 GB, gRPC health answering after
3.7 s. The same text as a rank's ``Register.topology`` stayed in the job: an
8 MB ``topology_error`` on every public read of the job, expanded again at
every restart. Now the YAML loader refuses it before it expands
(:mod:`optimizer_service.hardware.bounded_yaml`), the job's topology is read off
the event loop, and what the job keeps and serves about it is one short line,
also after a restart on the same store.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from optimizer_service.service import explore
from optimizer_service.service.planning import MAX_TOPOLOGY_ERROR, PlanningError, resolve_topology
from optimizer_service.service.requests import RequestError
from p2.v1 import optimizer_pb2 as api
from p2.v1 import optimizer_pb2_grpc
from tests.support.participants import SimRank, run_rank
from tests.support.responsiveness import HealthProbe, peak_rss_bytes, rss_bytes
from tests.support.service_process import ServeProcess

JOB = "yaml-bomb"
MB = 1_000_000


def alias_bomb(levels: int, width: int = 10) -> str:
    """The issue's shape: each anchor a list of ``width`` aliases of the one before (×10 per level)."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def level_name_bomb(levels: int, width: int = 10) -> str:
    """The same anchors as a level's name: the old code called ``str()`` on it (expanding it all)."""
    lines = ["      - &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    lines += [f"      - &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "name: bomb\nlevels:\n  - cardinality: 2\n    name:\n" + "\n".join(lines) + "\nlinks: []\n"


def get(url: str, timeout: float = 30) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def until(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(what)


@dataclass
class Served:
    process: ServeProcess
    http: str

    @property
    def pid(self) -> int:
        return self.process.process.pid


def serve(folder: Path, *extra: str) -> Served:
    process = ServeProcess(folder, *extra, dashboard=True)
    return Served(process, process.http_url)


@dataclass
class TopologyRank(SimRank):
    """A simulated rank whose ``P2_TOPOLOGY`` is ``topology`` (sent with its Register)."""

    topology: str = ""

    def register_message(self, iteration: int = 0):
        message = super().register_message(iteration)
        message.register.topology = self.topology
        return message


async def register_once(address: str, topology: str) -> None:
    """One rank of a one-rank job registers with ``topology`` and closes its stream."""
    sim = TopologyRank(JOB, 0, 1, topology=topology)
    stop = asyncio.Event()
    async with grpc.aio.insecure_channel(address) as channel:
        stream = asyncio.ensure_future(run_rank(sim, channel, None, stop))
        await asyncio.wait_for(sim.registered.wait(), 20)
        stop.set()
        await asyncio.wait_for(stream, 20)
    assert sim.error is None, sim.error


def job_reads(served: Served) -> tuple[dict, int, int]:
    """The job as the dashboard's API serves it (with its size) and gRPC GetJob's size."""
    status, body = get(f"{served.http}/api/jobs/{JOB}")
    assert status == 200, body[:500]
    with grpc.insecure_channel(served.process.address) as channel:
        job = optimizer_pb2_grpc.OptimizerStub(channel).GetJob(api.GetJobRequest(job_id=JOB), timeout=10)
    return json.loads(body), len(body), job.ByteSize()


def short_topology_error(served: Served) -> str:
    """The job's topology error once the service has read its topology (off the loop), checked small."""
    def error():
        document, size, grpc_size = job_reads(served)
        assert size < 64 * 1024 and grpc_size < 4096, (size, grpc_size)
        return document["topology_error"]
    message = until(error, 20, "the job shows no topology error")
    assert len(message) < 4096 and "\n" not in message, message[:1000]
    return message


@pytest.mark.parametrize("text, expected", [
    (level_name_bomb(7), "aliases add more than"),
    ("name: big\n" + "#" * 2_000_000 + "\n", "more than the 65536 allowed"),     # stored before the limit fell
    ("x" * 2_000_000, "more than the 65536 allowed"),
    ("no-such-preset-" + "x" * 10_000, "unknown topology 'no-such-preset-xxx"),
])
def test_a_jobs_topology_is_refused_in_one_short_line(text, expected):
    with pytest.raises(PlanningError) as caught:
        resolve_topology(text)
    message = str(caught.value)
    assert expected in message and "\n" not in message and len(message) <= MAX_TOPOLOGY_ERROR, message[:1000]


@pytest.mark.parametrize("text, expected", [
    (level_name_bomb(9), "aliases add more than"),
    ("name: big\n" + "#" * 70_000, "more than the 65536 allowed"),
])
def test_the_explorers_topology_is_refused_as_its_field(text, expected):
    with pytest.raises(RequestError) as caught:
        explore.load(text)
    assert caught.value.field == "topology" and expected in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.slow
def test_an_alias_bomb_sent_to_the_explorer_is_a_short_422_and_the_service_stays_responsive(tmp_path):
    served = serve(tmp_path, "--no-replan")
    try:
        before = rss_bytes(served.pid)
        with HealthProbe(served.process.address) as probe:
            for text in (level_name_bomb(5), level_name_bomb(7), level_name_bomb(9), alias_bomb(7)):
                query = urllib.parse.urlencode({"topology": text, "axes": "2", "reduce": "0"})
                status, body = get(f"{served.http}/api/explore?{query}")
                assert status == 422 and len(body) < 1024, (status, body[:500])
                error = json.loads(body)
                assert "aliases add more than" in error["error"] and error.get("field"), error
        assert probe.worst() < 1.0, probe.summary()
        assert peak_rss_bytes(served.pid) - before < 50 * MB, (before, peak_rss_bytes(served.pid))
    finally:
        served.process.stop()


@pytest.mark.slow
def test_a_rank_registering_an_alias_bomb_leaves_one_short_line_in_the_job_also_after_a_restart(tmp_path):
    served = serve(tmp_path)
    try:
        before = rss_bytes(served.pid)
        with HealthProbe(served.process.address) as probe:
            asyncio.run(register_once(served.process.address, level_name_bomb(7)))
            message = short_topology_error(served)
        assert "aliases add more than" in message, message
        assert probe.worst() < 1.0, probe.summary()
        assert peak_rss_bytes(served.pid) - before < 50 * MB
    finally:
        served.process.stop()
    served = serve(tmp_path)            # the same SQLite store: the job and its topology text come back
    try:
        before = rss_bytes(served.pid)
        with HealthProbe(served.process.address) as probe:
            assert "aliases add more than" in short_topology_error(served)
        assert probe.worst() < 1.0, probe.summary()
        assert peak_rss_bytes(served.pid) - before < 50 * MB
    finally:
        served.process.stop()
