"""Telemetry a simulated rank sends: one message per iteration, with op and
motif timings shaped like the enforcer's (two all-reduces; under a plan, their
motifs on two channels)."""

from __future__ import annotations

import threading
import time

from p2.v1 import enforcer_link_pb2 as link


def iteration_message(job: str, rank: int, world: int, iteration: int, seconds: float, version: int = 0,
                      wait: float = 0.0) -> link.RankMessage:
    ops = [link.OpTiming(seq=k, kind="all_reduce", bytes=1 << 20, group=list(range(world)),
                         issue_seconds=seconds * (0.2 + 0.4 * k), complete_seconds=seconds * (0.5 + 0.4 * k),
                         wait_seconds=wait / 2, group_seq=k, enforced=version > 0) for k in range(2)]
    motifs = []
    if version > 0:
        for k in range(2):
            for part in range(2):
                motifs.append(link.MotifTiming(op_seq=k, order=2 * k + part, channel=part, wait_seconds=wait / 4,
                                               start_seconds=seconds * (0.2 + 0.4 * k + 0.1 * part),
                                               duration_seconds=seconds * 0.15))
    return link.RankMessage(telemetry=link.Telemetry(
        job_id=job, iteration=iteration, duration_seconds=seconds, running_version=version, ops=ops,
        wait_seconds=wait, motifs=motifs))


class TelemetryFeed:
    """Every rank of ``ranks`` (tests.support.service_process.Ranks) sends one
    iteration every ``period`` seconds from a background thread, running the
    newest plan it holds committed (a simulated rank switches at once: it has no
    training loop to agree a boundary in); ``seconds(iteration, rank)`` gives
    the iteration time."""

    def __init__(self, ranks, seconds=lambda iteration, rank: 0.05 + 0.001 * (iteration % 7),
                 period: float = 0.05) -> None:
        self.ranks, self.seconds, self.period = ranks, seconds, period
        self.iteration = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for sim in self.ranks.ranks:
                version = max((sim.state.running, *sim.state.held()))
                message = iteration_message(sim.job, sim.rank, sim.world_size, self.iteration,
                                            self.seconds(self.iteration, sim.rank), version,
                                            wait=0.002 if version else 0.0)
                self.ranks.loop.call_soon_threadsafe(_send, sim, message)
            self.iteration += 1
            time.sleep(self.period)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)


def _send(sim, message) -> None:
    if sim.outbox is not None:
        sim.send(message)
