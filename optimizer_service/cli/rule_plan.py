"""``p2 rule-plan``: a fixed-rule plan for a recorded job, from one rank's trace."""

from __future__ import annotations

from pathlib import Path

import click

from optimizer_service.cli.params import read_trace
from optimizer_service.errors import InvalidInputError
from optimizer_service.files import replace_file
from optimizer_service.syndicate.rule_plan import plan_from_trace


@click.command("rule-plan")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--segments", type=click.IntRange(min=1), default=2, show_default=True,
              help="Segments per all-reduce, all-gather and reduce-scatter.")
@click.option("--channels", type=click.IntRange(min=1), default=1, show_default=True,
              help="Channels the ops take turns on (op k on channel k mod CHANNELS).")
def rule_plan(trace: Path, plan: Path, segments: int, channels: int) -> None:
    """Write PLAN, the enforcer's plan for the last complete iteration of TRACE
    (a p2enforcer trace), made by fixed rules instead of a search: all-reduces
    segmented and ring-splined, gathers and reduce-scatters segmented,
    broadcasts split in two halves, all-to-alls splined in windows of N/2."""
    document = read_trace(trace)
    try:
        made = plan_from_trace(document, segments, channels)
    except KeyError as error:
        raise InvalidInputError(f"the trace {trace} is not a p2enforcer trace (no field {error})") from None
    except TypeError as error:
        raise InvalidInputError(f"the trace {trace} is not a p2enforcer trace ({error})") from None
    replace_file(plan, made.to_json())
    click.echo(f"{len(made.ops)} ops planned -> {plan}")
