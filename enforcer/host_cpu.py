"""The host a rank runs on and the CPU each iteration took (issue 32, item 3).

On a loaded host the ranks' compute and the threads that move their bytes share
the cores: on the emulated 2 × 4 cluster (8 ranks, 2 cores) the cores were
65–70 % busy under passthrough and 83–94 % under searched plans, and the
compute took 31 % longer under a plan than under passthrough. What the
optimizer needs to see that, per rank and iteration, is recorded here:

* :func:`host` — ``{"id", "cores"}``: ``id`` is the kernel's boot id
  (``/proc/sys/kernel/random/boot_id``), which every process of one kernel
  shares, network namespaces and containers included — ranks with one id share
  one set of cores; without it, the host name. ``cores`` is the CPUs this
  process may run on (its affinity), capped by a CFS quota (cgroup v2
  ``cpu.max`` or v1 ``cpu.cfs_quota_us``) where one is set.
* :class:`CpuClock` — at each iteration end, the iteration's wall seconds, the
  CPU seconds of the whole process (every thread: compute, the inner backend's
  and the plan runtime's threads) and of the thread that ends iterations (the
  training loop's, which runs the compute and issues the ops; a plan's motifs
  run on the runtime's own threads).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CGROUP_V2_MAX = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1_QUOTA = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
CGROUP_V1_PERIOD = Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us")


def host() -> dict:
    """``{"id": str, "cores": float}`` of the host this process runs on (module docstring)."""
    try:
        ident = BOOT_ID.read_text().strip()
    except OSError:
        ident = ""
    return {"id": ident or socket.gethostname(), "cores": cores()}


def cores() -> float:
    """The cores this process can use: its CPU affinity, capped by a CFS quota."""
    try:
        count = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        count = float(os.cpu_count() or 1)
    quota = _quota()
    return min(count, quota) if quota else count


def _quota() -> float | None:
    """CPUs a CFS quota allows (cgroup v2, else v1), or None without one."""
    try:
        limit, period = CGROUP_V2_MAX.read_text().split()[:2]
        return None if limit == "max" else int(limit) / int(period)
    except (OSError, ValueError):
        pass
    try:
        limit, period = int(CGROUP_V1_QUOTA.read_text()), int(CGROUP_V1_PERIOD.read_text())
    except (OSError, ValueError):
        return None
    return limit / period if limit > 0 and period > 0 else None


class CpuClock:
    """Per-iteration CPU (module docstring): :meth:`lap` at each iteration end gives the
    record of the iteration it closes, or None for the first lap (nothing to measure
    from) and for a lap on another thread than the previous (its thread CPU is not
    comparable)."""

    def __init__(self) -> None:
        self._mark: tuple[int, float, float, float] | None = None

    def skip(self, seconds: float) -> None:
        """Leave ``seconds`` of wall time out of the running iteration: the loop was idle
        (:func:`enforcer.idle`; what CPU it spent polling, if any, stays in)."""
        if self._mark is not None:
            thread, process, own, wall = self._mark
            self._mark = (thread, process, own, wall + seconds)

    def lap(self, iteration: int, wall: float) -> dict | None:
        """The CPU of ``iteration``, which ends now at ``wall`` (seconds on the trace's clock)."""
        thread, own = threading.get_ident(), time.thread_time()
        process = time.process_time()
        mark, self._mark = self._mark, (thread, process, own, wall)
        if mark is None or mark[0] != thread:
            return None
        process, own = process - mark[1], own - mark[2]
        # The two clocks are read a moment apart and kept by the kernel apart: the process's
        # can come out a microsecond short of the thread it includes.
        return {"iteration": iteration, "wall": wall - mark[3], "process_cpu": max(process, own),
                "step_thread_cpu": own}
