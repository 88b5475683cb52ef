"""Log lines rate-limited per cause (issue 30, item 4): a flood of one cause is a
few lines and one count, other causes and INFO lines pass, and ``p2 serve``
has the limit on the handlers clients can make it write to."""

from __future__ import annotations

import io
import logging
import socket
import time

import pytest

from optimizer_service.service.log_limits import MAX_CAUSES, LineLimit, limit_handler, limit_logger
from tests.support.responsiveness import HealthProbe
from tests.support.service_process import ServeProcess


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logged():
    """A real logger writing to a real stream handler; its lines, and a clock the limit reads."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger(f"test.log_limits.{id(stream)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    clock = Clock()
    yield logger, handler, clock, lambda: stream.getvalue().splitlines()
    logger.removeHandler(handler)


def test_a_flood_of_one_cause_is_a_few_lines_then_one_count(logged):
    logger, handler, clock, lines = logged
    limit_handler(handler, lines=3, window=60.0, clock=clock)
    for job in range(500):
        logger.warning("job %s: storing telemetry failed: %s", f"j{job}", "disk full")
    assert lines() == [f"WARNING {logger.name} job j{job}: storing telemetry failed: disk full" for job in range(3)]
    clock.now += 61
    logger.warning("job %s: storing telemetry failed: %s", "late", "disk full")
    assert lines()[3:] == [f"WARNING {logger.name} … 497 more like this suppressed in 60 s: "
                           "job %s: storing telemetry failed: %s",
                           f"WARNING {logger.name} job late: storing telemetry failed: disk full"]


def test_causes_are_counted_apart_and_info_lines_pass(logged):
    logger, handler, clock, lines = logged
    limit_handler(handler, lines=2, window=10.0, clock=clock)
    for index in range(50):
        logger.error("first cause %d", index)
        logger.error("second cause %d", index)
        logger.info("job event %d", index)                   # the operator's record: never limited
    assert [line for line in lines() if "cause" in line] == [
        f"ERROR {logger.name} first cause 0", f"ERROR {logger.name} second cause 0",
        f"ERROR {logger.name} first cause 1", f"ERROR {logger.name} second cause 1"]
    assert sum("job event" in line for line in lines()) == 50
    # The counts come with the next line of any cause once the window is over.
    clock.now += 10
    logger.info("job event after")
    assert lines()[-3:] == [f"ERROR {logger.name} … 48 more like this suppressed in 10 s: first cause %d",
                            f"ERROR {logger.name} … 48 more like this suppressed in 10 s: second cause %d",
                            f"INFO {logger.name} job event after"]
    logger.error("first cause %d", 99)                      # a new window: passes again
    assert lines()[-1] == f"ERROR {logger.name} first cause 99"


def test_a_traceback_counts_by_its_message_and_is_suppressed_whole(logged):
    logger, handler, clock, lines = logged
    limit_handler(handler, lines=1, window=60.0, clock=clock)
    for _ in range(100):
        try:
            raise OSError(24, "Too many open files")
        except OSError:
            logger.exception("socket.accept() out of system resource\nsocket: <fd=5>")
    assert sum("Traceback" in line for line in lines()) == 1
    assert len(lines()) < 10


def test_a_logger_keeps_its_limit_whatever_handlers_it_gets_later(logged):
    logger, handler, clock, lines = logged
    logger.removeHandler(handler)
    first = limit_logger(logger, lines=2, window=60.0, clock=clock)
    assert limit_logger(logger) is first                      # installed once
    logger.addHandler(handler)                                # as uvicorn does when the dashboard starts
    for _ in range(20):
        logger.warning("Invalid HTTP request received.")
    clock.now += 60
    logger.warning("Invalid HTTP request received.")
    assert lines() == [f"WARNING {logger.name} Invalid HTTP request received."] * 2 + [
        f"WARNING {logger.name} … 18 more like this suppressed in 60 s: Invalid HTTP request received.",
        f"WARNING {logger.name} Invalid HTTP request received."]


def test_the_causes_it_remembers_are_bounded(logged):
    logger, handler, clock, lines = logged
    line_limit = limit_handler(handler, lines=1, window=60.0, clock=clock)
    for index in range(3 * MAX_CAUSES):
        logger.warning(f"formatted before logging {index}")  # every line a cause of its own
    assert len(lines()) == 3 * MAX_CAUSES
    assert len(line_limit._windows) == MAX_CAUSES


def test_a_limit_needs_a_line_and_a_window():
    with pytest.raises(ValueError):
        LineLimit(print, lines=0)
    with pytest.raises(ValueError):
        LineLimit(print, window=0)


def test_p2_serve_limits_a_flood_of_unparsable_http_requests(tmp_path):
    """uvicorn logs one warning per request it cannot parse; 300 of them from a client
    without the token are at most the limit's 10 lines."""
    port_file = tmp_path / "http-port"
    server = ServeProcess(tmp_path, "--no-replan", "--http", "127.0.0.1:0", "--http-port-file", str(port_file))
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists() or not port_file.read_text().strip():
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.05)
        http_port = int(port_file.read_text())
        with HealthProbe(server.address) as probe:
            for _ in range(300):
                with socket.create_connection(("127.0.0.1", http_port), timeout=5) as client:
                    client.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
                    while client.recv(4096):              # uvicorn answers 400 and closes
                        pass
        assert probe.worst() < 1.0, probe.summary()
        time.sleep(0.2)
        flood = [line for line in server.log().splitlines() if "Invalid HTTP request" in line]
        assert 1 <= len(flood) <= 10, server.log()[-2000:]
    finally:
        server.stop()
