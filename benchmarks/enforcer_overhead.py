"""What the p2enforcer backend costs in passthrough: all_reduce through it vs plain gloo.

Each world (default 1, 2 and 8 local ranks, loopback) is initialised with
``p2enforcer``, once per implementation (``--impls``: the C++ backend and the
Python group, ``P2_ENFORCER_IMPL``); a plain ``gloo`` group over the same ranks
is made beside it.
Both run the same all_reduce, alternating group every round so drift hits both
alike (and a third case runs it under a plan, below): tiny ops (8 B) as a burst of back-to-back synchronous ops per round
(time per op), large ops (16 MiB) one per round. The figure per (world, size)
is the median over rounds of rank 0's time; the overhead is the difference of
the medians (µs per op), the median of the per-round differences ("paired",
less sensitive to drift), and the ratio of the medians. A world of 1 rank
isolates the enforcer's own per-op CPU cost from network and scheduling jitter.
The planned case installs a plan that cuts a 256 B all_reduce into 8 segment
motifs and times it against one plain gloo all_reduce of 256 B: what the plan
runtime (submission, dispatcher, channel worker: C++ or Python) costs per op.
Where the UCC extension is built, the same plan runs once more with its motifs
on a UCC channel (``P2_CHANNEL_BACKENDS=gloo,ucc``, channel 1): each motif is
then one UCC all_reduce, issued by the C++ runtime without Python.
The Python group's bypass counter (:mod:`enforcer.group.bypass`) is switched off,
because it also observes plain gloo's dispatcher path and would slow the
baseline (the C++ backend has none: nothing bypasses it). Writes
``enforcer_overhead.json`` and ``.png`` under ``--out`` and prints a summary.

    .venv/bin/python benchmarks/enforcer_overhead.py [--worlds 1 2 8] [--impls cpp python] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from deploy.local_world import run_world

ROOT = Path(__file__).resolve().parents[1]
SIZES = {"8 B": 8, "16 MiB": 16 * 2**20}
BURST = 200          # tiny ops per round
#: The planned case: an all_reduce of this many bytes cut into MOTIFS segments by a plan, so each op is
#: submitted, ordered by the dispatcher and run as MOTIFS motifs on the channel worker.
PLANNED = ("256 B, plan of 8 motifs", 256)
MOTIFS = 8
PLANNED_BURST = 20   # planned ops per round (each is MOTIFS collectives on the channel: slow on 8 ranks)
PLANNED_UCC = ("256 B, plan of 8 motifs on UCC", 256)


def measure(sizes: dict[str, int], rounds: int, with_ucc: bool = False) -> dict:
    """On every rank: per size, the per-op seconds of each round for both groups."""
    import torch
    import torch.distributed as dist

    plain = dist.new_group(backend="gloo")
    result = {}
    for label, nbytes in sizes.items():
        tensor = torch.ones(max(1, nbytes // 4))
        result[label] = _alternate(tensor, rounds, BURST if nbytes < 2**20 else 1, plain)
    result[PLANNED[0]] = _planned(rounds, plain, channel=0)
    if with_ucc:
        result[PLANNED_UCC[0]] = _planned(rounds, plain, channel=1)
    return result


def _alternate(tensor, rounds: int, burst: int, plain) -> dict[str, list[float]]:
    """Per round, the per-op seconds of ``burst`` all_reduces of ``tensor`` on plain gloo and on the
    p2enforcer world, alternating which goes first; round 0 warms both up."""
    import torch.distributed as dist

    times = {"gloo": [], "p2enforcer": []}
    for round_ in range(rounds + 1):
        order = [("gloo", plain), ("p2enforcer", dist.group.WORLD)]
        if round_ % 2:
            order.reverse()
        for name, group in order:
            dist.barrier(group=plain)
            start = time.perf_counter()
            for _ in range(burst):
                dist.all_reduce(tensor, group=group)
            if round_:
                times[name].append((time.perf_counter() - start) / burst)
    return times


def _planned(rounds: int, plain, channel: int) -> dict[str, list[float]]:
    """Per round, the per-op seconds of a burst of planned all_reduces (motifs on ``channel``), and of plain
    gloo's."""
    import torch
    import torch.distributed as dist

    import enforcer
    from optimizer_service.plan.collective import Collective
    from optimizer_service.plan.motif import comm_op
    from optimizer_service.plan.op_plan import OpKey, OpPlan
    from optimizer_service.plan.plan import Plan
    from optimizer_service.plan.motif import rewrite
    from optimizer_service.syndicate.transforms import segment

    size, elements = dist.get_world_size(), PLANNED[1] // 4
    # One op per iteration (seq 0): without enforcer.step() an iteration ends after the plan's last op.
    motifs = segment(comm_op(Collective.ALL_REDUCE, range(size), elements), elements // MOTIFS)
    op = OpPlan.of(OpKey(0, "all_reduce", PLANNED[1], tuple(range(size))),
                   rewrite(motifs, lambda m: replace(m, channel=channel)))
    enforcer.install_plan(Plan(version=1, world_size=size, channels={c: None for c in range(channel + 1)}, ops=(op,)))
    times = _alternate(torch.ones(elements), rounds, PLANNED_BURST, plain)
    enforced = sum(1 for record in enforcer.trace()["ops"] if record["enforced"])
    enforcer.remove_plan()
    if enforced < PLANNED_BURST:
        raise AssertionError(f"only {enforced} all_reduces ran under the plan")
    return times


def summarize(world: int, impl: str, per_rank: list[dict]) -> list[dict]:
    rows = []
    for label, nbytes in [*SIZES.items(), PLANNED, PLANNED_UCC]:
        times = per_rank[0].get(label)
        if times is None:
            continue
        gloo = statistics.median(times["gloo"])
        enforced = statistics.median(times["p2enforcer"])
        paired = statistics.median(e - g for e, g in zip(times["p2enforcer"], times["gloo"]))
        rows.append({"world": world, "impl": impl, "size": label, "bytes": nbytes,
                     "gloo_seconds": gloo, "p2enforcer_seconds": enforced,
                     "added_microseconds": (enforced - gloo) * 1e6,
                     "added_microseconds_paired": paired * 1e6,
                     "ratio": enforced / gloo})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {label: nbytes for label, nbytes in [*SIZES.items(), PLANNED, PLANNED_UCC]
              if any(r["size"] == label for r in rows)}
    fig, axes = plt.subplots(1, len(labels), figsize=(5.5 * len(labels), 3.8))
    impls = sorted({r["impl"] for r in rows})
    width = 0.8 / (1 + len(impls))
    for ax, label in zip(axes, labels):
        worlds = sorted({r["world"] for r in rows})
        scale = 1e6 if labels[label] < 2**20 else 1e3
        unit = "µs" if scale == 1e6 else "ms"
        for k, name in enumerate(["gloo", *impls]):
            heights = []
            for world in worlds:
                mine = [r for r in rows if r["size"] == label and r["world"] == world]
                if name == "gloo":          # each impl's run measured gloo beside it: their mean
                    heights.append(statistics.mean(r["gloo_seconds"] for r in mine) * scale)
                else:
                    heights.append(next(r["p2enforcer_seconds"] for r in mine if r["impl"] == name) * scale)
            ax.bar([x + (k - len(impls) / 2) * width for x in range(len(worlds))], heights, width,
                   label=name if name == "gloo" else f"p2enforcer ({name})")
        ax.set_xticks(list(range(len(worlds))), [f"{w} rank{'s' if w > 1 else ''}" for w in worlds])
        ax.set_ylabel(f"all_reduce, median {unit} per op")
        ax.set_title(label if label == PLANNED[0] else f"{label} (passthrough)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--impls", nargs="+", choices=("cpp", "python"), default=["cpp", "python"])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.rounds < 1 or any(w < 1 for w in args.worlds):
        print("enforcer_overhead: --rounds must be >= 1 and every world >= 1 rank", file=sys.stderr)
        return 2
    from enforcer.group import native
    if "cpp" in args.impls and not native.available():
        print(f"enforcer_overhead: {native.why_unavailable()} (or pass --impls python)", file=sys.stderr)
        return 2
    from enforcer.comm import ucc
    with_ucc = ucc.available()
    if not with_ucc:
        print(f"enforcer_overhead: no UCC channel row ({ucc.why_unavailable()})", flush=True)
    rows = []
    for world in args.worlds:
        for impl in args.impls:
            print(f"world of {world} ranks, {impl} backend ...", flush=True)
            # The bypass counter observes every dispatcher-level c10d op, plain
            # gloo's included; it is off here so the baseline is torch's own path.
            per_rank = run_world(world, measure, SIZES, args.rounds, with_ucc, backend="p2enforcer", timeout=1200,
                                 env={"P2_COUNT_BYPASS": "0", "P2_ENFORCER_IMPL": impl,
                                      "P2_CHANNEL_BACKENDS": "gloo,ucc" if with_ucc else ""})
            rows += summarize(world, impl, per_rank)
    args.out.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": "enforcer_overhead", "rounds": args.rounds, "burst": BURST,
                "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
                "rows": rows}
    (args.out / "enforcer_overhead.json").write_text(json.dumps(document, indent=1) + "\n")
    plot(rows, args.out / "enforcer_overhead.png")
    print(f"{'ranks':>5} {'impl':>6} {'size':>23} {'gloo':>11} {'p2enforcer':>11} {'added':>12} {'paired':>12} "
          f"{'ratio':>7}")
    for r in rows:
        print(f"{r['world']:>5} {r['impl']:>6} {r['size']:>23} {r['gloo_seconds'] * 1e6:>9.1f}µs "
              f"{r['p2enforcer_seconds'] * 1e6:>9.1f}µs {r['added_microseconds']:>9.1f} µs "
              f"{r['added_microseconds_paired']:>9.1f} µs {r['ratio']:>7.3f}")
    print("goals (C++ backend): <= 10 µs added per tiny op (median), <= 2 % at 16 MiB; the planned row: an op "
          f"cut into {MOTIFS} motifs (submission, dispatcher, channel worker) against one plain gloo op; on UCC: "
          "each motif one UCC all_reduce")
    return 0


if __name__ == "__main__":
    sys.exit(main())
