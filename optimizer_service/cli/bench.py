"""``p2 bench reduce``: measure synthesized programs against the flat AllReduce
inside an emulated cluster, and score the simulator's predictions. It reports
the cluster's fabric (lossless or lossy, :mod:`deploy.emulated.fabric`) and
the packets its NICs' queues dropped during the measurement, per run of a
candidate: on a lossy fabric a drop costs a TCP flow a retransmission timeout,
which the simulator does not model."""

from __future__ import annotations

import sys

import click

from deploy.emulated import ClusterInfo, load_cluster, nic_drops
from optimizer_service.catalog import load_topology
from optimizer_service.cli.bench_render import plot_predictions, render_bench
from optimizer_service.cli.measure_job import Run, measure
from optimizer_service.cli.params import ByteSize, IntList, write_json
from optimizer_service.hardware.accuracy import Candidate, evaluate
from optimizer_service.hardware.cost_model import Algorithm
from optimizer_service.p2.lowering import PlacementMap
from optimizer_service.p2.planner import Planner, speedup
from optimizer_service.p2.synthesis import DEFAULT_MAX_SIZE
from optimizer_service.plan.lowered import flat_allreduce
from optimizer_service.settings import Settings
from optimizer_service.units import format_bytes

DEFAULT_BENCH_BYTES = 16 * 2**20


@click.group()
def bench() -> None:
    """Measure on an emulated cluster ('p2 cluster up')."""


@bench.command("reduce")
@click.option("--cluster", "cluster_name", default="p2", show_default=True, help="Emulated cluster ('p2 cluster up').")
@click.option("--axes", required=True, type=IntList(), help="Parallelism axis sizes, e.g. 2,4 (product = ranks).")
@click.option("--reduce", "reduce_axes", required=True, type=IntList(), help="Axes to reduce over, e.g. 0 or 0,1.")
@click.option("--bytes", "nbytes", type=ByteSize(), default=DEFAULT_BENCH_BYTES,
              show_default=format_bytes(DEFAULT_BENCH_BYTES), help="Data per rank to reduce (float32).")
@click.option("--top", type=click.IntRange(min=0), default=5, show_default=True,
              help="Programs per placement, the simulator's fastest first (0: every program).")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed runs per candidate; the median is reported.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Untimed runs per candidate before timing (at least one runs: it is checked "
                   "against the exact sum).")
@click.option("--max-size", type=int, default=DEFAULT_MAX_SIZE, show_default=True, help="Program size limit.")
@click.option("--tolerance", type=click.FloatRange(min=0), default=0.05, show_default=True,
              help="Measured times within this fraction of the fastest count as tied (tolerant top-k).")
@click.option("--no-shaping", is_flag=True, help="Run the ranks on the host's loopback (no namespaces).")
@click.option("--json", "json_out", metavar="OUT", help="Write results as JSON to OUT ('-' for stdout).")
@click.option("--plot", "plot_out", metavar="OUT.png", help="Draw predicted against measured seconds.")
@click.pass_obj
def reduce_bench(settings: Settings, cluster_name: str, axes: tuple[int, ...], reduce_axes: tuple[int, ...],
                 nbytes: int, top: int, repeat: int, warmup: int, max_size: int, tolerance: float,
                 no_shaping: bool, json_out: str | None, plot_out: str | None) -> None:
    """Run the flat AllReduce and the top-K synthesized programs of every
    placement inside an emulated cluster, measure each (warm-up, repeats,
    median) and compare with the simulator: per placement and program the
    predicted and measured seconds and the speedup over the flat AllReduce of
    the same placement (measured), then MAPE, Spearman and top-1/top-5
    agreement over all measured candidates.

    Rank r is device r of the cluster's topology (node r // per-node); each
    parallelism matrix maps the axes onto those devices as P² defines. The
    report names the cluster's fabric (p2 cluster up --fabric) and the NICs'
    drops per measured run (0 on a lossless fabric).

    \b
    Example:
      p2 cluster up --nodes 2 --per-node 4 --nic 200Mbit/s && p2 calibrate
      p2 bench reduce --axes 2,4 --reduce 1 --bytes 16MiB --top 5 --plot bench.png
    """
    info = load_cluster(cluster_name, settings.cluster_dir)
    topology = load_topology(str(info.topology_path))
    if nbytes < 4:
        raise click.BadParameter("needs at least one float32 (4 bytes)", param_hint="--bytes")
    report = Planner(settings.limits()).synthesize(topology, axes, reduce_axes, nbytes, Algorithm.RING, max_size)
    span = topology.devices_per_instance(0)
    placements, runs = [], []
    for index, placement in enumerate(report.placements):
        groups = tuple(map(tuple, PlacementMap.build(placement.matrix, report.reduce).reduction_groups.tolist()))
        if len(groups[0]) < 2:
            continue
        flat = flat_allreduce(groups)
        chosen = placement.programs if top == 0 else placement.programs[:top]
        entry = {"matrix": placement.matrix.to_lists(), "crosses": _crosses(groups, span),
                 "flat": {"run": f"p{index}-flat", "predicted_seconds": placement.allreduce_seconds},
                 "programs": []}
        runs.append(Run(f"p{index}-flat", flat, groups, nbytes))
        lowered_runs: dict[str, str] = {}
        for ranked in chosen:
            key = str(ranked.lowered)
            if key not in lowered_runs:
                lowered_runs[key] = f"p{index}-{len(lowered_runs)}"
                runs.append(Run(lowered_runs[key], ranked.lowered, groups, nbytes))
            entry["programs"].append({"text": str(ranked.program), "run": lowered_runs[key],
                                      "predicted_seconds": ranked.predicted_seconds})
        placements.append(entry)
    if not runs:
        raise click.UsageError(f"axes {list(axes)} reduce {list(report.reduce)}: every reduction group is a "
                               "single rank, so there is nothing to measure")
    click.echo(f"bench: {len(runs)} distinct candidates over {len(placements)} placements on cluster "
               f"{info.name!r} ({info.fabric} fabric), {format_bytes(nbytes)} per rank, {warmup}+{repeat} runs each",
               err=True)
    shaped = info.shaped and not no_shaping
    drops_before = nic_drops(info) if shaped else {}
    measured = measure(info, runs, warmup=warmup, repeat=repeat, no_shaping=no_shaping,
                       master_port=settings.master_port)
    drops = drop_report(info, drops_before, len(runs) * (max(1, warmup) + repeat)) if shaped else None
    for entry in placements:
        flat = entry["flat"]
        result = measured[flat.pop("run")]
        flat.update(measured_seconds=result.median, runs_seconds=list(result.seconds))
        for program in entry["programs"]:
            result = measured[program.pop("run")]
            program.update(measured_seconds=result.median, runs_seconds=list(result.seconds),
                           speedup=speedup(flat["measured_seconds"], result.median),
                           predicted_speedup=speedup(flat["predicted_seconds"], program["predicted_seconds"]))
    accuracy = evaluate(measured_candidates(placements), tolerance)
    data = {"cluster": info.name, "topology": topology.to_dict(), "shaped": shaped,
            "fabric": info.fabric, "nic_drops": drops, "axes": list(axes), "reduce": list(report.reduce), "bytes": nbytes, "top": top,
            "warmup": warmup, "repeat": repeat, "placements": placements,
            "accuracy": accuracy.to_dict(), "summary": summarize(placements)}
    if json_out is not None:
        write_json(data, json_out)
    if plot_out is not None:
        plot_predictions(data, plot_out)
    if json_out != "-":
        click.echo(render_bench(data))
    elif plot_out is not None:
        print(f"plot: {plot_out}", file=sys.stderr)


def drop_report(info: ClusterInfo, before: dict[int, int], runs: int) -> dict:
    """The NICs' queue drops since ``before`` (:func:`deploy.emulated.nic_drops`), per channel and
    per measured run (``runs``: every run of every candidate, warm-up included)."""
    by_channel = {channel: count - before.get(channel, 0) for channel, count in nic_drops(info).items()}
    total = sum(by_channel.values())
    return {"by_channel": {str(channel): count for channel, count in by_channel.items()}, "total": total,
            "runs": runs, "per_run": total / runs if runs else 0.0}


def measured_candidates(placements: list[dict], first: int = 0) -> list[Candidate]:
    """Every measured candidate (flat AllReduce and programs) of ``placements``
    (the ``--json`` entries), numbered by placement from ``first``."""
    return [Candidate(first + number, c["predicted_seconds"], c["measured_seconds"])
            for number, entry in enumerate(placements) for c in [entry["flat"], *entry["programs"]]]


def _crosses(groups: tuple[tuple[int, ...], ...], span: int) -> bool:
    """Whether a reduction group has members in different instances of the outermost level."""
    return any(len({device // span for device in group}) > 1 for group in groups)


def summarize(placements: list[dict]) -> dict:
    """Best measured speedups and the spread across placements."""
    def best(entry):
        return min([entry["flat"]["measured_seconds"]] + [p["measured_seconds"] for p in entry["programs"]])

    crossing = [e for e in placements if e["crosses"]]
    speedups = [max((p["speedup"] for p in e["programs"]), default=1.0) for e in crossing]
    flats = [e["flat"]["measured_seconds"] for e in placements]
    bests = [best(e) for e in placements]
    return {
        "crossing_placements": len(crossing),
        "best_speedup_crossing": max(speedups, default=None),
        "mean_best_speedup_crossing": sum(speedups) / len(speedups) if speedups else None,
        "flat_spread": max(flats) / min(flats) if flats else None,
        "best_spread": max(bests) / min(bests) if bests else None,
    }
