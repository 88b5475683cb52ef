"""``p2 optimize``: Syndicate's joint optimizer against the baselines of §6.4."""

from __future__ import annotations

from pathlib import Path

import click

from optimizer_service.catalog import load_topology
from optimizer_service.cli.optimize_render import document, gantt, legend, table
from optimizer_service.cli.params import read_trace, replace_file, write_json
from optimizer_service.errors import InvalidInputError
from optimizer_service.settings import Settings
from optimizer_service.syndicate.facade import plan_job
from optimizer_service.syndicate.workloads import build, workload_names

DEFAULT_TOPOLOGY = "hgx2-4n"


@click.command()
@click.option("--workload", metavar="NAME", help="A built-in workload (see --list).")
@click.option("--trace", "traces", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="FILE", help="An enforcer trace (P2_TRACE_FILE); repeat for several ranks.")
@click.option("--iteration", type=int, help="Which traced iteration to plan (default: the last complete one).")
@click.option("--topology", "topology_name", default=DEFAULT_TOPOLOGY, show_default=True,
              help="Preset name or YAML file; its channels are the paths a motif can take.")
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
             topology_name: str, budget: float, seed: int, json_out: str | None, plan_out: Path | None,
             gantt_out: Path | None, list_only: bool) -> None:
    """Jointly choose every comm-op's execution plan and the order of all motifs
    (Syndicate, NSDI'23), and compare with FIFO, BS+, HO, S-Exec and S-Sched.

    Each row gives the iteration time (two unrolled iterations' makespan over
    two: what the search minimises), the compute idle share, and the steady
    state (per iteration once a job runs, as the paper measures), with
    speedups over BS+."""
    topology = load_topology(topology_name)
    if list_only:
        for name in workload_names():
            click.echo(f"{name:<18} {build(name, topology).description}")
        return
    if (workload is None) == (not traces):
        raise InvalidInputError("give one of --workload NAME or --trace FILE (p2 optimize --list shows the workloads)")
    quiet = json_out == "-"

    def say(text: str) -> None:
        if not quiet:
            click.echo(text, err=True)

    if workload is not None:
        source = build(workload, topology)
    else:
        source = [read_trace(path) for path in traces]
    job = plan_job(source, topology, budget, seed, iteration=iteration, name=traces[0].stem if traces else "trace",
                   native=not settings.pure_python, progress=say)
    problem, results, plan, measured = job.problem, list(job.results), job.plan, job.measured_iteration_seconds
    if not quiet:
        click.echo(table(problem, results))
        say(legend(problem))
        if measured is not None:
            click.echo(f"measured iteration in the trace: {measured * 1e3:.3f} ms")
    if json_out is not None:
        data = document(problem, results, plan, topology.name, seed, budget)
        if measured is not None:
            data["measured_iteration_seconds"] = measured
        write_json(data, json_out)
    if plan_out is not None:
        replace_file(plan_out, plan.to_json())
        say(f"plan ({len(plan.ops)} ops) -> {plan_out}")
    if gantt_out is not None:
        gantt(problem, results, gantt_out)
        say(f"gantt chart -> {gantt_out}")
