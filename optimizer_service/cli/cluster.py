"""``p2 cluster``: the emulated cluster (network namespaces + ``tbf``), see
:mod:`deploy.emulated`. The verbs only parse, call the façade and print."""

from __future__ import annotations

from typing import Any

import click

from deploy.emulated import (
    DEFAULT_FABRIC,
    DEFAULT_NAME,
    FABRICS,
    ClusterInfo,
    cluster_statuses,
    create_cluster,
    destroy_cluster,
    load_cluster,
    run_ranks,
)
from deploy.emulated.names import check_name
from deploy.errors import DeployError
from optimizer_service.cli.params import write_json
from optimizer_service.errors import InvalidInputError
from optimizer_service.settings import Settings
from optimizer_service.units import format_rate, parse_rate


class Rate(click.ParamType):
    """``200Mbit/s``, ``1Gbit/s``, ``25MB/s`` → bytes/s."""

    name = "RATE"

    def convert(self, value: Any, param, ctx) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_rate(str(value))
        except InvalidInputError as exc:
            self.fail(str(exc), param, ctx)


def rate_text(rate: float) -> str:
    """``200 Mbit/s (25MB/s)``: what the user typed, and the model's unit."""
    bits = rate * 8
    shown = f"{bits / 1e9:.4g} Gbit/s" if bits >= 1e9 else f"{bits / 1e6:.4g} Mbit/s"
    return f"{shown} ({format_rate(rate)})"


def _name(value: str) -> str:
    try:
        return check_name(value)
    except DeployError as exc:
        raise click.BadParameter(str(exc)) from None


def name_option(default: str = DEFAULT_NAME, what: str = "Cluster name"):
    """``--name``, checked as a cluster name (also ``p2 demo``'s)."""
    return click.option("--name", default=default, show_default=True, callback=lambda c, p, v: _name(v),
                        help=f"{what} (a-z, 0-9, '-'; names its namespaces p2-NAME-*).")


_NAME_OPTION = name_option()


def fabric_option(default: str = DEFAULT_FABRIC):
    """``--fabric lossless|lossy``, checked by click (also for ``p2 demo``)."""
    return click.option("--fabric", type=click.Choice(FABRICS), default=default, show_default=True,
                        help="How the emulated NICs queue: lossless (queues deep enough that nothing is dropped, "
                             "the model of InfiniBand and RoCE with PFC) or lossy (shallow switch-like queues: "
                             "an incast drops packets and TCP waits out retransmission timeouts).")


@click.group()
def cluster() -> None:
    """An emulated cluster on this machine: one network namespace per node, a
    tbf-shaped veth per node as its NIC (needs root; --no-shaping runs
    unshaped on the host's loopback), on a lossless or a lossy fabric."""


@cluster.command("up")
@click.option("--nodes", type=int, required=True, help="Number of nodes (namespaces), 1 to 254.")
@click.option("--per-node", type=int, required=True, help="Ranks (devices) per node.")
@click.option("--nic", "nic_rate", type=Rate(), required=True, help="NIC rate per direction, e.g. 200Mbit/s.")
@click.option("--nic2", "nic2_rate", type=Rate(), help="A second NIC per node (channel 1), e.g. 100Mbit/s.")
@_NAME_OPTION
@click.option("--loopback", "loopback_rate", type=Rate(),
              help="Loopback rate for the model (default: measured inside node 0).")
@fabric_option()
@click.option("--no-shaping", is_flag=True, help="No namespaces: record a loopback-only cluster (no root needed).")
@click.option("--json", "json_out", metavar="OUT", help="Also write the cluster as JSON to OUT ('-' for stdout).")
@click.pass_obj
def up(settings: Settings, nodes: int, per_node: int, nic_rate: float, nic2_rate: float | None, name: str, loopback_rate: float | None,
       fabric: str, no_shaping: bool, json_out: str | None) -> None:
    """Create the cluster: namespaces, bridges, shaped veths, and its state
    folder with cluster.json and topology.yaml (the P² model).

    On the lossless fabric every NIC's queue holds what all TCP flows through
    it can have in flight (each node's tcp_rmem/tcp_wmem bound that), so no
    packet is dropped, also after a NIC is slowed; the lossy fabric keeps
    shallow queues (deploy/emulated/README.md).

    \b
    Example:
      p2 cluster up --nodes 2 --per-node 4 --nic 200Mbit/s --name demo
      p2 cluster up --nodes 2 --per-node 4 --nic 200Mbit/s --fabric lossy --name shallow
    """
    info = create_cluster(name, nodes, per_node, nic_rate, nic2_rate, loopback_rate, shaped=not no_shaping,
                          root=settings.cluster_dir, fabric=fabric)
    if json_out is not None:
        write_json(info.to_dict(), json_out)
    if json_out != "-":
        click.echo(describe(info))


def describe(info: ClusterInfo) -> str:
    """The human summary ``up`` prints."""
    lines = [f"cluster {info.name}: {info.nodes} node(s) x {info.per_node} rank(s) = {info.world_size} ranks"
             + ("" if info.shaped else ", unshaped (every rank on the host's loopback)")]
    for channel, rate in enumerate(r for r in (info.nic_rate, info.nic2_rate) if r is not None):
        shape = ""
        if info.shaped and channel < len(info.tbf):
            tbf = info.tbf[channel]
            shape = f", tbf burst {tbf.burst} B, limit {tbf.limit} B each way"
        lines.append(f"  nic{channel}: {rate_text(rate)} per direction{shape}")
    if info.shaped:
        lines.append(f"  fabric: {info.fabric_rule.describe()}")
    how = ("measured in node 0" if info.shaped else "measured on the host") if info.loopback_measured else "given"
    lines.append(f"  loopback: {format_rate(info.loopback_rate)} ({how})")
    for node in range(info.nodes):
        first, last = node * info.per_node, (node + 1) * info.per_node - 1
        ranks = f"rank {first}" if first == last else f"ranks {first}-{last}"
        if info.shaped:
            nics = "  ".join(f"{nic.ifname} {nic.address}/24"
                             for nic in (info.nic(node, c) for c in range(info.channels)))
            lines.append(f"  node {node}: namespace {info.node_namespaces[node]}  {nics}  {ranks}")
        else:
            lines.append(f"  node {node}: host  {ranks}")
    if info.shaped:
        lines.append(f"  bridges: namespace {info.bridge_namespace}")
    lines.append(f"  topology: {info.topology_path}")
    flag = "" if info.name == DEFAULT_NAME else f" --name {info.name}"
    lines.append(f"  run:  p2 cluster run{flag} -- CMD ...    remove:  p2 cluster down{flag}")
    return "\n".join(lines)


@cluster.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_NAME_OPTION
@click.option("--no-shaping", is_flag=True, help="Run every rank on the host (127.0.0.1, lo), unshaped.")
@click.option("--timeout", type=float, help="Stop every rank after this many seconds (exit code 124).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def run(settings: Settings, name: str, no_shaping: bool, timeout: float | None, command: tuple[str, ...]) -> int:
    """Run COMMAND as every rank: rank r on node r // per-node, with RANK,
    WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
    GLOO_SOCKET_IFNAME, P2_NODE, P2_CHANNEL_IFNAMES, P2_CHANNEL_ADDRS set.
    Output lines are prefixed [r<rank>]; the first rank to fail stops the
    others and gives the exit code.

    \b
    Example:
      p2 cluster run --name demo -- python -c 'import os; print(os.environ["RANK"])'
    """
    if not command:
        raise click.UsageError("no command to run; give it after --, e.g. p2 cluster run -- python train.py")
    info = load_cluster(name, settings.cluster_dir)
    return run_ranks(info, list(command), no_shaping=no_shaping, timeout=timeout, master_port=settings.master_port)


@cluster.command("down")
@click.option("--name", help=f"Cluster to remove (default: {DEFAULT_NAME}).")
@click.option("--all", "remove_all", is_flag=True, help="Remove every cluster found (state folders and namespaces).")
@click.pass_obj
def down(settings: Settings, name: str | None, remove_all: bool) -> None:
    """Remove a cluster: kill its processes, delete its namespaces (and with
    them its veths and bridges) and its state folder. Also cleans up after a
    crash; removing a cluster that is gone is not an error."""
    if remove_all and name is not None:
        raise click.UsageError("give --name or --all, not both")
    targets = [status.name for status in cluster_statuses(root=settings.cluster_dir)] if remove_all else [_name(name or DEFAULT_NAME)]
    if remove_all and not targets:
        click.echo("no clusters to remove")
    for target in targets:
        removed = destroy_cluster(target, settings.cluster_dir)
        if removed:
            click.echo(f"cluster {target}:")
            for line in removed:
                click.echo(f"  {line}")
        else:
            click.echo(f"cluster {target}: nothing to remove")


@cluster.command("status")
@click.option("--name", help="Only this cluster.")
@click.option("--json", "json_out", metavar="OUT", help="Also write the clusters as JSON to OUT ('-' for stdout).")
@click.pass_obj
def status(settings: Settings, name: str | None, json_out: str | None) -> None:
    """List clusters (from state folders and from namespaces that exist) with
    their fabric, and flag anything partial or orphaned."""
    statuses = cluster_statuses(None if name is None else _name(name), settings.cluster_dir)
    if json_out is not None:
        write_json({"clusters": [s.to_dict() for s in statuses]}, json_out)
    if json_out == "-":
        return
    if not statuses:
        click.echo(f"no cluster named {name}" if name else "no clusters")
        return
    click.echo(f"{'NAME':<16} {'STATE':<9} {'FABRIC':<8} {'NODES':>5} {'RANKS':>5}  {'NIC':<22} {'NIC2':<22} "
               f"TOPOLOGY")
    for entry in statuses:
        info = entry.info
        if info is None:
            click.echo(f"{entry.name:<16} {entry.condition:<9} {'-':<8} {'-':>5} {'-':>5}  {'-':<22} {'-':<22} -")
        else:
            nic2 = "-" if info.nic2_rate is None else rate_text(info.nic2_rate)
            click.echo(f"{entry.name:<16} {entry.condition:<9} {info.fabric:<8} {info.nodes:>5} "
                       f"{info.world_size:>5}  {rate_text(info.nic_rate):<22} {nic2:<22} {info.topology_path}")
        for problem in entry.problems:
            click.echo(f"  ! {problem}")
