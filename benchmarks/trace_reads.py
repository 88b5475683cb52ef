"""What a rank's trace reads cost as the trace grows: per-iteration telemetry and a search's window.

Each iteration a rank sends the service its telemetry, which reads that
iteration's motifs from the trace (:meth:`enforcer.trace.TraceReader.iteration_motifs`),
and each search asks every rank for a window of its last iterations
(:meth:`~enforcer.trace.TraceReader.window`). Both run in the training process,
on the cores the training uses. Until 6 December 2026 the C++ backend's trace
converted every motif it kept to Python objects for each iteration's telemetry,
and both traces converted every kept record for each window, so both reads
grew with the job's age (the trace keeps up to ``P2_TRACE_LIMIT`` records of
each kind, 200,000 by default). Now both read back from the newest record only
as far as they need.

This fills a trace, per implementation (``--impls``: the C++ backend's ring
and the Python tracer), with ``--iterations`` iterations shaped like the DLRM
job's on the emulated cluster (7 ops, 17 motifs of which one finishes during
the next iteration, 15 dispatcher waits; the counts its traces show), and
times, at each trace length, both reads the way they are made now
("windowed") and the way they were made ("whole": every kept record
converted, then filtered). Medians of ``--repeats`` reads. Writes
``trace_reads.json`` and ``.png`` under ``--out`` and prints a summary.

    .venv/bin/python benchmarks/trace_reads.py [--iterations 100 1000 10000] [--impls cpp python]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPS, MOTIFS, WAITS = 7, 17, 15      # per iteration, as the DLRM job's traces show
WINDOW = 7                          # iterations a search asks for (the service's default window)


class Filler:
    """Records iterations into a trace the way its runtime does (the C++ ring through its bindings)."""

    def __init__(self, impl: str, limit: int) -> None:
        from enforcer.group.native_trace import NativeTracer
        from enforcer.trace import Tracer

        self.trace = Tracer(0, 8, limit) if impl == "python" else NativeTracer(0, 8, limit)
        self.native = getattr(self.trace, "native", None)
        self.group = self.native.add_group(list(range(8)), "0") if self.native is not None else None

    def iterations(self, count: int) -> None:
        from optimizer_service.plan.trace import OpRecord

        for _ in range(count):
            iteration = self.trace.iteration
            for seq in range(OPS):
                if self.native is None:
                    self.trace.complete(self.trace.issue("all_reduce", "float32", 4096, tuple(range(8)), "0"))
                else:
                    self.native.complete(self.native.issue("all_reduce", "float32", 4096, self.group))
            for order in range(WAITS):
                if self.native is None:
                    self.trace.wait(order, 1e-4)
                else:
                    self.native.add_wait(order, 1e-4)
            for order in range(MOTIFS):
                owner = iteration - 1 if order == 0 and iteration > 0 else iteration    # one finishes late
                if self.native is None:
                    record = OpRecord(owner, order % OPS, order % OPS, "all_reduce", "float32", 4096,
                                      tuple(range(8)), "0", 0.0)
                    self.trace.motif(record, order, order % 2, 1e-4, 0.0, 1e-3)
                else:
                    self.native.add_motif(owner, order % OPS, order, order % 2, 1e-4, 0.0, 1e-3)
            self.trace.step()


def whole_motifs(trace, iteration: int) -> list:
    """The telemetry's read as the C++ trace made it before: every kept motif converted, then filtered
    (the Python tracer already read back from the newest: it has no whole read to compare)."""
    from optimizer_service.plan.trace import MotifRecord

    return [MotifRecord(*entry) for entry in trace.native.motifs() if entry[0] == iteration]


def whole_window(trace, iterations: int) -> bytes:
    """A search's window as it was made before: the whole trace as a document, then the last iterations."""
    document = trace.to_dict()
    keep = set(range(trace.iteration - iterations, trace.iteration))
    return json.dumps({**document, **{key: [item for item in document[key] if item[field] in keep]
                                       for key, field in (("ops", "iteration"), ("iterations", "index"),
                                                          ("waits", "iteration"), ("motifs", "iteration"),
                                                          ("cpu", "iteration"))}},
                      separators=(",", ":")).encode()


def _median_seconds(read, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(impl: str, lengths: list[int], repeats: int) -> list[dict]:
    filler = Filler(impl, limit=max(lengths) * max(OPS, MOTIFS, WAITS))
    rows, done = [], 0
    for length in sorted(lengths):
        filler.iterations(length - done)
        done = length
        trace, last = filler.trace, filler.trace.iteration - 1
        windowed = trace.window(WINDOW, 1 << 26)
        if json.loads(windowed) != json.loads(whole_window(trace, WINDOW)):
            raise AssertionError(f"{impl}: the windowed read sent another window than the whole read")
        native = impl == "cpp"
        if native and trace.iteration_motifs(last, MOTIFS * 2)[0] != whole_motifs(trace, last):
            raise AssertionError(f"{impl}: the windowed read found other motifs than the whole read")
        row = {"impl": impl, "iterations_kept": length,
               "records_kept": length * (OPS + MOTIFS + WAITS),
               "telemetry_windowed_seconds": _median_seconds(partial(trace.iteration_motifs, last, MOTIFS * 2),
                                                             repeats * 10),
               "telemetry_whole_seconds": (_median_seconds(partial(whole_motifs, trace, last), repeats)
                                           if native else None),
               "window_windowed_seconds": _median_seconds(partial(trace.window, WINDOW, 1 << 26), repeats),
               "window_whole_seconds": _median_seconds(partial(whole_window, trace, WINDOW), repeats),
               "window_bytes": len(windowed)}
        rows.append(row)
        before = (f"whole read {row['telemetry_whole_seconds'] * 1e6:10.1f} µs" if native
                  else "read back before too")
        print(f"  {impl:6} {length:>6} iterations kept: telemetry {row['telemetry_windowed_seconds'] * 1e6:8.1f} µs "
              f"({before}), window of {WINDOW} "
              f"{row['window_windowed_seconds'] * 1e3:7.2f} ms (whole read {row['window_whole_seconds'] * 1e3:9.2f} ms)",
              file=sys.stderr)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, read, title in ((axes[0], "telemetry", "one iteration's telemetry (its motifs)"),
                            (axes[1], "window", f"a search's window ({WINDOW} iterations)")):
        for impl in sorted({r["impl"] for r in rows}):
            mine = [r for r in rows if r["impl"] == impl]
            x = [r["iterations_kept"] for r in mine]
            for how, style in (("whole", "--"), ("windowed", "-")):
                if mine[0][f"{read}_{how}_seconds"] is None:
                    continue
                ax.plot(x, [r[f"{read}_{how}_seconds"] * 1e3 for r in mine], style, marker="o",
                        label=f"{impl}, {'read back as far as needed' if how == 'windowed' else 'whole trace (before)'}")
        ax.set(xscale="log", yscale="log", xlabel="iterations the trace keeps", ylabel="ms per read", title=title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, nargs="+", default=[100, 1000, 10000],
                        help="trace lengths (iterations kept) to read at")
    parser.add_argument("--impls", nargs="+", default=["cpp", "python"], choices=["cpp", "python"])
    parser.add_argument("--repeats", type=int, default=5, help="reads per figure (the median is kept)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if min(args.iterations) < WINDOW + 1 or max(args.iterations) > 20_000 or args.repeats < 1:
        parser.error(f"--iterations must lie in {WINDOW + 1}..20000 and --repeats be at least 1")
    from enforcer.group import native
    impls = [impl for impl in args.impls if impl == "python" or native.available()]
    if not impls:
        parser.error(f"no implementation to measure: {native.why_unavailable()}")
    rows = []
    for impl in impls:
        rows += measure(impl, args.iterations, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "trace_reads.json").write_text(json.dumps(
        {"machine": platform.node(), "python": platform.python_version(), "window_iterations": WINDOW,
         "per_iteration": {"ops": OPS, "motifs": MOTIFS, "waits": WAITS}, "rows": rows}, indent=1) + "\n")
    plot(rows, args.out / "trace_reads.png")
    print(f"trace reads ({OPS} ops, {MOTIFS} motifs, {WAITS} waits per iteration; medians):")
    for row in rows:
        telemetry = ("  (read back before too)" if row["telemetry_whole_seconds"] is None else
                     f"{row['telemetry_whole_seconds'] / row['telemetry_windowed_seconds']:8.1f}x cheaper")
        print(f"  {row['impl']:6} {row['iterations_kept']:>6} iterations: telemetry {telemetry}, "
              f"window {row['window_whole_seconds'] / row['window_windowed_seconds']:8.1f}x cheaper than the whole read")
    print(f"wrote {args.out / 'trace_reads.json'} and {args.out / 'trace_reads.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
