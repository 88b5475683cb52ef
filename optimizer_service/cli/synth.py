"""``p2 synth``: placements × synthesized reduction programs, ranked by the simulator."""

from __future__ import annotations

import sys

import click

from optimizer_service.catalog import load_topology
from optimizer_service.cli.params import ByteSize, IntList, write_json
from optimizer_service.cli.synth_render import render_explanations, render_report
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.cost_model import Algorithm
from optimizer_service.p2.explain import explain_program
from optimizer_service.p2.placement import ParallelismMatrix
from optimizer_service.p2.planner import DEFAULT_BYTES, Planner
from optimizer_service.p2.program import Program
from optimizer_service.p2.synthesis import DEFAULT_MAX_SIZE
from optimizer_service.service.synth_json import explanations_to_dict, report_to_dict
from optimizer_service.settings import Settings
from optimizer_service.units import format_bytes


@click.command()
@click.option("--topology", "topology_name", required=True, metavar="NAME|FILE",
              help="A preset ('p2 topology list') or a topology YAML file.")
@click.option("--axes", required=True, type=IntList(), help="Parallelism axis sizes, e.g. 4,16 (product = devices).")
@click.option("--reduce", "reduce_axes", required=True, type=IntList(),
              help="Axes to reduce over, numbered from 0, e.g. 0 or 0,2.")
@click.option("--bytes", "nbytes", type=ByteSize(), default=DEFAULT_BYTES, show_default=format_bytes(DEFAULT_BYTES),
              help="Data per device to reduce, e.g. 64MiB.")
@click.option("--algo", type=click.Choice(["ring", "tree"]), default="ring", show_default=True,
              help="Collective algorithm the simulator assumes (NCCL_ALGO).")
@click.option("--max-size", type=int, default=DEFAULT_MAX_SIZE, show_default=True,
              help="Program size limit (InsideGroup counts 1, Parallel/Master 2).")
@click.option("--top", type=click.IntRange(min=1), default=1, show_default=True,
              help="Programs to list per placement.")
@click.option("--json", "json_out", metavar="OUT", help="Write results as JSON to OUT ('-' for stdout).")
@click.option("--explain", "explain", metavar="PROGRAM",
              help="Instead of searching, show PROGRAM's lowered steps and device states, e.g. "
                   "'node InsideGroup ReduceScatter; node Parallel(root) AllReduce; node InsideGroup AllGather'.")
@click.option("--matrix", metavar="MATRIX", help="With --explain: the placement, e.g. '[[2 2] [2 8]]' "
                                                 "(default: every placement).")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: when it is a terminal).")
@click.pass_obj
def synth(settings: Settings, topology_name: str, axes: tuple[int, ...], reduce_axes: tuple[int, ...], nbytes: int,
          algo: str, max_size: int, top: int, json_out: str | None, explain: str | None, matrix: str | None,
          progress: bool | None) -> None:
    """Synthesize parallelism placements and hierarchical reduction programs (P² §3)
    and rank them with the topology-aware simulator (P² §5).

    For every parallelism matrix: the synthesis hierarchy, how many valid
    programs, the predicted flat AllReduce time, and the best program with its
    speedup; then the best (placement, program) overall.

    \b
    Example:
      p2 synth --topology gcp-a100-4n --axes 4,16 --reduce 0 --top 3
    """
    topo = load_topology(topology_name)
    algorithm = Algorithm.parse(algo)
    if matrix is not None and explain is None:
        raise click.UsageError("--matrix is only used with --explain")
    if explain is not None:
        _explain(topo, axes, reduce_axes, explain, matrix, nbytes, algorithm, json_out)
        return
    planner = Planner(settings.limits())
    show = sys.stderr.isatty() if progress is None else progress
    bar = None

    def on_progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = click.progressbar(length=total, label="synthesizing placements", file=sys.stderr)
            bar.__enter__()
        bar.update(1)

    try:
        report = planner.synthesize(topo, axes, reduce_axes, nbytes, algorithm, max_size,
                                    progress=on_progress if show else None)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if json_out is not None:
        write_json(report_to_dict(report), json_out)
    if json_out != "-":
        click.echo(render_report(report, top))


def _explain(topo, axes, reduce_axes, text: str, matrix_text: str | None, nbytes: int, algorithm: Algorithm,
             json_out: str | None) -> None:
    program = Program.parse(text)
    matrix = ParallelismMatrix.parse(matrix_text) if matrix_text is not None else None
    explanations = explain_program(topo, axes, reduce_axes, program, nbytes, algorithm, matrix)
    if json_out is not None:
        args = {"topology": topo.name, "axes": list(axes), "reduce": sorted(reduce_axes), "bytes": nbytes,
                "algorithm": algorithm.value, "program": str(program)}
        write_json(explanations_to_dict(explanations, args), json_out)
    if json_out != "-":
        click.echo(render_explanations(explanations, str(program)))
    if not any(e.valid for e in explanations):
        reasons = "; ".join(sorted({e.error or "does not reach the AllReduce result" for e in explanations}))
        raise InvalidInputError(f"program {str(program)!r} is not a valid reduction here: {reasons}")
