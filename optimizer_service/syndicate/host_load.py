"""What a job's iterations take of each host's cores, from its traces (issue 32, item 3; pure).

Every rank's trace names its host (``host``: ``id``, ``cores``) and records,
per iteration, the CPU seconds of its process and of the thread that ends the
iteration (``cpu``; :mod:`enforcer.host_cpu`). Ranks with one host id share
one kernel's cores: the emulated cluster's 2 × 4 ranks are eight processes on
one host of 2 cores, whatever the topology says of nodes. :func:`host_loads`
sums, per host and iteration, its ranks' CPU (iterations every rank of the
host recorded), and keeps the median over the window's iterations, so one
stalled iteration moves nothing (as :mod:`~optimizer_service.syndicate.trace_window`
does for compute).

Two figures come out of a :class:`HostLoad`:

* ``busy`` — the share of the host's cores the job kept busy, all threads:
  what says whether the host was the bottleneck (the emulated DLRM job: 65–70 %
  under passthrough, 83–85 % under searched plans).
* ``seconds`` — the step threads' CPU over the cores: a lower bound on the
  iteration time (:mod:`optimizer_service.syndicate.bound`'s host term). The
  step thread runs the training loop — the compute and the issuing of each op —
  which any plan has to run; the threads that move and reduce the bytes are
  left out, as their CPU depends on the plan. Compute on other threads (a
  library's intra-op pool) is left out too: the bound is then looser, never
  wrong. Our reading: the training loop's CPU per iteration does not depend on
  the plan (a plan's motifs run on the runtime's own threads, and the loop only
  hands each op over), so the figure from any window, passthrough's or a
  plan's, bounds every plan.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optimizer_service.units import human_seconds

MAX_ID = 64     # characters of a host id kept (a boot id has 36)


@dataclass(frozen=True)
class HostLoad:
    """One host's share of the job per iteration (medians over ``iterations``, module docstring)."""

    host: str
    cores: float
    ranks: tuple[int, ...]
    iterations: int
    wall_seconds: float              # the iteration's wall time (the longest of the host's ranks)
    process_cpu_seconds: float       # every thread of the host's ranks, summed
    step_thread_cpu_seconds: float   # the ranks' training-loop threads, summed

    @property
    def busy(self) -> float:
        """The share of the host's cores the job kept busy."""
        capacity = self.cores * self.wall_seconds
        return self.process_cpu_seconds / capacity if capacity > 0 else 0.0

    @property
    def seconds(self) -> float:
        """The least time the host's cores take to run the ranks' training loops once."""
        return self.step_thread_cpu_seconds / self.cores if self.cores > 0 else 0.0

    def to_dict(self) -> dict:
        return {"host": self.host, "cores": self.cores, "ranks": list(self.ranks), "iterations": self.iterations,
                "wall_seconds": self.wall_seconds, "process_cpu_seconds": self.process_cpu_seconds,
                "step_thread_cpu_seconds": self.step_thread_cpu_seconds, "busy": self.busy, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping) -> HostLoad:
        return cls(str(data["host"]), float(data["cores"]), tuple(int(r) for r in data["ranks"]),
                   int(data["iterations"]), float(data["wall_seconds"]), float(data["process_cpu_seconds"]),
                   float(data["step_thread_cpu_seconds"]))

    def __str__(self) -> str:
        return (f"host {self.host[:8]} ({self.cores:g} cores, ranks {_ranks(self.ranks)}): {self.busy:.0%} busy, "
                f"training loops {self.step_thread_cpu_seconds:.3f} core-s, other threads "
                f"{self.process_cpu_seconds - self.step_thread_cpu_seconds:.3f} core-s per iteration "
                f"(loops alone need {human_seconds(self.seconds)})")


def host_loads(traces: Sequence[Mapping]) -> tuple[HostLoad, ...]:
    """Each host's load per iteration (module docstring), hosts in order of their
    lowest rank; none for traces that carry no host or CPU records. A record that is
    not a finite, non-negative figure is left out (the load is advisory: a rank's
    odd record costs the bound its host term, never the search)."""
    members: dict[str, list[tuple[int, float, dict[int, tuple[float, float, float]]]]] = {}
    for trace in traces:
        where, rank = trace.get("host"), trace.get("rank")
        cores = _figure(where.get("cores")) if isinstance(where, Mapping) else None
        if not (isinstance(where, Mapping) and isinstance(where.get("id"), str) and where["id"]
                and isinstance(rank, int) and cores):
            continue
        records = _records(trace.get("cpu"))
        if records:
            members.setdefault(where["id"][:MAX_ID], []).append((rank, cores, records))
    loads = []
    for ident, ranks in members.items():
        common = set.intersection(*(set(records) for _, _, records in ranks))
        if not common:
            continue
        walls, process, own = [], [], []
        for iteration in sorted(common):
            figures = [records[iteration] for _, _, records in ranks]
            walls.append(max(wall for wall, _, _ in figures))
            process.append(sum(cpu for _, cpu, _ in figures))
            own.append(sum(step for _, _, step in figures))
        loads.append(HostLoad(ident, min(cores for _, cores, _ in ranks), tuple(sorted(r for r, _, _ in ranks)),
                              len(common), statistics.median(walls), statistics.median(process),
                              statistics.median(own)))
    return tuple(sorted(loads, key=lambda load: load.ranks[0]))


def _records(cpu: object) -> dict[int, tuple[float, float, float]]:
    """A trace's ``cpu`` records as ``{iteration: (wall, process, step thread)}``, the usable ones."""
    found = {}
    for record in cpu if isinstance(cpu, list) else ():
        if not isinstance(record, Mapping) or not isinstance(record.get("iteration"), int):
            continue
        figures = tuple(_figure(record.get(name), zero=True) for name in ("wall", "process_cpu", "step_thread_cpu"))
        if all(figure is not None for figure in figures):
            found[record["iteration"]] = figures
    return found


def _figure(value: object, zero: bool = False) -> float | None:
    """``value`` as a finite float (positive, or also 0 with ``zero``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and (value > 0 or (zero and value == 0)) else None


def _ranks(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))
