"""``p2 pipeline``: pipeline schedules (GPipe, 1F1B, eager-1F1B, eager-1F1B with
backward weight delaying; Zhuang et al., MLSys 2023, §4) simulated with
cross-mesh communication on a GPT-like or U-Transformer-like stage profile,
its transfers on a channel per directed edge or sharing each stage's NIC
(``--links``, §3's one full-duplex NIC per host)."""

from __future__ import annotations

from pathlib import Path

import click

from optimizer_service.cli.params import write_json
from optimizer_service.cli.pipeline_render import MIB, SimulatedSchedule, document, gantt, report
from optimizer_service.errors import InvalidInputError
from optimizer_service.resharding.pipeline_costs import PipelineCosts, gpt_like, u_transformer_like
from optimizer_service.resharding.pipeline_schedules import SCHEDULE_NAMES, build_schedule, choose_weight_delays
from optimizer_service.resharding.pipeline_sim import LINK_MODELS, simulate

PROFILES = ("gpt", "u-transformer")
#: Bounds that keep one run (eager-1F1B-wd simulates the pipeline ~4 times per stage) to seconds.
MAX_STAGES = 16
MAX_MICROBATCHES = 256


def build_costs(profile: str, stages: int, forward: float, backward: float, comm: float,
                backward_comm: float | None, skip: float | None, weight_share: float,
                activation_mib: float) -> PipelineCosts:
    """The profile the options describe."""
    activation = int(round(activation_mib * MIB))
    if profile == "gpt":
        if skip is not None:
            raise InvalidInputError("--skip-seconds applies to --profile u-transformer only (GPT has no skip edges)")
        return gpt_like(stages, forward, backward, comm, backward_comm, activation, weight_share)
    return u_transformer_like(stages, forward, backward, comm, skip, backward_comm, activation, weight_share)


def run_schedules(names: list[str], stages: int, microbatches: int, costs: PipelineCosts,
                  overlap: bool, links: str = "edge") -> list[SimulatedSchedule]:
    """Build and simulate every schedule of ``names`` (eager-1F1B-wd's delays chosen under ``links``)."""
    out = []
    for name in names:
        delays = choose_weight_delays(stages, microbatches, costs, overlap, links=links) \
            if name == "eager-1f1b-wd" else None
        schedule = build_schedule(name, stages, microbatches, costs, overlap, delays)
        out.append(SimulatedSchedule(schedule, simulate(schedule, costs, overlap, links), delays))
    return out


@click.command()
@click.option("--stages", type=click.IntRange(1, MAX_STAGES), default=4, show_default=True,
              help="Pipeline stages (device meshes).")
@click.option("--microbatches", type=click.IntRange(1, MAX_MICROBATCHES), default=8, show_default=True,
              help="Micro-batches per iteration.")
@click.option("--schedule", "schedule_name", type=click.Choice([*SCHEDULE_NAMES, "all"]), default="all",
              show_default=True, help="Which schedule to simulate; 'all' compares them.")
@click.option("--profile", type=click.Choice(PROFILES), default="gpt", show_default=True,
              help="gpt: edges between adjacent stages; u-transformer: also skip edges stage i -> S-1-i.")
@click.option("--forward-seconds", type=click.FloatRange(min=0), default=0.010, show_default=True,
              help="Forward time of one micro-batch on one stage.")
@click.option("--backward-seconds", type=click.FloatRange(min=0), default=0.020, show_default=True,
              help="Backward time (input + weight gradient) of one micro-batch on one stage.")
@click.option("--weight-share", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Share of the backward that is the weight gradient (W; the rest is I).")
@click.option("--comm-seconds", type=click.FloatRange(min=0), default=0.004, show_default=True,
              help="Seconds to move one micro-batch's activation across a stage boundary.")
@click.option("--backward-comm-seconds", type=click.FloatRange(min=0),
              help="Seconds to move its gradient back (default: --comm-seconds).")
@click.option("--skip-seconds", type=click.FloatRange(min=0),
              help="u-transformer: seconds of each skip edge's transfer (default: --comm-seconds).")
@click.option("--activation-mb", type=click.FloatRange(min=0), default=48.0, show_default=True,
              help="Activation one in-flight micro-batch holds on a stage, MiB (Table 1: 48).")
@click.option("--overlap/--no-overlap", default=True, show_default=True,
              help="--no-overlap: a send holds the sending stage (the paper's 'Broadcast' baseline).")
@click.option("--links", type=click.Choice(LINK_MODELS), default="edge", show_default=True,
              help="edge: each directed stage pair its own channel; host: a transfer holds its sender's egress "
                   "and its receiver's ingress (one full-duplex NIC per stage, one transfer at a time each).")
@click.option("--json", "json_out", metavar="OUT", help="Write results as JSON to OUT ('-' for stdout).")
@click.option("--gantt", "gantt_out", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT.png",
              help="Draw each schedule's timeline (stages and communication lanes) to OUT.png.")
def pipeline(stages: int, microbatches: int, schedule_name: str, profile: str, forward_seconds: float,
             backward_seconds: float, weight_share: float, comm_seconds: float,
             backward_comm_seconds: float | None, skip_seconds: float | None, activation_mb: float,
             overlap: bool, links: str, json_out: str | None, gantt_out: Path | None) -> None:
    """Simulate pipeline schedules with cross-mesh communication (eager-1F1B,
    Zhuang et al. MLSys'23 section 4): each schedule's stage x action grid, its
    iteration time, bubble share and peak activation memory per stage; with
    '--schedule all' a comparison against 1F1B."""
    for flag, out in (("--json", None if json_out in (None, "-") else Path(json_out)), ("--gantt", gantt_out)):
        if out is not None and not out.parent.exists():      # before any output: bad input writes nothing
            raise InvalidInputError(f"{flag} {out}: folder {out.parent} does not exist")
    costs = build_costs(profile, stages, forward_seconds, backward_seconds, comm_seconds, backward_comm_seconds,
                        skip_seconds, weight_share, activation_mb)
    names = list(SCHEDULE_NAMES) if schedule_name == "all" else [schedule_name]
    results = run_schedules(names, stages, microbatches, costs, overlap, links)
    if json_out != "-":
        click.echo(report(costs, results, microbatches, overlap, links))
    if json_out is not None:
        write_json(document(costs, results, microbatches, overlap, links), json_out)
    if gantt_out is not None:
        gantt(costs, results, gantt_out)
        if json_out != "-":
            click.echo(f"gantt chart -> {gantt_out}", err=True)
