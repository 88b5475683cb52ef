"""Process-wide enforcer state: the settings, the trace, and its export at exit.

One training process is one rank; every ``p2enforcer`` group in it shares one
trace (a :class:`~enforcer.trace.TraceReader`, created with the default group,
whose rank and size are the process's global ones). ``P2_TRACE_FILE`` names
where the trace is written when the default group is destroyed or the process
exits.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from enforcer.settings import EnforcerSettings
from enforcer.trace import TraceReader, Tracer, trace_path

log = logging.getLogger("enforcer")

_tracer: TraceReader | None = None
_lock = threading.Lock()
_exported: TraceReader | None = None     # the trace P2_TRACE_FILE already holds
_settings: EnforcerSettings | None = None


def settings() -> EnforcerSettings:
    """The enforcer's settings: read from the environment once (at registration
    or first use); a malformed variable is logged and the defaults are kept."""
    global _settings
    if _settings is None:
        try:
            _settings = EnforcerSettings.from_env()
        except ValueError as error:
            log.error("p2enforcer: %s; using the default settings", error)
            _settings = EnforcerSettings()
    return _settings


def use_settings(value: EnforcerSettings | None) -> None:
    """Replace the settings (``None``: read the environment again on next use)."""
    global _settings
    _settings = value


def tracer() -> TraceReader:
    """The process's tracer; before any default group exists, one for the
    launch environment's rank (``RANK``/``WORLD_SIZE``)."""
    with _lock:
        if _tracer is None:
            _start(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
        return _tracer


def reset_tracer(rank: int, size: int, kind: type[TraceReader] = Tracer) -> TraceReader:
    """Start a fresh trace (a default group is being made): the Python groups record into a
    :class:`~enforcer.trace.Tracer`; ``kind``: the C++ backend's groups' is read by a
    :class:`enforcer.group.native_trace.NativeTracer`."""
    with _lock:
        return _start(rank, size, kind)


def _start(rank: int, size: int, kind: type[TraceReader] = Tracer) -> TraceReader:
    global _tracer
    if _tracer is None:
        atexit.register(export_from_env)
    _tracer = kind(rank, size, settings().trace_limit)
    return _tracer


def export_from_env() -> None:
    """Write the trace to ``P2_TRACE_FILE`` when the default group is destroyed,
    or at exit if it never was; once per trace, and only if something was traced."""
    global _exported
    template = settings().trace_file
    if not template or _tracer is None or _exported is _tracer or not (_tracer.counts or _tracer.bypassed):
        return
    try:
        path = _tracer.export(trace_path(template, _tracer.rank))
        _exported = _tracer
        log.info("p2enforcer: trace of rank %d written to %s", _tracer.rank, path)
    except OSError as error:
        log.warning("p2enforcer: could not write the trace to %s: %s", template, error)
