"""Quantities with units: byte sizes, bandwidths and durations.

Users write ``64MiB``, ``270GB/s``, ``200Mbit/s``, ``25us``; the planner works
in bytes, bytes per second and seconds. ``format_*`` produce a text form that
``parse_*`` reads back to the identical float (round-trip), so YAML written by
``Topology.to_yaml`` stays human-friendly and exact.
"""

from __future__ import annotations

import math
import re

from optimizer_service.errors import InvalidInputError

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_RATE_UNITS = {
    "": 1.0, "b/s": 1.0,
    "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
    "kbit/s": 1e3 / 8, "mbit/s": 1e6 / 8, "gbit/s": 1e9 / 8, "tbit/s": 1e12 / 8,
    "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8,
}
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_QUANTITY = re.compile(r"^\s*" + _NUMBER + r"\s*([A-Za-zµ/]*)\s*$")


def _number_and_unit(value: str | int | float, what: str, units: dict, hint: str) -> tuple[float, float]:
    """``(number, scale)`` of ``value``; bare numbers have scale 1."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{what} {value!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value), 1.0
    match = _QUANTITY.match(value)
    if not match:
        raise InvalidInputError(f"{what} {value!r} is not a number with an optional unit")
    unit = match.group(2).lower()
    if unit not in units:
        raise InvalidInputError(f"{what} {value!r} has unknown unit {unit!r}; use {hint}")
    return float(match.group(1)), units[unit]


def parse_bytes(value: str | int | float) -> int:
    """Parse a byte count: ``1048576``, ``64MiB``, ``1.5GB``."""
    number, scale = _number_and_unit(value, "byte size", _SIZE_UNITS, "B, KB, MB, GB, KiB, MiB or GiB")
    total = number * scale
    if not math.isfinite(total) or total < 1 or total != math.floor(total):
        raise InvalidInputError(f"byte size {value!r} must be a positive whole number of bytes")
    return int(total)


def parse_rate(value: str | int | float) -> float:
    """Parse a bandwidth in bytes per second: ``8e9``, ``270GB/s``, ``200Mbit/s``."""
    number, scale = _number_and_unit(value, "bandwidth", _RATE_UNITS, "B/s, MB/s, GB/s, Mbit/s or Gbit/s")
    rate = number * scale
    if not rate > 0 or not math.isfinite(rate):
        raise InvalidInputError(f"bandwidth {value!r} must be positive")
    return rate


def parse_seconds(value: str | int | float) -> float:
    """Parse a duration in seconds: ``2e-6``, ``2us``, ``0.5ms``."""
    number, scale = _number_and_unit(value, "duration", _TIME_UNITS, "s, ms, us or ns")
    seconds = number * scale
    if seconds < 0 or not math.isfinite(seconds):
        raise InvalidInputError(f"duration {value!r} must be zero or positive")
    return seconds


def _exact(value: float, units: list[tuple[str, float]], parse) -> str:
    for suffix, scale in units:
        if value >= scale:
            text = f"{value / scale:.12g}{suffix}"
            if parse(text) == value:
                return text
    return repr(value)


def format_bytes(value: int) -> str:
    """Text form of a byte count that :func:`parse_bytes` reads back exactly."""
    for suffix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale and value % scale == 0:
            return f"{value // scale}{suffix}"
    return str(value)


def format_rate(value: float) -> str:
    """Text form of a bandwidth (bytes/s) that :func:`parse_rate` reads back exactly."""
    return _exact(value, [("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3), ("B/s", 1.0)], parse_rate)


def format_seconds(value: float) -> str:
    """Text form of a duration that :func:`parse_seconds` reads back exactly."""
    if value == 0:
        return "0s"
    return _exact(value, [("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)], parse_seconds)


def human_seconds(value: float) -> str:
    """Short display form for tables (not for round-trips)."""
    if value == 0:
        return "0"
    for suffix, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {suffix}"
    return f"{value * 1e9:.3g} ns"


def human_bytes(value: int) -> str:
    """Short display form of a byte count for tables (not for round-trips)."""
    for suffix, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.4g} {suffix}"
    return f"{value} B"


def human_rate(value: float) -> str:
    """Short display form of a bandwidth for tables (not for round-trips)."""
    for suffix, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {suffix}"
    return f"{value:.3g} B/s"
