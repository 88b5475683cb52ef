"""``p2 demo``: the whole loop on one machine (the README's main job).

The verb parses, runs :class:`~optimizer_service.cli.demo_run.DemoRun` and
reports (:mod:`optimizer_service.cli.demo_report`)."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import click

from optimizer_service.cli.cluster import Rate, fabric_option, name_option
from optimizer_service.cli.demo_report import (
    TURN_WARMUP,
    WARMUP,
    beside,
    committed_plans,
    first_plan,
    iterations_to_commit,
    model_seconds,
    offline_best,
    over_peer_beside,
    peer,
    phases,
    plot,
    speedup,
    table,
)
from optimizer_service.cli.demo_run import JOBS, POLICY, DemoConfig, DemoRun
from optimizer_service.cli.demo_searching import searched_steps, searches_line
from optimizer_service.cli.params import write_json
from optimizer_service.errors import InvalidInputError
from optimizer_service.settings import Settings


@click.command("demo")
@click.option("--nodes", type=click.IntRange(1, 8), default=2, show_default=True, help="Nodes of the cluster.")
@click.option("--per-node", type=click.IntRange(1, 16), default=4, show_default=True, help="Ranks per node.")
@click.option("--nic", "nic", type=Rate(), default="200Mbit/s", show_default=True, help="Each node's first NIC.")
@click.option("--nic2", "nic2", type=Rate(), default="200Mbit/s", show_default=True,
              help="Each node's second NIC (channel 1), the one slowed mid-run.")
@click.option("--throttle", type=click.FloatRange(1.0, 100.0), default=4.0, show_default=True,
              help="How many times slower the second NIC gets mid-run.")
@click.option("--steps", type=click.IntRange(20, 100_000), default=300, show_default=True,
              help="Training steps (iterations) of the job.")
@click.option("--job", type=click.Choice(sorted(JOBS)), default="dlrm", show_default=True,
              help="The job: the DLRM-like model (all-to-all + all-reduce), a plain DDP MLP (all-reduce) or "
                   "FSDP2 in bf16 mixed precision (all-gather, reduce-scatter).")
@fabric_option()
@click.option("--peer-steps", type=click.IntRange(0, 100_000), default=10, show_default=True,
              help=f"Steps of each of the peer's turns (plain gloo over every NIC, in turns with the job on the "
                   f"same cluster); its medians skip the first {TURN_WARMUP} of each turn, {WARMUP} of the first. "
                   f"0: no peer.")
@click.option("--peer-every", type=click.IntRange(1, 100_000), default=20, show_default=True,
              help="Steps of the job between two of the peer's turns.")
@click.option("--tables", type=click.IntRange(1), help="Embedding tables (train_dlrm.py's default: 16).")
@click.option("--rows", type=click.IntRange(1), help="Rows per table (default 20000).")
@click.option("--dim", type=click.IntRange(1), help="Embedding dimension (default 64).")
@click.option("--batch", type=click.IntRange(1), help="Samples per rank and step (default 128).")
@click.option("--search-budget", type=click.FloatRange(0.1, 600), default=3.0, show_default=True,
              metavar="SECONDS", help="How long the service's search may take before it is stopped (it stops "
              "by its evaluations, so the same traces give the same plan); also the offline search's time.")
@click.option("--loopback", is_flag=True, help="Run on loopback even as root (no NICs: no speed-up to show).")
@name_option("p2demo", "The demo cluster's name")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the store, logs, traces and search records go (default: a new temporary folder).")
@click.option("--json", "json_out", metavar="OUT", help="Write the results as JSON ('-' for stdout).")
@click.option("--plot", "plot_out", type=click.Path(dir_okay=False, path_type=Path), metavar="OUT.png",
              help="Plot iteration time over the run, with plan switches and the change.")
@click.pass_obj
def demo(settings: Settings, nodes: int, per_node: int, nic: float, nic2: float, throttle: float, steps: int, job: str,
         fabric: str, peer_steps: int, peer_every: int, tables: int | None, rows: int | None, dim: int | None,
         batch: int | None,
         search_budget: float, loopback: bool, name: str, work_dir: Path | None, json_out: str | None,
         plot_out: Path | None) -> None:
    """Show the loop: a DLRM-like job on an emulated cluster gets planned,
    committed and replanned by the optimizer service while it trains.

    \b
    As root: an emulated NODES x PER-NODE cluster with two NICs per node
    (network namespaces and tc; a lossless FABRIC unless told otherwise),
    the optimizer service (SQLite store) with replanning on, and the JOB
    (examples/train_dlrm.py by default) through p2enforcer. The service
    plans the job from its telemetry and traces and commits the plan with
    two-phase commit; mid-run the second NIC of every node is slowed
    THROTTLE times, and the service replans. Without root: the same on
    loopback, without NICs (no speed-up to show, no change).

    \b
    The peer: the same job under plain gloo over every NIC of the node
    (GLOO_SOCKET_IFNAME=nic0,nic1), what a user with two NICs gets without
    the service, runs in turns with the service's job on the same cluster:
    PEER_STEPS steps after every PEER_EVERY of the job's. Each plan is
    compared with the peer's turns beside it. Passthrough is the inner
    backend on one NIC.

    \b
    Ends with a table (passthrough, the peer, first plan, after the change
    without replanning, the peer after it, after replanning: measured and
    predicted iteration times, the lower bound and the ratio to it, how
    busy the host's cores were).
    --json fields: cluster{fabric, ...}, job, phases[{name, plan_version,
    measured_iteration_seconds, predicted_iteration_seconds,
    bound_iteration_seconds, ratio_to_bound, nic_drops_per_iteration, host_cores,
    peer_iteration_seconds, peer_turns, speedup_over_peer}],
    peer{before, after: {measured_iteration_seconds, steps, turns, turn_seconds,
    nic_drops_per_iteration, host_cores, bound_iteration_seconds, ratio_to_bound}},
    plans[], speedup, speedup_over_peer, replan{iterations_to_commit,
    speedup_over_peer, speedup_over_passthrough, ratio_to_offline_best},
    events[], dashboard.
    While it runs, the service's dashboard shows the job live (its address
    is printed at the start: 127.0.0.1:8080, or a free port when taken).
    """
    model = []
    for flag, value in (("--tables", tables), ("--rows", rows), ("--dim", dim), ("--batch", batch)):
        if value is not None:
            model += [flag, str(value)]
    if model and job != "dlrm":
        raise InvalidInputError(f"{model[0]} sizes the DLRM-like model; --job {job} has a fixed model (drop the flag)")
    if 0 < peer_steps <= WARMUP:
        raise InvalidInputError(f"--peer-steps {peer_steps} leaves no step after the peer's {WARMUP} warm-up steps "
                                f"(its first turn's); give more than {WARMUP}, or 0 for no peer")
    if tables is not None and tables % (nodes * per_node):
        raise InvalidInputError(f"--tables {tables} must be a multiple of the {nodes * per_node} ranks "
                                "(each rank owns whole tables)")
    work = work_dir or Path(tempfile.mkdtemp(prefix="p2-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    config = DemoConfig(nodes=nodes, per_node=per_node, nic=nic, nic2=nic2, throttle=throttle, steps=steps,
                        model=tuple(model), search_budget=search_budget, name=name, loopback=loopback, job=job,
                        fabric=fabric, peer_steps=peer_steps, peer_every=peer_every)
    started = time.time()
    run = DemoRun(config, work, lambda line: click.echo(line, err=True))
    result = run.run()
    rows = phases(result["rank0"], result["change_step"], result["plans"], result["events"], result["drops"],
                  result["cores"], result["turn_warmup"])
    beside(rows, result["peer"])
    by_name = {row["name"]: row for row in rows}
    peer_rows = peer(result["peer"], rows)
    over_passthrough = speedup(by_name["passthrough"], by_name["first-plan"])
    over_peer = over_peer_beside(by_name["first-plan"], peer_rows["before"])
    best = offline_best(work, run.topology_path, throttle, search_budget) if result["shaped"] else None
    replanned_model = model_seconds(result["events"], by_name["replanned"]["plan_version"])
    ratio = replanned_model / best if best and replanned_model else None
    report = {
        "cluster": {"name": name, "nodes": nodes, "per_node": per_node, "emulated": result["shaped"],
                    "fabric": run.info.fabric, "nic_bytes_per_second": nic, "nic2_bytes_per_second": nic2,
                    "throttle": throttle, "topology": str(run.info.topology_path.name)},
        "job": {"id": job, "script": f"examples/{JOBS[job].script}", "flags": list(JOBS[job].flags),
                "model_flags": model, "steps": steps,
                "model": result["rank0"].get("model"), "world_size": result["rank0"].get("world_size")},
        "phases": rows,
        "peer": peer_rows,
        "plans": committed_plans(result["rank0"], result["change_step"], result["plans"], result["events"],
                                 result["turn_warmup"], searched_steps(result["cores"])),
        "turn_warmup": result["turn_warmup"],
        "speedup": over_passthrough,
        "speedup_over_peer": over_peer,
        "replan": {"change_step": result["change_step"],
                   "iterations_to_commit": iterations_to_commit(result["events"], result["change_step"]),
                   "speedup_over_peer": over_peer_beside(by_name["replanned"], peer_rows["after"]),
                   "speedup_over_passthrough": speedup(by_name["passthrough"], by_name["replanned"]),
                   "ratio_to_offline_best": ratio, "offline_best_predicted_seconds": best,
                   "replanned_model_seconds": replanned_model},
        "first_plan": first_plan(result["events"]),
        "events": result["events"],
        "step_seconds": result["rank0"]["step_seconds"],
        "plan_versions": result["rank0"]["plan_versions"],
        "policy": list(POLICY),
        "work_dir": str(work),
        "dashboard": run.dashboard,
        "wall_seconds": time.time() - started,
    }
    click.echo("")
    click.echo(table(rows, peer_rows))
    beside_searches = searches_line(rows, peer_rows)
    if beside_searches:
        click.echo(beside_searches)
    if over_passthrough is not None:
        click.echo(f"speed-up of the service's first plan over passthrough (one NIC): {over_passthrough:.2f}x" +
                   (f"; over the peer (gloo over every NIC): {over_peer:.2f}x" if over_peer is not None else ""))
    else:
        click.echo("no speed-up measured: the service committed no plan the job ran long enough")
    if result["shaped"]:
        replan = report["replan"]
        if replan["iterations_to_commit"] is not None:
            click.echo(f"after the second NIC was slowed {throttle:g}x: a replanned plan was committed "
                       f"{replan['iterations_to_commit']} iterations later" +
                       (f", {replan['speedup_over_peer']:.2f}x over the peer on the changed cluster"
                        if replan["speedup_over_peer"] is not None else "") +
                       (f"; the model prices it at {ratio:.2f}x the best plan of an offline search told the new rate"
                        if ratio is not None and math.isfinite(ratio) else ""))
        else:
            click.echo(f"after the second NIC was slowed {throttle:g}x: no replanned plan was committed before the "
                       "job ended (more --steps give the service time)")
    else:
        click.echo("loopback run: no NICs, so no change and no replanning after one; run as root for those")
    click.echo(f"store, service log and traces: {work}")
    if plot_out is not None:
        where = f" (emulated NICs, {fabric} fabric)" if result["shaped"] else " (loopback)"
        plot(plot_out, result["rank0"], result["change_step"], result["events"],
             f"p2 demo: {JOBS[job].title} job on {nodes} x {per_node}{where}", peer_rows)
        click.echo(f"plot: {plot_out}")
    if json_out:
        write_json(report, json_out)
