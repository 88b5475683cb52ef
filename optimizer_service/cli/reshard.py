"""``p2 reshard``: plan a cross-mesh resharding (Zhuang et al., MLSys 2023,
§2.2 and §3) and compare the load-balance algorithms against the NIC lower
bound."""

from __future__ import annotations

import time
from pathlib import Path

import click

from deploy.emulated import load_cluster
from deploy.emulated.model import cluster_topology
from optimizer_service.catalog import load_topology
from optimizer_service.cli.measure_job import run_measurement
from optimizer_service.cli.params import IntList, write_json
from optimizer_service.cli.reshard_render import (
    algorithm_table,
    document,
    gantt,
    header,
    measured_table,
    unit_task_table,
)
from optimizer_service.errors import InvalidInputError
from optimizer_service.files import replace_file
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.resharding import Strategy
from optimizer_service.resharding.mesh import Mesh, MeshOrShape
from optimizer_service.resharding.planner import ALGORITHMS, plan_request
from optimizer_service.resharding.request import build_request
from optimizer_service.resharding.spec import parse_endpoint
from optimizer_service.settings import Settings

#: The default topology's links: the emulated cluster's shaped NIC and its loopback.
EMULATED_NIC_RATE = 200e6 / 8
EMULATED_LOOPBACK_RATE = 1e9


def default_topology(src: MeshOrShape, dst: MeshOrShape) -> Topology:
    """The emulated cluster sized to fit both meshes: a host per mesh row, as
    many devices per host as the widest row (200 Mbit/s NIC, 1 GB/s loopback).
    Explicit meshes keep their ranks: hosts of ``max row width`` devices, as
    many as the highest rank needs."""
    rows = [m.rows if isinstance(m, Mesh) else None for m in (src, dst)]
    widths = [len(r[0]) if r else m[-1] for r, m in zip(rows, (src, dst))]
    per_node = max(widths)
    nodes = sum(len(r) if r else (m[0] if len(m) == 2 else -(-m[0] // per_node)) for r, m in zip(rows, (src, dst)))
    explicit = [rank for m in (src, dst) if isinstance(m, Mesh) for rank in m.ranks]
    if explicit:
        nodes = max(nodes, max(explicit) // per_node + 1)
    return emulated_topology(nodes, per_node)


def emulated_topology(nodes: int, per_node: int) -> Topology:
    """The emulated cluster ``emulated-NODESxPER_NODE`` (200 Mbit/s NIC, 1 GB/s loopback)."""
    name = f"emulated-{nodes}x{per_node}"
    return Topology.from_yaml(cluster_topology(name, nodes, per_node, EMULATED_NIC_RATE, None,
                                               EMULATED_LOOPBACK_RATE), source=name)


@click.command()
@click.option("--shape", type=IntList(), required=True, help="The global tensor's shape, e.g. 1024,1024,512.")
@click.option("--src", "src_text", required=True, metavar="SPEC@MESH",
              help="Source spec and mesh: S^0RR@2x4 (a shape, placed a row per host) or S^0R@[[0,1],[2,3]].")
@click.option("--dst", "dst_text", required=True, metavar="SPEC@MESH", help="Destination spec and mesh, as --src.")
@click.option("--topology", "topology_name", metavar="NAME|FILE",
              help="Preset name or YAML file. Default: the emulated cluster sized to fit both meshes (a host per "
                   "mesh row, the widest row's devices per host, 200 Mbit/s NIC, 1 GB/s loopback).")
@click.option("--algo", type=click.Choice([*ALGORITHMS, "all"]), default="all", show_default=True,
              help="Load-balance algorithm (ensemble is the paper's AlpaComm).")
@click.option("--strategy", type=click.Choice([s.value for s in Strategy]), default=Strategy.BROADCAST.value,
              show_default=True, help="How one unit task moves its slice (§3.1).")
@click.option("--dtype-bytes", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Bytes per tensor element.")
@click.option("--budget", type=click.FloatRange(min=0.01), default=1.0, show_default=True,
              help="Seconds each searching algorithm (dfs, greedy, ensemble) may run.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the randomized greedy search.")
@click.option("--json", "json_out", metavar="OUT", help="Write the unit tasks and plans as JSON to OUT ('-': stdout).")
@click.option("--gantt", "gantt_out", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT.png",
              help="Draw host lanes over time, one panel per algorithm.")
@click.option("--program", "program_out", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT",
              help="Write the chosen algorithm's ReshardProgram (what the enforcer runs; with --algo all, "
                   "the ensemble's).")
@click.option("--cluster", "cluster_name", metavar="NAME",
              help="Plan for this emulated cluster ('p2 cluster up'): its topology, unless --topology is given.")
@click.option("--measure", is_flag=True,
              help="Run every plan's program on --cluster through the enforcer and add measured_seconds.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="With --measure: timed runs per plan (the median is reported; one checked warm-up first).")
@click.option("--no-shaping", is_flag=True, help="With --measure: run the ranks on the host's loopback.")
@click.pass_obj
def reshard(settings: Settings, shape: tuple[int, ...], src_text: str, dst_text: str, topology_name: str | None,
            algo: str, strategy: str, dtype_bytes: int, budget: float, seed: int, json_out: str | None,
            gantt_out: Path | None, program_out: Path | None, cluster_name: str | None, measure: bool,
            repeat: int, no_shaping: bool) -> None:
    """Plan moving a sharded tensor from one device mesh to another:
    decompose it into unit tasks (one per unique slice), price each with the
    topology's cost model, choose every task's sender and a global order, and
    compare with the NIC lower bound (the paper's naive, load balance only,
    DFS, randomized greedy and their ensemble, AlpaComm)."""
    src_spec, src_mesh = parse_endpoint(src_text)
    dst_spec, dst_mesh = parse_endpoint(dst_text)
    if measure and cluster_name is None:
        raise click.UsageError("--measure needs --cluster NAME (an emulated cluster made by 'p2 cluster up')")
    if dtype_bytes not in DTYPE_BYTES and measure:
        raise click.UsageError(f"--measure runs {'/'.join(map(str, DTYPE_BYTES))}-byte elements; "
                               f"--dtype-bytes {dtype_bytes} has no torch dtype here")
    info = load_cluster(cluster_name, settings.cluster_dir) if cluster_name is not None else None
    if topology_name is not None:
        topology, note = load_topology(topology_name), ""
    elif info is not None:
        topology, note = load_topology(str(info.topology_path)), f" (cluster {info.name})"
    else:
        topology, note = default_topology(src_mesh, dst_mesh), " (default: the emulated cluster fitting both meshes)"
    request = build_request(shape, src_spec, src_mesh, dst_spec, dst_mesh, topology, element_bytes=dtype_bytes,
                            strategy=strategy)
    algorithms = ALGORITHMS if algo == "all" else (algo,)
    plans = plan_request(request, topology, algorithms, budget_seconds=budget, seed=seed, clock=time.perf_counter)
    chosen = plans[-1]                      # ensemble with --algo all (ALGORITHMS ends with it)

    measured = _measure(info, plans, repeat, no_shaping, settings) if measure else None

    quiet = json_out == "-"
    if not quiet:
        click.echo(header(chosen, note))
        click.echo(unit_task_table(chosen.unit_tasks))
        click.echo(algorithm_table(plans))
        if measured is not None:
            click.echo(measured_table(plans, measured))
    if json_out is not None:
        write_json(document(plans, topology_yaml=topology.to_yaml(), seed=seed, budget=budget, measured=measured),
                   json_out)
    if program_out is not None:
        replace_file(program_out, str(chosen.program) + "\n")
        if not quiet:
            click.echo(f"program ({chosen.algorithm}, {len(chosen.program.tasks)} tasks) -> {program_out}", err=True)
    if gantt_out is not None:
        gantt(plans, gantt_out)
        if not quiet:
            click.echo(f"gantt chart -> {gantt_out}", err=True)


#: The element sizes ``enforcer.measure.reshard`` has a dtype for.
DTYPE_BYTES = (1, 2, 4, 8)


def _measure(info, plans, repeat: int, no_shaping: bool, settings: Settings) -> dict[str, float]:
    """Each plan's program on every rank of the cluster (checked bit for bit,
    then timed): algorithm → median seconds of the slowest rank."""
    needed = max(plans[0].program.ranks) + 1
    if needed > info.world_size:
        raise InvalidInputError(f"the meshes need {needed} ranks but cluster {info.name!r} has {info.world_size}; "
                                "make a larger one with 'p2 cluster up' or give smaller meshes")
    spec = {"warmup": 1, "repeat": repeat, "backend": "p2enforcer",
            "runs": [{"id": plan.algorithm, "program": str(plan.program)} for plan in plans]}
    click.echo(f"p2 reshard: measuring {len(plans)} plan(s) on cluster {info.name} ({info.world_size} ranks)",
               err=True)
    results = run_measurement(info, "enforcer.measure.reshard", spec, no_shaping=no_shaping,
                              master_port=settings.master_port)
    return {run_id: result.median for run_id, result in results.items()}
