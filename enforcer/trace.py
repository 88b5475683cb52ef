"""What the enforcer saw: every comm-op of this rank, iteration boundaries, waits.

The trace is the optimizer's input (Syndicate §5: the plan is made from a
profile of one iteration; ARCHITECTURE.md "Trace"). Per rank it records every
op that reached a ``p2enforcer`` process group, in submission order:

* ``iteration`` and ``seq`` — the op's position in its iteration (all groups),
  and ``group_seq`` — its position among the ops of its group, which is the
  sequence number a plan keys ops by (:mod:`optimizer_service.plan.op_plan`);
* ``kind``, ``dtype``, ``bytes`` (the size of the op's buffer: the tensor for
  all_reduce/broadcast/reduce, the output of gathers, the input of
  reduce-scatters and all-to-alls), ``group`` (global ranks in group order);
* ``issued`` and ``completed`` — seconds since the trace started (one
  monotonic clock per rank), and ``gap`` — ``issued`` minus the completion of
  the previous op, i.e. the compute between them (negative when the op was
  issued while the previous one was still running). Time the training loop
  said it was idle (:func:`enforcer.idle`, between two iterations: paused by
  its launcher) is not compute: it is left out of the gap it falls in.

Iteration boundaries come from :meth:`Tracer.step` (``enforcer.step()``, or
the hook :func:`enforcer.attach` puts on an optimizer). Without a single
``step``, :func:`detect_period` finds them from the repeating op signature
sequence when the trace is exported: the ops before the first full period
(setup, e.g. DDP's initial parameter broadcast) get iteration ``-1``.

Waits are the dispatcher's measured waits for the next motif in plan order
(Syndicate Pseudocode 2), ``motifs`` every planned motif this rank ran (its
op, plan order, channel, the wait for its turn, its start and duration on the
channel: what replanning and cost re-fitting read), ``bypassed`` counts ops that reached the inner
backend without passing through the enforcer, and ``switches`` lists the plans
the optimizer service switched this rank to (``iteration``, ``version``, and
``at``, seconds since the trace started; :mod:`enforcer.link.switching`): ops are
``enforced`` from that iteration on. ``host`` (``id``, ``cores``) says which
cores the rank shares with which others, and ``cpu`` what each iteration took
of them (``iteration``, ``wall``, ``process_cpu``, ``step_thread_cpu``;
:mod:`enforcer.host_cpu`), one record per iteration that ended with ``step``.
``inner_backends`` names the default group's inner backend per device
(``{"cpu": "gloo"}``): what an op no plan enforces runs on, which the service
prices it by (gloo's reduce-scatter is an all-reduce;
:mod:`optimizer_service.syndicate.library_ops`).

Who reads a trace (the link's telemetry and trace windows, ``enforcer.trace()``,
the metrics, the export at exit) sees a :class:`TraceReader`. Its Python
implementation, :class:`Tracer`, also records the ops, waits and motifs of the
Python group and plan runtime; the C++ backend records its own into a ring
buffer that :class:`enforcer.group.native_trace.NativeTracer` reads. Iteration
ends, switches and bypassed ops come from Python with either, so every reader
takes them.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from enforcer.host_cpu import CpuClock, host
from enforcer.settings import DEFAULT_TRACE_LIMIT
from optimizer_service.plan.trace import TRACE_FORMAT, TRACE_VERSION, MotifRecord, OpRecord, Wait


CPU_RECORDS = 512       # iterations whose CPU the trace keeps (a window asks for tens)
IDLE_RECORDS = 512      # idle spans the trace keeps (one per pause of the loop; gaps need the recent ones)


def detect_period(signatures: Sequence[tuple]) -> tuple[int, int] | None:
    """``(start, period)`` of the shortest period that repeats at least twice
    up to the end of ``signatures`` (only a prefix may differ), or ``None``.

    Our reading of "detected from the repeating op signature sequence": an
    iteration is the shortest block of ops that the tail of the trace repeats;
    the last block may be cut off (an iteration still running) and the ops
    before the first full block are setup. Ties go to the earliest start.
    """
    n = len(signatures)
    for period in range(1, n // 2 + 1):
        # Walk back from the end while the sequence agrees with itself one period on.
        i = n - period - 1
        while i >= 0 and signatures[i] == signatures[i + period]:
            i -= 1
        start = i + 1
        if n - start >= 2 * period:
            return start, period
    return None


class TraceReader(ABC):
    """The per-rank trace as its readers see it; thread-safe. Also takes the
    records that come from Python whichever group records the ops: iteration ends
    (:meth:`step`), plan switches (:meth:`switched`) and bypassed ops (:meth:`bypass`)."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self.started = time.perf_counter()
        self.started_unix = time.time()
        self._lock = threading.Lock()
        self.iteration = 0
        self.steps = 0
        self.bypassed: Counter[str] = Counter()
        self.switches: list[dict] = []     # plans the optimizer service switched to, at which iteration
        self.host = host()
        #: the default group's inner backend per device ({"cpu": "gloo"}): what an op not enforced runs on
        self.inner_backends: dict[str, str] = {}
        self._clock = CpuClock()
        self._cpu: deque[dict] = deque(maxlen=CPU_RECORDS)
        self._idle: deque[tuple[float, float]] = deque(maxlen=IDLE_RECORDS)

    @abstractmethod
    def now(self) -> float:
        """Seconds since the trace started (the clock of every time in it)."""

    @property
    @abstractmethod
    def counts(self) -> Counter[str]:
        """Ops seen so far, by kind (also those the trace no longer keeps)."""

    @property
    @abstractmethod
    def waited(self) -> float:
        """All dispatcher waits so far, seconds (telemetry takes differences)."""

    def step(self) -> int:
        """Close the current iteration (and record its CPU, :mod:`enforcer.host_cpu`);
        returns the new iteration index."""
        with self._lock:
            closed = self.iteration
            self.iteration = self._advance()
            self.steps += 1
            record = self._clock.lap(closed, self.now())
            if record is not None:
                self._cpu.append(record)
            return self.iteration

    @abstractmethod
    def _advance(self) -> int:
        """Start the next iteration in the record (under the lock); returns its index."""

    @abstractmethod
    def iteration_ops(self, iteration: int, limit: int) -> list[OpRecord]:
        """The newest ``limit`` ops of ``iteration``, oldest first, for per-iteration
        telemetry (meant for the iteration that just ended)."""

    @abstractmethod
    def iteration_motifs(self, iteration: int, limit: int) -> tuple[list[MotifRecord], int]:
        """The first ``limit`` motifs run for ``iteration``'s ops, in the order they
        finished, and how many more there were (for telemetry, like :meth:`iteration_ops`).

        Called once per iteration, so it reads back from the newest motif only as far
        as the iteration before ``iteration`` and costs the same at step 10 as at step
        100,000: a plan moves an op at most across one iteration boundary
        (``after_previous``, :mod:`optimizer_service.syndicate.dag`), so motifs of
        ``iteration - 1`` may finish among ``iteration``'s, but none older."""

    @abstractmethod
    def wait_seconds(self) -> float:
        """The dispatcher waits the trace keeps, summed."""

    @abstractmethod
    def _waits_and_motifs(self, since: int | None = None) -> tuple[list[Wait], list[MotifRecord]]:
        """The kept waits and motifs (of iterations ``since`` and later; ``None``: all), copied."""

    @abstractmethod
    def _op_dicts(self, since: int | None = None) -> tuple[list[dict], int, int]:
        """The kept ops (of iterations ``since`` and later; ``None``: all) as dicts (OpRecord's
        fields), how many were dropped, and the steps so far."""

    def idle(self, started: float, ended: float) -> None:
        """The training loop was idle from ``started`` to ``ended`` (this clock), between two
        iterations (:func:`enforcer.idle`): the gap that span falls in, the next iteration's
        telemetry (:mod:`enforcer.link.telemetry`) and its CPU record leave it out."""
        if not ended > started:
            return
        with self._lock:
            self._idle.append((started, ended))
            self._clock.skip(ended - started)

    def idle_between(self, start: float, end: float) -> float:
        """Seconds of the idle spans the trace keeps between ``start`` and ``end`` (this clock)."""
        with self._lock:
            return _idle_within(self._idle, start, end)     # a few hundred spans at most: IDLE_RECORDS

    def switched(self, version: int, iteration: int) -> None:
        """A service plan runs from ``iteration`` on (:mod:`enforcer.link.switching`)."""
        with self._lock:
            self.switches.append({"iteration": iteration, "version": version, "at": self.now()})

    def bypass(self, kind: str) -> int:
        with self._lock:
            self.bypassed[kind] += 1
            return self.bypassed[kind]

    # ----------------------------------------------------------------- export
    def window(self, iterations: int, max_bytes: int) -> bytes:
        """The trace of the last ``iterations`` finished iterations (0: all kept)
        as JSON, halving the count until it fits ``max_bytes``; the ops of the
        iteration still running are never in it. ``b""`` when nothing fits.

        With ``step`` boundaries it reads only those iterations and the one before
        them (for the first op's ``gap``), so a window costs the same late in a long
        job as early, however much the trace keeps."""
        since = None if iterations <= 0 or self.steps == 0 else self.iteration - iterations - 1
        document = self.to_dict(since)
        current = self.iteration
        stepped = document["boundaries"] == "step"
        finished = sorted({op["iteration"] for op in document["ops"]
                           if op["iteration"] >= 0 and (op["iteration"] < current or not stepped)})
        count = len(finished) if iterations <= 0 else min(iterations, len(finished))
        while count > 0:
            keep = set(finished[-count:])
            text = json.dumps({**document,
                               "ops": [op for op in document["ops"] if op["iteration"] in keep],
                               "iterations": [span for span in document["iterations"] if span["index"] in keep],
                               "waits": [w for w in document["waits"] if w["iteration"] in keep],
                               "motifs": [m for m in document["motifs"] if m["iteration"] in keep],
                               "cpu": [c for c in document["cpu"] if c["iteration"] in keep]},
                              separators=(",", ":")).encode()
            if len(text) <= max_bytes:
                return text
            count //= 2
        return b""

    def to_dict(self, since: int | None = None) -> dict:
        """The trace document (the module docstring); ``since``: only the iterations from
        ``since`` on (their ops, waits, motifs and spans), for :meth:`window`."""
        waits, motifs = self._waits_and_motifs(since)
        ops, dropped, steps = self._op_dicts(since)
        waits = [asdict(w) for w in waits]
        motifs = [asdict(m) for m in motifs]
        boundaries = "step"
        if steps == 0:
            boundaries = _assign_detected_iterations(ops)
        with self._lock:
            idle = list(self._idle)
        ends = [end for _, end in idle]
        previous_completion = None
        for op in ops:
            op["group"] = list(op["group"])
            op["gap"] = None if previous_completion is None else (
                op["issued"] - previous_completion - _idle_within(idle, previous_completion, op["issued"], ends))
            previous_completion = op["completed"]
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_VERSION,
            "rank": self.rank,
            "world_size": self.world_size,
            "started_unix": self.started_unix,
            "boundaries": boundaries,
            "iterations": _iteration_spans(ops),
            "ops": ops,
            "dropped_ops": dropped,
            "waits": waits,
            "motifs": motifs,
            "op_counts": dict(self.counts),
            "bypassed": dict(self.bypassed),
            "switches": list(self.switches),
            "host": dict(self.host),
            "inner_backends": dict(self.inner_backends),
            "cpu": self._cpu_records(),
        }

    def _cpu_records(self) -> list[dict]:
        with self._lock:
            return [dict(record) for record in self._cpu]

    def export(self, path: str | os.PathLike) -> Path:
        """Write the trace as JSON (atomically) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(tmp, path)
        return path


class Tracer(TraceReader):
    """The trace the Python group and plan runtime record into: ops (:meth:`issue`,
    :meth:`complete`), the dispatcher's waits (:meth:`wait`) and the motifs run (:meth:`motif`)."""

    def __init__(self, rank: int, world_size: int, limit: int = DEFAULT_TRACE_LIMIT) -> None:
        super().__init__(rank, world_size)
        self._ops: deque[OpRecord] = deque(maxlen=limit)
        self._dropped = 0
        self._waits: deque[Wait] = deque(maxlen=limit)
        self._motifs: deque[MotifRecord] = deque(maxlen=limit)
        self._waited = 0.0
        self._seq = 0
        self._group_seq: dict[str, int] = {}
        self._counts: Counter[str] = Counter()

    def now(self) -> float:
        return time.perf_counter() - self.started

    @property
    def counts(self) -> Counter[str]:
        return self._counts

    @property
    def waited(self) -> float:
        return self._waited

    # ----------------------------------------------------------------- record
    def issue(self, kind: str, dtype: str, nbytes: int, group: tuple[int, ...], group_name: str) -> OpRecord:
        with self._lock:
            group_seq = self._group_seq.get(group_name, 0)
            self._group_seq[group_name] = group_seq + 1
            record = OpRecord(self.iteration, self._seq, group_seq, kind, dtype, nbytes, group, group_name,
                              time.perf_counter() - self.started)
            self._seq += 1
            if len(self._ops) == self._ops.maxlen:
                self._dropped += 1
            self._ops.append(record)
            self._counts[kind] += 1
        return record

    def complete(self, record: OpRecord) -> None:
        record.completed = time.perf_counter() - self.started

    def _advance(self) -> int:
        self._seq = 0
        self._group_seq.clear()
        return self.iteration + 1

    def wait(self, order: int, seconds: float) -> None:
        # No lock, as before: a dispatcher must not wait behind an export. The
        # total is telemetry only (two groups' dispatchers adding at once may lose one wait).
        self._waits.append(Wait(self.iteration, order, seconds))
        self._waited += seconds

    def motif(self, record: OpRecord, order: int, channel: int, waited: float, start: float,
              seconds: float) -> None:
        """A channel worker ran one motif of ``record`` (``start`` on :meth:`now`'s clock).
        No lock: deque appends are atomic and a worker must not wait behind an export."""
        self._motifs.append(MotifRecord(record.iteration, record.seq, order, channel, waited, start, seconds))

    # ------------------------------------------------------------------- read
    def iteration_motifs(self, iteration: int, limit: int) -> tuple[list[MotifRecord], int]:
        found = [record for record in _newest(self._motifs, iteration, 1) if record.iteration == iteration]
        return found[:limit], max(0, len(found) - limit)

    def iteration_ops(self, iteration: int, limit: int) -> list[OpRecord]:
        """The records themselves (a completion may still be filled in); scans back from the end of the trace."""
        found: list[OpRecord] = []
        with self._lock:
            for record in reversed(self._ops):
                if record.iteration > iteration:        # the next iteration's first ops (another thread)
                    continue
                if record.iteration < iteration or len(found) == limit:
                    break
                found.append(record)
        found.reverse()
        return found

    def wait_seconds(self) -> float:
        return sum(w.seconds for w in list(self._waits))

    def _waits_and_motifs(self, since: int | None = None) -> tuple[list[Wait], list[MotifRecord]]:
        # Waits and motifs are appended without the lock (see motif): list() copies a
        # deque in one call that runs no Python code, so no append lands mid-copy;
        # iterating the deque itself while converting each record did (RuntimeError).
        if since is None:
            return list(self._waits), list(self._motifs)
        return _newest(self._waits, since, 1), _newest(self._motifs, since, 1)

    def _op_dicts(self, since: int | None = None) -> tuple[list[dict], int, int]:
        with self._lock:
            ops = self._ops if since is None else _newest(self._ops, since, 0)
            return [asdict(r) for r in ops], self._dropped, self.steps


def _newest(records: deque, since: int, slack: int) -> list:
    """The records of iterations ``since`` and later, oldest first, read back from the newest
    until one more than ``slack`` iterations older than ``since``: ops are recorded in
    iteration order (slack 0); motifs as they finish, where the previous iteration's may
    still finish among the next one's (slack 1, :meth:`TraceReader.iteration_motifs`), and
    waits by dispatcher threads that may read the iteration just before a step (slack 1).
    Channel workers append without the lock (:meth:`Tracer.motif`); an append during the
    read is taken as a reason to read again."""
    while True:
        found = []
        try:
            for record in reversed(records):
                if record.iteration < since - slack:
                    break
                if record.iteration >= since:
                    found.append(record)
        except RuntimeError:        # the deque changed under the read (see above): again
            continue
        found.reverse()
        return found


def _assign_detected_iterations(ops: list[dict]) -> str:
    """Renumber ``iteration``/``seq``/``group_seq`` from the detected period."""
    found = detect_period([(o["kind"], o["dtype"], o["bytes"], tuple(o["group"])) for o in ops])
    if found is None:
        return "none"
    start, period = found
    group_seq: dict[tuple[int, str], int] = {}
    for index, op in enumerate(ops):
        iteration = -1 if index < start else (index - start) // period
        op["iteration"] = iteration
        op["seq"] = index - start - iteration * period if iteration >= 0 else index
        key = (iteration, op["group_name"])
        op["group_seq"] = group_seq.get(key, 0)
        group_seq[key] = op["group_seq"] + 1
    return "detected"


def _idle_within(idle: Sequence[tuple[float, float]], start: float, end: float,
                 ends: Sequence[float] | None = None) -> float:
    """Seconds of the ``idle`` spans (in time order, none overlapping) between ``start`` and
    ``end``; ``ends``: the spans' ends, when the caller asks many times."""
    ends = [span_end for _, span_end in idle] if ends is None else ends
    total = 0.0
    for k in range(bisect.bisect_right(ends, start), len(idle)):
        span_start, span_end = idle[k]
        if span_start >= end:
            break
        total += min(span_end, end) - max(span_start, start)
    return total


def _iteration_spans(ops: list[dict]) -> list[dict]:
    spans: dict[int, dict] = {}
    for op in ops:
        span = spans.setdefault(op["iteration"], {"index": op["iteration"], "ops": 0,
                                                  "start": op["issued"], "end": op["issued"]})
        span["ops"] += 1
        span["end"] = max(span["end"], op["completed"] if op["completed"] is not None else op["issued"])
    return [spans[k] for k in sorted(spans)]


def trace_path(template: str, rank: int) -> Path:
    """``P2_TRACE_FILE`` for this rank: ``{rank}`` in it is replaced by the rank;
    without it each rank writes ``STEM.rankR.SUFFIX`` beside the given name."""
    if "{rank}" in template:
        return Path(template.format(rank=rank))
    path = Path(template)
    return path.with_name(f"{path.stem}.rank{rank}{path.suffix or '.json'}")
