"""``p2 topology``: inspect built-in and user topologies."""

from __future__ import annotations

import click

from optimizer_service.catalog import load_topology, preset_names
from optimizer_service.cli.params import write_json


@click.group()
def topology() -> None:
    """Inspect topologies: built-in presets or YAML files."""


@topology.command("show")
@click.argument("name_or_file")
@click.option("--json", "json_out", metavar="OUT", help="Also write the topology as JSON to OUT ('-' for stdout).")
@click.option("--yaml", "as_yaml", is_flag=True, help="Print the topology's YAML (its round-trip text form).")
def show(name_or_file: str, json_out: str | None, as_yaml: bool) -> None:
    """Print a topology: its levels, links and device count.

    NAME_OR_FILE is a preset (see 'p2 topology list') or a YAML file.
    """
    topo = load_topology(name_or_file)
    if json_out is not None:
        data = topo.to_dict()
        data["device_count"] = topo.device_count
        data["hierarchy"] = list(topo.hierarchy)
        write_json(data, json_out)
    if json_out == "-":
        return
    click.echo(topo.to_yaml() if as_yaml else topo.describe())


@topology.command("list")
def list_presets() -> None:
    """List the built-in topology presets."""
    for name in preset_names():
        topo = load_topology(name)
        click.echo(f"{name:<14} {topo.device_count:>5} devices  {topo.description}")
