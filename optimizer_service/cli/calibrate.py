"""``p2 calibrate``: fit the emulated cluster's link parameters from measurements."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import click

from deploy.emulated import load_cluster
from optimizer_service.catalog import load_topology
from optimizer_service.cli.measure_job import Run, measure
from optimizer_service.cli.params import ByteSize, write_json
from optimizer_service.files import replace_file
from optimizer_service.hardware.calibration import Probe, fit, probes
from optimizer_service.hardware.cost_model import CostModel
from optimizer_service.hardware.topology import Topology
from optimizer_service.settings import Settings
from optimizer_service.units import human_rate, human_seconds

CALIBRATION_FILE = "calibration.json"


@click.command()
@click.option("--cluster", "cluster_name", default="p2", show_default=True, help="Emulated cluster ('p2 cluster up').")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed runs per probe (the median is used).")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True,
              help="Untimed runs per probe before timing (at least one runs: it is checked).")
@click.option("--probe-bytes", type=ByteSize(), default=None,
              help="Size of the large probes (default: about 0.25 s at each link's current bandwidth); "
                   "the small ones are an eighth of it.")
@click.option("--no-shaping", is_flag=True, help="Run the ranks on the host's loopback (no namespaces).")
@click.option("--dry-run", is_flag=True, help="Measure and show the fit, but leave the topology file as it is.")
@click.option("--json", "json_out", metavar="OUT", help="Write probes, fits and the new links as JSON ('-' for stdout).")
@click.pass_obj
def calibrate(settings: Settings, cluster_name: str, repeat: int, warmup: int, probe_bytes: int | None, no_shaping: bool,
              dry_run: bool, json_out: str | None) -> None:
    """Measure each link class of an emulated cluster and write the fitted
    latency and bandwidth into its topology file, so that 'p2 synth' and
    'p2 bench reduce' predict this cluster.

    Each link (intra-node loopback, NIC, second NIC) is probed with small
    complete reductions confined to it (AllReduce, ReduceScatter+AllGather,
    Reduce+Broadcast; one group and all groups at once; a small and a large
    size) run by the real backend, and fitted through the simulator itself
    (see optimizer_service/hardware/calibration.py).

    \b
    Example:
      p2 cluster up --nodes 2 --per-node 4 --nic 200Mbit/s
      p2 calibrate
    """
    info = load_cluster(cluster_name, settings.cluster_dir)
    topology = load_topology(str(info.topology_path))
    if probe_bytes is not None and probe_bytes < 4 * 64:
        raise click.BadParameter("must be at least 256 bytes", param_hint="--probe-bytes")
    found, notes = probes(topology, probe_bytes)
    for note in notes:
        click.echo(f"calibrate: skipping {note}", err=True)
    runs = [Run(f"probe{i}", p.program, p.groups, p.nbytes, p.channel) for i, p in enumerate(found)]
    click.echo(f"calibrate: {len(runs)} probes on cluster {info.name!r} "
               f"({info.nodes} nodes x {info.per_node} ranks), {warmup}+{repeat} runs each", err=True)
    measured = measure(info, runs, warmup=warmup, repeat=repeat, no_shaping=no_shaping,
                       master_port=settings.master_port)
    pairs = [(probe, measured[run.id].median) for probe, run in zip(found, runs)]
    calibrated, fits = fit(topology, pairs)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    calibrated = replace(calibrated, description=f"{_base_description(topology.description)} "
                                                 f"(calibrated {stamp})".strip())
    record = {
        "cluster": info.name,
        "topology_file": str(info.topology_path),
        "written": not dry_run,
        "probes": [{"link": p.link, "channel": p.channel, "label": p.label, "program": str(p.program),
                    "bytes": p.nbytes, "measured_seconds": t,
                    "predicted_seconds": _predict(calibrated, p)} for p, t in pairs],
        "links": [{"name": f.link, "latency_seconds": f.latency, "bandwidth_bytes_per_second": f.bandwidth,
                   "before": {"latency_seconds": f.before.latency, "bandwidth_bytes_per_second": f.before.bandwidth},
                   "probes": f.probes, "fit_mape": f.mape} for f in fits],
        "skipped": notes,
        "topology": calibrated.to_dict(),
    }
    if not dry_run:
        replace_file(info.topology_path, calibrated.to_yaml())
        replace_file(info.state_dir / CALIBRATION_FILE, json.dumps(record, indent=1) + "\n")
    if json_out is not None:
        write_json(record, json_out)
    if json_out != "-":
        click.echo(_render(fits, info.topology_path, dry_run))


def _base_description(text: str) -> str:
    return text.split(" (calibrated ")[0]


def _predict(topology: Topology, probe: Probe) -> float:
    return CostModel(topology, channel=probe.channel).program_seconds(probe.program, probe.nbytes)


def _render(fits, path: Path, dry_run: bool) -> str:
    lines = [f"{'link':<10} {'latency (before -> after)':>26} {'bandwidth (before -> after)':>30} "
             f"{'probes':>7} {'fit error':>10}"]
    for f in fits:
        lines.append(f"{f.link:<10} {human_seconds(f.before.latency):>11} -> {human_seconds(f.latency):>11} "
                     f"{human_rate(f.before.bandwidth):>13} -> {human_rate(f.bandwidth):>13} "
                     f"{f.probes:>7} {f.mape:>9.1%}")
    lines.append(("dry run: topology file left as it was: " if dry_run else "wrote ") + str(path))
    lines.append("(fit error = mean |model - measured| / measured over the link's probes)")
    return "\n".join(lines)
