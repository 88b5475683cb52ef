"""``p2 demo``'s two jobs in turns: the gate files, the schedule's arithmetic and the readings kept
apart (the run itself is tests/cli/test_demo.py's, on the emulated cluster)."""

from __future__ import annotations

import time

import pytest

from optimizer_service.cli.demo_report import TURN_WARMUP, WARMUP
from optimizer_service.cli.demo_turns import (
    Meters,
    PeerTurn,
    Reading,
    clear_gate,
    job_turn_warmup,
    measured_from,
    peer_turns,
    ready,
    until,
    write_gate,
)
from optimizer_service.errors import JobFailedError


def test_a_gate_is_written_whole_and_cleared_with_its_ready_marks(tmp_path):
    gate = tmp_path / "gate"
    write_gate(gate, 20)
    assert gate.read_text() == "20\n" and [p.name for p in tmp_path.iterdir()] == ["gate"]
    assert not ready(gate, 2)
    for rank in range(2):
        (tmp_path / f"gate.ready.{rank}").touch()
    assert ready(gate, 2)
    clear_gate(gate, 2)
    assert list(tmp_path.iterdir()) == []


def test_the_schedule_gives_the_peer_a_turn_after_each_of_the_jobs_and_skips_each_turns_first_steps():
    assert peer_turns(200, 20) == 10 and peer_turns(205, 20) == 11 and peer_turns(10, 20) == 1
    assert measured_from(1) == 1 + WARMUP and measured_from(11) == 11 + TURN_WARMUP
    assert job_turn_warmup(50, 20) == [21, 22, 41, 42]
    assert job_turn_warmup(41, 20) == [21, 22, 41] and job_turn_warmup(20, 20) == []


def test_the_jobs_readings_leave_out_what_the_peer_did_in_its_turns():
    now = {"drops": {0: 0, 1: 0}, "cores": [2, 10.0, 0, 0, 30.0, 0, 0, 0, 0]}

    def read() -> Reading:
        return Reading(dict(now["drops"]), list(now["cores"]))

    meters = Meters(read)
    now["drops"], now["cores"] = {0: 5, 1: 1}, [2, 12.0, 0, 0, 31.0, 0, 0, 0, 0]       # the job runs
    paused = read()
    now["drops"], now["cores"] = {0: 105, 1: 41}, [2, 20.0, 0, 0, 32.0, 0, 0, 0, 0]    # the peer's turn
    meters.take_out(paused, read())
    now["drops"], now["cores"] = {0: 107, 1: 41}, [2, 21.0, 0, 0, 33.0, 0, 0, 0, 0]    # the job again
    job = meters.job()
    assert job.drops == {0: 7, 1: 1} and job.cores == [2, 13.0, 0, 0, 32.0, 0, 0, 0, 0]
    unread = Meters(lambda: Reading(None, None))
    unread.take_out(Reading(None, None), Reading(None, None))
    assert unread.job() == Reading(None, None)
    turn = PeerTurn(11, 20, measured_from(11), 40, "after", paused, job)
    assert turn.as_json()["start"] == {"drops": {0: 5, 1: 1}, "cores": [2, 12.0, 0, 0, 31.0, 0, 0, 0, 0]}


def test_waiting_for_a_turn_fails_with_what_ended_or_at_the_deadline():
    ticks = []
    until(lambda: len(ticks) >= 3, lambda: None, lambda: ticks.append(1), time.monotonic() + 10, "three ticks")
    assert len(ticks) == 3
    with pytest.raises(JobFailedError, match="waiting until step 5: the peer \\(exit code 1\\)"):
        until(lambda: False, lambda: "the peer (exit code 1)", lambda: None, time.monotonic() + 10, "step 5")
    with pytest.raises(JobFailedError, match="timed out waiting until step 5"):
        until(lambda: False, lambda: None, lambda: None, time.monotonic() + 0.05, "step 5")
