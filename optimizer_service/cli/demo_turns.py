"""``p2 demo``'s two jobs in turns: the service's job and the all-NICs peer, interleaved (issue 32, item 5).

Both jobs start together on the cluster, each with ``--gate FILE``
(``examples/training.py``, ``Gate``): every rank waits before each step until
its job's gate file allows the step. Once every rank of both jobs has said it
is ready (joined its world, built its model), the demo gives turns: the job
runs ``every`` steps, then the peer ``peer_steps``, then the job again, until
the job has run all its steps and the peer its last turn. One job runs at a
time, so each has the NICs and the two cores to itself, and a drift of the
host over the run (on this machine ±7 % in 20-step medians of one plan) meets
both alike: the ratio of neighbouring turns is the side-by-side comparison
the issue asks for.

:class:`Meters` keeps the NICs' drop counters and the host's core times as
the job would see them alone: the counts of the peer's turns (from the job's
pause to its resumption) are taken out of every later sample of the job, and
each peer turn keeps its own counts over its measured steps (after
:data:`TURN_WARMUP`, or :data:`~optimizer_service.cli.demo_report.WARMUP` in
its first turn): :class:`PeerTurn`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from optimizer_service.cli.demo_report import TURN_WARMUP, WARMUP, counts_minus, counts_plus
from optimizer_service.errors import JobFailedError

POLL = 0.05             # seconds between the demo's looks at the ranks' progress while a turn runs


def write_gate(path: Path, steps: int) -> None:
    """Allow the gated job ``steps`` steps (written whole: the ranks never read half a number)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(f"{steps}\n")
    os.replace(partial, path)


def clear_gate(path: Path, ranks: int) -> None:
    """No step allowed, and no rank ready yet (a previous run's files gone)."""
    path.unlink(missing_ok=True)
    for rank in range(ranks):
        Path(f"{path}.ready.{rank}").unlink(missing_ok=True)


def ready(path: Path, ranks: int) -> bool:
    """Whether every rank of the job gated by ``path`` waits for its first turn."""
    return all(Path(f"{path}.ready.{rank}").exists() for rank in range(ranks))


def peer_turns(steps: int, every: int) -> int:
    """How many turns the peer gets: one after each of the job's turns of ``every`` steps."""
    return math.ceil(steps / every)


def measured_from(first: int) -> int:
    """The first step of a peer turn starting at step ``first`` that a median takes."""
    return first + (WARMUP if first == 1 else TURN_WARMUP)


def job_turn_warmup(steps: int, every: int) -> list[int]:
    """The job's steps that begin a turn after the peer's (``every`` steps a turn) and that no
    phase's median takes: :data:`TURN_WARMUP` of them per turn, from the second turn on."""
    return [start + k for start in range(every + 1, steps + 1, every) for k in range(TURN_WARMUP)
            if start + k <= steps]


@dataclass(frozen=True)
class Reading:
    """The NICs' drops so far per channel and the host's core times so far (either None where unread)."""

    drops: dict[int, int] | None
    cores: list[float] | None


@dataclass
class PeerTurn:
    """One turn of the peer: its steps (1-based, the peer's own count), the first one its medians
    take, the job's last step before it, the cluster state ("before" or "after" the change), and
    the readings over its measured steps."""

    first_step: int
    last_step: int
    measured_from: int
    job_step: int
    cluster: str
    start: Reading | None = None
    end: Reading | None = None

    def as_json(self) -> dict:
        return asdict(self)


class Meters:
    """The readings as the job alone would have them (module docstring)."""

    def __init__(self, read: Callable[[], Reading]) -> None:
        self.read = read
        self._taken = Reading(None, None)

    def job(self) -> Reading:
        now = self.read()
        return Reading(counts_minus(now.drops, self._taken.drops), counts_minus(now.cores, self._taken.cores))

    def take_out(self, paused: Reading, resumed: Reading) -> None:
        """The peer ran between ``paused`` and ``resumed``: none of it is the job's."""
        self._taken = Reading(counts_plus(self._taken.drops, counts_minus(resumed.drops, paused.drops)),
                              counts_plus(self._taken.cores, counts_minus(resumed.cores, paused.cores)))


def until(done: Callable[[], bool], alive: Callable[[], str | None], tick: Callable[[], None], deadline: float,
          what: str) -> None:
    """Call ``tick`` every :data:`POLL` seconds until ``done()``; a job that ended first (``alive()``
    names it) or the monotonic ``deadline`` is a :class:`JobFailedError`."""
    while not done():
        tick()
        if done():
            return
        ended = alive()
        if ended:
            raise JobFailedError(f"waiting until {what}: {ended}")
        if time.monotonic() > deadline:
            raise JobFailedError(f"timed out waiting until {what}")
        time.sleep(POLL)
