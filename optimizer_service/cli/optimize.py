"""``p2 optimize``: Syndicate's joint optimizer against the baselines of §6.4,
on a built-in workload (Syndicate's, or a pipeline's with cross-mesh
resharding, :mod:`optimizer_service.cli.pipeline_workload`) or a recorded trace."""

from __future__ import annotations

from pathlib import Path

import click

from optimizer_service.catalog import load_topology
from optimizer_service.cli.optimize_render import bound_line, document, gantt, legend, table
from optimizer_service.cli.params import read_trace, write_json
from optimizer_service.cli.pipeline_workload import (
    DEFAULT_MICROBATCHES,
    DEFAULT_SCHEDULE,
    DEFAULT_TOPOLOGY_NAME,
    PIPELINE_WORKLOADS,
    build_pipeline_workload,
    default_topology,
    is_pipeline_workload,
)
from optimizer_service.errors import InvalidInputError
from optimizer_service.files import replace_file
from optimizer_service.hardware.topology import Topology
from optimizer_service.resharding.pipeline_schedules import SCHEDULE_NAMES
from optimizer_service.settings import Settings
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.workloads import build, workload_names

DEFAULT_TOPOLOGY = "hgx2-4n"
#: The most micro-batches a pipeline workload takes (its DAG grows with them).
MAX_MICROBATCHES = 64


def pipeline_topology(topology_name: str | None) -> Topology:
    """The pipeline workloads' topology: ``--topology`` if given, else the emulated cluster."""
    return load_topology(topology_name) if topology_name is not None else default_topology()


@click.command()
@click.option("--workload", metavar="NAME", help="A built-in workload (see --list).")
@click.option("--trace", "traces", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="An enforcer trace (P2_TRACE_FILE); repeat for several ranks.")
@click.option("--iteration", type=int, help="Which traced iteration to plan (default: the last complete one).")
@click.option("--topology", "topology_name", metavar="NAME|FILE",
              help=f"Preset name or YAML file; its channels are the paths a motif can take. Default: "
                   f"{DEFAULT_TOPOLOGY}; for the pipeline workloads the emulated {DEFAULT_TOPOLOGY_NAME} cluster.")
@click.option("--pipeline-schedule", type=click.Choice(SCHEDULE_NAMES), metavar="NAME",
              help=f"Pipeline workloads: the schedule ({', '.join(SCHEDULE_NAMES)}; default {DEFAULT_SCHEDULE}).")
@click.option("--microbatches", type=click.IntRange(1, MAX_MICROBATCHES),
              help=f"Pipeline workloads: micro-batches per iteration (default {DEFAULT_MICROBATCHES}).")
@click.option("--budget", type=click.FloatRange(min=0.01), default=10.0, show_default=True,
              help="Seconds of MCMC search for each searching system (S-Exec, Syndicate).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the search (same seed, same plan).")
@click.option("--json", "json_out", metavar="OUT", help="Write results as JSON to OUT ('-' for stdout).")
@click.option("--plan", "plan_out", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT",
              help="Write Syndicate's plan for the enforcer (P2_PLAN_FILE) to OUT.")
@click.option("--gantt", "gantt_out", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT.png",
              help="Draw every system's two iterations (compute and each channel) to OUT.png.")
@click.option("--list", "list_only", is_flag=True, help="Describe the built-in workloads and exit.")
@click.pass_obj
def optimize(settings: Settings, workload: str | None, traces: tuple[Path, ...], iteration: int | None,
             topology_name: str | None, pipeline_schedule: str | None, microbatches: int | None, budget: float,
             seed: int, json_out: str | None, plan_out: Path | None, gantt_out: Path | None,
             list_only: bool) -> None:
    """Jointly choose every comm-op's execution plan and the order of all motifs
    (Syndicate, NSDI'23), and compare with FIFO, BS+, HO, S-Exec and S-Sched.

    Each row gives the iteration time (two unrolled iterations' makespan over
    two: what the search minimises), the compute idle share, and the steady
    state (per iteration once a job runs, as the paper measures), with
    speedups over BS+, then Syndicate's prediction beside the lower bound on
    the iteration time (the compute critical path, the busiest compute stream,
    every NIC's bytes at the best split; ``--json``: ``bound_iteration_seconds``
    and ``bound``). The pipeline workloads (pipeline-gpt,
    pipeline-u-transformer) give each stage a compute stream of its own and
    plan every boundary's resharding with the resharding planner."""
    pipeline = is_pipeline_workload(workload)
    if not pipeline and (pipeline_schedule is not None or microbatches is not None):
        flag = "--pipeline-schedule" if pipeline_schedule is not None else "--microbatches"
        raise InvalidInputError(f"{flag} applies to the pipeline workloads ({', '.join(PIPELINE_WORKLOADS)}) only")
    topology = pipeline_topology(topology_name) if pipeline else load_topology(topology_name or DEFAULT_TOPOLOGY)
    if list_only:
        for name in workload_names():
            click.echo(f"{name:<22} {build(name, topology).description}")
        for name in PIPELINE_WORKLOADS:
            try:
                described = build_pipeline_workload(name, pipeline_topology(topology_name)).dag.description
            except InvalidInputError as error:       # a --topology too small for it: say why, list the rest
                described = f"(not on this topology: {error})"
            click.echo(f"{name:<22} {described}")
        return
    if (workload is None) == (not traces):
        raise InvalidInputError("give one of --workload NAME or --trace FILE (p2 optimize --list shows the workloads)")
    quiet = json_out == "-"

    def say(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    if pipeline:
        source = build_pipeline_workload(workload, topology, pipeline_schedule or DEFAULT_SCHEDULE,
                                         microbatches or DEFAULT_MICROBATCHES).dag
    elif workload is not None:
        source = build(workload, topology)
    else:
        source = [read_trace(path) for path in traces]
    job = plan_job(source, topology, budget, seed, iteration=iteration, name=traces[0].stem if traces else "trace",
                   native=not settings.pure_python, progress=say)
    problem, results, plan, measured = job.problem, list(job.results), job.plan, job.measured_iteration_seconds
    if not quiet:
        click.echo(table(problem, results))
        say(legend(problem))
        click.echo(bound_line(results, job.bound))
        if measured is not None:
            click.echo(f"measured iteration in the trace: {measured * 1e3:.3f} ms")
    if json_out is not None:
        data = document(problem, results, plan, job.bound, topology.name, seed, budget)
        if measured is not None:
            data["measured_iteration_seconds"] = measured
        write_json(data, json_out)
    if plan_out is not None:
        replace_file(plan_out, plan.to_json())
        say(f"plan ({len(plan.ops)} ops) -> {plan_out}")
    if gantt_out is not None:
        gantt(problem, results, gantt_out)
        say(f"gantt chart -> {gantt_out}")
