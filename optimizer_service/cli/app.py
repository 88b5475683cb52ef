"""The ``p2`` command group and its error handling.

Bad input of any kind — a usage error, an invalid topology, an oversized
search, a malformed ``P2_*`` variable — ends with exit code 2 and one line on
stderr (``p2 synth: error: ...``); nothing is written. A job that started and
failed (a rank of a measurement exited with an error) ends with exit code 1
and one line, below the ranks' own output. Anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import logging
import sys

import click
from pydantic import ValidationError

from deploy.errors import DeployError
from optimizer_service.cli.bench import bench
from optimizer_service.cli.calibrate import calibrate
from optimizer_service.cli.cluster import cluster
from optimizer_service.cli.demo import demo
from optimizer_service.cli.optimize import optimize
from optimizer_service.cli.pipeline import pipeline
from optimizer_service.cli.reshard import reshard
from optimizer_service.cli.rule_plan import rule_plan
from optimizer_service.cli.service_verbs import jobs, plan, serve
from optimizer_service.cli.synth import synth
from optimizer_service.cli.topology import topology
from optimizer_service.errors import InvalidInputError, JobFailedError
from optimizer_service.settings import Settings

USAGE_EXIT = 2
JOB_FAILED_EXIT = 1


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="p2-collectives", prog_name="p2")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """p2: placement and reduction-program synthesis for collective communication (P², MLSys 2022)."""
    settings = Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    ctx.obj = settings


cli.add_command(bench)
cli.add_command(calibrate)
cli.add_command(cluster)
cli.add_command(demo)
cli.add_command(optimize)
cli.add_command(pipeline)
cli.add_command(reshard)
cli.add_command(rule_plan)
cli.add_command(jobs)
cli.add_command(plan)
cli.add_command(serve)
cli.add_command(synth)
cli.add_command(topology)


def _fail(ctx_name: str, message: str) -> int:
    first_line = " ".join(message.strip().split())
    click.echo(f"{ctx_name}: error: {first_line}", err=True)
    return USAGE_EXIT


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``p2`` console script; returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    command = "p2" + "".join(f" {a}" for a in args[:2] if not a.startswith("-"))
    try:
        result = cli.main(args=args, prog_name="p2", standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return _fail(exc.ctx.command_path if exc.ctx else command, exc.format_message() + hint)
    except click.ClickException as exc:
        return _fail(command, exc.format_message())
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except (InvalidInputError, DeployError) as exc:
        return _fail(command, str(exc))
    except JobFailedError as exc:
        _fail(command, str(exc))
        return JOB_FAILED_EXIT
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]).upper() if error.get("loc") else "setting"
        return _fail(command, f"environment variable P2_{field}: {error['msg']}")
    return result if isinstance(result, int) else 0


def run() -> None:
    sys.exit(main())
