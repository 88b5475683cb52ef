"""Log lines rate-limited per cause, so that whoever can make the service log
cannot make it write without bound.

A client can make ``p2 serve`` log: an HTTP request uvicorn cannot parse, an
accept that fails once the process is out of descriptors (asyncio logs each
with a traceback), a rank whose telemetry cannot be stored. Each is worth a
line; a flood of them is worth a few lines and a count, not megabytes of the
same traceback while the disk fills and the event loop formats text.

:class:`LineLimit` is a :class:`logging.Filter` keyed by the *cause* of a line
(logger, level, the first line of the message template, not the formatted
text: ``"job %s: storing telemetry failed: %s"`` is one cause whatever the
job). In each window it passes the first ``lines`` lines of a cause and drops
the rest; once the window is over, the next line through the filter (of any
cause) is preceded by one ``… N more like this suppressed`` line, so the count
is never lost for long. Lines below WARNING pass untouched: they are the job
and plan events an operator reads, and token holders cause them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

LINES_PER_WINDOW = 10            # lines of one cause passed per window
WINDOW_SECONDS = 60.0
LIMITED_LEVEL = logging.WARNING  # lines at this level and above are limited
MAX_CAUSES = 1024                # causes remembered (a formatted f-string message is a cause of its own)
TEMPLATE_PREVIEW = 160           # characters of a template a summary quotes
SUMMARY_MARK = "p2_line_limit_summary"   # a record attribute: the filter's own summary passes itself

Cause = tuple[str, int, str]


@dataclass
class _Window:
    started: float
    passed: int = 0
    suppressed: int = 0


def cause_of(record: logging.LogRecord) -> Cause:
    """What makes two lines "like" each other: their logger, level and message template's first line."""
    template = record.msg if isinstance(record.msg, str) else f"<{type(record.msg).__name__}>"
    return record.name, record.levelno, template.split("\n", 1)[0][:200]


class LineLimit(logging.Filter):
    """Passes the first ``lines`` lines of each cause per ``window`` seconds.

    ``emit`` writes the filter's summary lines (a handler's ``handle``, or a
    logger's); it is called outside the filter's lock, before the line that
    found the window over is passed on."""

    def __init__(self, emit: Callable[[logging.LogRecord], object], lines: int = LINES_PER_WINDOW,
                 window: float = WINDOW_SECONDS, level: int = LIMITED_LEVEL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if lines < 1 or window <= 0:
            raise ValueError("a line limit needs lines >= 1 and a window > 0 seconds")
        self._emit, self.lines, self.window, self.level, self._clock = emit, lines, window, level, clock
        self._windows: OrderedDict[Cause, _Window] = OrderedDict()
        self._next_due = float("inf")        # when the earliest window with suppressed lines ends
        self._lock = threading.Lock()        # the store's threads log too

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, SUMMARY_MARK, False):
            return True
        now = self._clock()
        with self._lock:
            summaries = self._take_ended(now) if now >= self._next_due else []
            passes = record.levelno < self.level or self._count(cause_of(record), now)
        for summary in summaries:
            self._emit(summary)
        return passes

    def _count(self, cause: Cause, now: float) -> bool:
        window = self._windows.get(cause)
        if window is None or now - window.started >= self.window:
            window = self._windows[cause] = _Window(started=now)
            self._windows.move_to_end(cause)
            while len(self._windows) > MAX_CAUSES:
                self._windows.popitem(last=False)
        if window.passed < self.lines:
            window.passed += 1
            return True
        window.suppressed += 1
        self._next_due = min(self._next_due, window.started + self.window)
        return False

    def _take_ended(self, now: float) -> list[logging.LogRecord]:
        """Summary lines of the windows that are over (and forget those windows)."""
        summaries, next_due = [], float("inf")
        for cause, window in list(self._windows.items()):
            ends = window.started + self.window
            if now < ends:
                if window.suppressed:
                    next_due = min(next_due, ends)
                continue
            del self._windows[cause]
            if window.suppressed:
                summaries.append(self._summary(cause, window.suppressed))
        self._next_due = next_due
        return summaries

    def _summary(self, cause: Cause, count: int) -> logging.LogRecord:
        name, level, template = cause
        preview = template if len(template) <= TEMPLATE_PREVIEW else template[:TEMPLATE_PREVIEW] + "…"
        record = logging.LogRecord(name, level, __file__, 0, "… %d more like this suppressed in %g s: %s",
                                   (count, self.window, preview), None)
        setattr(record, SUMMARY_MARK, True)
        return record


def limit_handler(handler: logging.Handler, **limits) -> LineLimit:
    """Limit every line ``handler`` writes (once: a second call returns the first filter)."""
    return _limit(handler, handler.handle, limits)


def limit_logger(logger: logging.Logger, **limits) -> LineLimit:
    """Limit the lines logged on ``logger`` itself, whichever handlers it gets later (uvicorn
    installs its own handlers when the dashboard starts; a logger's filters stay)."""
    return _limit(logger, logger.handle, limits)


def _limit(target: logging.Filterer, sink, limits: dict) -> LineLimit:
    for existing in target.filters:
        if isinstance(existing, LineLimit):
            return existing
    line_limit = LineLimit(sink, **limits)
    target.addFilter(line_limit)
    return line_limit
