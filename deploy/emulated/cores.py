"""The host's cores as the kernel counts them (``/proc/stat``): what the emulated cluster runs on.

The emulated cluster's ranks, the kernel's handling of their packets (the
veths, bridges and ``tbf`` queues of every NIC) and the optimizer service all
share one host's cores. Whether an iteration is bound by those cores, not by
the NICs or the plan, shows in how busy they were while it ran; a rank's own
CPU clocks (``enforcer/host_cpu.py``) do not show the kernel's packet
handling, which runs in softirq context and is charged to no process.

:func:`sample` reads the cumulative times of the CPUs this process may run on;
:func:`shares` turns two samples into the share of those cores' time that went
to each kind of work between them:

* ``processes`` — user and system time of processes at normal priority (the
  ranks, their backends' threads, the service);
* ``kernel`` — interrupts and softirqs (mostly the emulated NICs' packets);
* ``niced`` — processes at lowered priority (the service's search worker,
  ``P2_SEARCH_NICE``), which take only what the others leave;
* ``steal`` — time the hypervisor gave to other guests;
* ``busy`` — the sum of ``processes`` and ``kernel``: what the job's iteration
  competed for (``niced`` and ``steal`` left out).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CoreTimes:
    """Cumulative seconds of some CPUs' time by kind (``/proc/stat``'s first eight columns;
    ``user`` includes guest time, as the kernel counts it)."""

    cpus: int
    user: float = 0.0
    nice: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0
    irq: float = 0.0
    softirq: float = 0.0
    steal: float = 0.0

    @property
    def total(self) -> float:
        return sum(getattr(self, name) for name in FIELDS)

    def to_list(self) -> list[float]:
        return [self.cpus, *(getattr(self, name) for name in FIELDS)]

    @classmethod
    def from_list(cls, values: Iterable[float]) -> CoreTimes:
        cpus, *times = values
        if len(times) != len(FIELDS):
            raise ValueError(f"a core-times sample has {len(FIELDS) + 1} numbers, not {len(times) + 1}")
        return cls(int(cpus), *map(float, times))


def parse(text: str, cpus: Iterable[int] | None = None, ticks_per_second: float = 100.0) -> CoreTimes:
    """The times of ``cpus`` (all of the host's when None) from ``/proc/stat``'s text."""
    wanted = None if cpus is None else {f"cpu{cpu}" for cpu in cpus}
    sums, count = [0] * len(FIELDS), 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or (wanted is not None and name not in wanted):
            continue
        values = [int(value) for value in rest.split()[:len(FIELDS)]]
        values += [0] * (len(FIELDS) - len(values))
        sums = [total + value for total, value in zip(sums, values, strict=True)]
        count += 1
    if count == 0:
        raise ValueError("/proc/stat names none of the CPUs asked for")
    return CoreTimes(count, *(value / ticks_per_second for value in sums))


def sample() -> CoreTimes | None:
    """The CPUs this process may run on, now (None where ``/proc/stat`` cannot be read)."""
    try:
        text = PROC_STAT.read_text()
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return parse(text, cpus, float(os.sysconf("SC_CLK_TCK")))
    except (OSError, ValueError):
        return None


def shares(before: CoreTimes, after: CoreTimes) -> dict[str, float] | None:
    """The share of the cores' time between two samples that each kind of work took
    (module docstring); None when no time passed or the CPUs differ."""
    if before.cpus != after.cpus:
        return None
    spent = after.total - before.total
    if spent <= 0:
        return None

    def share(*names: str) -> float:
        return max(0.0, sum(getattr(after, name) - getattr(before, name) for name in names)) / spent

    found = {"cores": float(after.cpus), "processes": share("user", "system"), "kernel": share("irq", "softirq"),
             "niced": share("nice"), "steal": share("steal"), "idle": share("idle", "iowait")}
    found["busy"] = found["processes"] + found["kernel"]
    return found
