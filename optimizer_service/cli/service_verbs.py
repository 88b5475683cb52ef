"""``p2 serve``, ``p2 jobs list|show|trace|events|delete``, ``p2 plan submit|list|show``."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path

import click
import grpc

from optimizer_service.cli.params import write_json
from optimizer_service.cli.replan_options import policy_config, policy_help, topology_text
from optimizer_service.cli.service_client import Client, connect, service_options
from optimizer_service.cli.service_render import (
    decisions_text,
    job_dict,
    job_text,
    jobs_table,
    latest_search,
    plan_dict,
    plan_text,
    plans_table,
)
from optimizer_service.control.coordinator import Timing
from optimizer_service.errors import InvalidInputError, JobFailedError
from optimizer_service.plan import Plan
from optimizer_service.plan.proto_codec import plan_to_proto
from optimizer_service.service.http_server import HttpLimits
from optimizer_service.service.leadership import LeaseTiming
from optimizer_service.service.log_limits import limit_handler, limit_logger
from optimizer_service.service.replanning import ReplanConfig
from optimizer_service.service.requests import DEFAULT_DECISIONS, MAX_DECISIONS, MAX_PAGE
from optimizer_service.service.server import ServiceConfig
from optimizer_service.service.server import serve as run_service
from optimizer_service.service.store.base import StoreError
from optimizer_service.service.store.url import default_store_path
from optimizer_service.settings import DEFAULT_HTTP, Settings
from optimizer_service.wire.leader import parse_addresses
from p2.v1 import optimizer_pb2 as api


# ------------------------------------------------------------------ serve
@click.command("serve")
@click.option("--listen", default="127.0.0.1:50051", show_default=True, metavar="HOST:PORT",
              help="Address to listen on (0.0.0.0:50051 for every interface; port 0 picks a free one).")
@click.option("--store", "store_url", metavar="URL", help="sqlite:///PATH or redis://[:password@]host:port/db "
              "(default: P2_STORE, else SQLite in the state folder).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Require this bearer token on every call (default: P2_TOKEN_FILE, else P2_TOKEN; none: no token); "
              "re-read when it changes, the previous token accepted for P2_TOKEN_GRACE_SECONDS (300).")
@click.option("--tls-cert", type=click.Path(dir_okay=False), help="Serve TLS with this certificate (PEM).")
@click.option("--tls-key", type=click.Path(dir_okay=False), help="Its private key (PEM).")
@click.option("--tls-ca", type=click.Path(dir_okay=False), help="Require client certificates signed by this CA "
              "(mutual TLS).")
@click.option("--advertise", metavar="HOST:PORT", help="The address clients reach this service at, which "
              "standbys name when it leads (default: P2_ADVERTISE, else the --listen host, or this machine's name "
              "on 0.0.0.0, and the bound port).")
@click.option("--port-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the bound port here once the service leads (for scripts with --listen HOST:0).")
@click.option("--http", "http", metavar="HOST:PORT|off",
              help="Serve the dashboard, its JSON API and /metrics here (default: P2_HTTP, else 127.0.0.1:8080; "
              "port 0 picks a free one; 'off' for none).")
@click.option("--http-port-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the dashboard's bound port here once it answers.")
@click.option("--http-fd", type=click.IntRange(min=0), hidden=True,
              help="Serve the dashboard on this already bound, inherited socket (p2 demo hands one over).")
@click.option("--replan/--no-replan", default=True, show_default=True,
              help="Plan live jobs from their telemetry and traces, commit and replan (the replanning loop).")
@click.option("--topology", "topology", metavar="NAME|FILE",
              help="Topology for jobs whose ranks name none with P2_TOPOLOGY (a preset or a YAML file).")
@click.option("--search-budget", type=click.FloatRange(min=0.1, max=3600), default=5.0, show_default=True,
              metavar="SECONDS", help="How long a live job's search may take before it is stopped (plus a "
              "minute's grace); the search itself stops by its evaluations, so the same traces give the same plan.")
@click.option("--record-searches", "record_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write each live search's inputs (the ranks' trace windows, topology, seed, prior fit) and "
              "outcome here as JOB-vVERSION.json, to be searched again off the job with benchmarks/replay.py "
              "(default: P2_SEARCH_RECORDS, else none).")
@click.option("--policy", "policy_items", multiple=True, metavar="KEY=VALUE",
              help="Replanning policy setting, e.g. --policy first_plan_after=30 --policy min_gain=0.1 "
              "(names and defaults: 'p2 serve --policy help').")
@click.pass_obj
def serve(settings: Settings, listen: str, store_url: str | None, token_file: Path | None, tls_cert: str | None,
          tls_key: str | None, tls_ca: str | None, advertise: str | None, port_file: Path | None, http: str | None,
          http_port_file: Path | None, http_fd: int | None, replan: bool, topology: str | None, search_budget: float,
          record_dir: Path | None, policy_items: tuple[str, ...]) -> None:
    """Run the optimizer service: jobs register, plans are committed to their
    ranks with two-phase commit, and every decision is stored. Logs one line
    per job and plan event; stops cleanly on SIGTERM or Ctrl-C.

    \b
    The dashboard (jobs, plans, topology, the P² explorer; its API at
    /docs) and Prometheus' /metrics are served on --http by the same process.

    \b
    Several services on one Redis store elect a leader with a lease in the
    store; the others wait as standbys (their health check NOT_SERVING, every
    other call refused with UNAVAILABLE naming the leader; their dashboard
    answers /metrics and /healthz, the rest 503 naming the leader) and one
    takes over when the leader stops (P2_LEASE_SECONDS, 15 s). On SQLite one
    service per file: a second is refused.

    \b
    Example:
      p2 serve --listen 0.0.0.0:50051 --store redis://localhost:6379/0 --token-file token
    """
    if "help" in policy_items:
        click.echo(policy_help())
        return
    http_address = http or settings.http or DEFAULT_HTTP
    state_dir = settings.state_dir
    default = state_dir / "service.db" if state_dir else default_store_path(os.environ, Path.home())
    config = ServiceConfig(listen=listen, store_url=store_url or settings.store, default_store_path=default,
                           token=settings.service_token(token_file), token_file=token_file or settings.token_file,
                           token_grace=settings.token_grace_seconds, tls_cert=tls_cert, tls_key=tls_key,
                           tls_ca=tls_ca, timing=Timing(vote_timeout=settings.vote_timeout),
                           crash_at=settings.crash_at,
                           replan=ReplanConfig(enabled=replan, policy=policy_config(policy_items),
                                               topology=topology_text(topology), budget=search_budget,
                                               record_dir=str(record_dir or settings.search_records or ""),
                                               nice=settings.search_nice),
                           http=None if http_address.lower() in ("off", "none", "") else http_address,
                           dashboard_public=settings.dashboard_public,
                           http_fallback=http is None and settings.http is None, http_fd=http_fd,
                           http_limits=HttpLimits(max_connections=settings.http_max_connections,
                                                  header_timeout=settings.http_header_timeout,
                                                  idle_timeout=settings.http_idle_timeout),
                           dashboard_hosts=settings.dashboard_host_list(),
                           limits=settings.limits(), max_jobs=settings.max_jobs,
                           advertise=_advertise(advertise or settings.advertise),
                           lease=LeaseTiming(ttl=settings.lease_seconds, renew=settings.lease_renew_seconds,
                                             give_up=settings.lease_give_up_seconds))
    logging.getLogger("p2.service").setLevel(logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    service_log = logging.getLogger("p2.service")
    service_log.addHandler(handler)
    service_log.propagate = False
    # Clients can make the service log (asyncio's failed accepts, grpc's and uvicorn's own loggers): a
    # flood of one cause is a few lines and a count (log_limits), on our handler, the root logger's, and
    # uvicorn's error logger (whose handlers uvicorn installs only when the dashboard starts).
    for limited in (handler, *logging.getLogger().handlers):
        limit_handler(limited)
    limit_logger(logging.getLogger("uvicorn.error"))

    def ready(service) -> None:
        if http_port_file is not None and service.http_port:
            http_port_file.write_text(f"{service.http_port}\n")
        if port_file is not None:
            port_file.write_text(f"{service.port}\n")
        dashboard = f"; dashboard {service.http_url}" if service.http_url else ""
        click.echo(f"p2 serve: listening on {listen.rsplit(':', 1)[0]}:{service.port}, store "
                   f"{service.core.store.url}{dashboard}", err=True)

    try:
        asyncio.run(run_service(config, ready))
    except InvalidInputError:
        raise                           # a bad URL or address: exit 2
    except StoreError as error:         # the store is down, or a newer service took it over: exit 1
        raise JobFailedError(str(error)) from None


def _advertise(address: str | None) -> str | None:
    """--advertise / P2_ADVERTISE, checked: one HOST:PORT."""
    if address is None or not address.strip():
        return None
    found = parse_addresses(address, "--advertise")
    if len(found) != 1:
        raise InvalidInputError(f"--advertise={address!r} names {len(found)} addresses; give this service's one")
    return found[0]


# ------------------------------------------------------------------- jobs
@click.group("jobs")
def jobs() -> None:
    """The jobs the service knows: their ranks, state and committed plan."""


def _client(settings: Settings, options: dict) -> Client:
    return connect(settings, options["service"], options["token_file"], options["tls_ca"], options["tls_cert"],
                   options["tls_key"], options["timeout"])


@jobs.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many jobs, the first by id (default: every job).")
@click.option("--page-size", type=click.IntRange(min=1, max=MAX_PAGE), default=MAX_PAGE, hidden=True,
              help="Jobs asked for per call (tests make it small to follow several pages).")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write the jobs as JSON ('-' for stdout).")
@click.pass_obj
def jobs_list(settings: Settings, limit: int | None, page_size: int, json_out: str | None, **options) -> None:
    """List the jobs, by id (the service answers a page at a time; this follows every page)."""
    client = _client(settings, options)
    found: list[dict] = []
    cursor = ""
    while limit is None or len(found) < limit:
        wanted = page_size if limit is None else min(page_size, limit - len(found))
        reply = client.call("ListJobs", api.ListJobsRequest(page_size=wanted, page_token=cursor))
        found += [job_dict(job) for job in reply.jobs]
        if not reply.next_page_token or reply.next_page_token <= cursor:
            break                       # the last page (a cursor that does not advance would loop)
        cursor = reply.next_page_token
    if json_out is not None:
        write_json({"jobs": found}, json_out)
    if json_out != "-":
        click.echo(jobs_table(found))


@jobs.command("show")
@click.argument("job_id")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write the job as JSON ('-' for stdout).")
@click.pass_obj
def jobs_show(settings: Settings, job_id: str, json_out: str | None, **options) -> None:
    """One job: every rank, its host, backend, plan and iteration; then passthrough's
    and every plan's iteration times, predicted and measured, beside the lower bound
    on the job's iteration time, and their ratios to it; then the model the latest
    search fitted to the job's telemetry (per channel and for the host: ms per
    motif, ms per round, MB/s, beside the calibrated values) and what the
    prediction would be without each fitted value."""
    client = _client(settings, options)
    reply = client.call("GetJob", api.GetJobRequest(job_id=job_id))
    job = {**job_dict(reply), **latest_search(reply)}
    job["plans"] = [plan_dict(record, with_plan=False)
                    for record in client.call("ListPlans", api.ListPlansRequest(job_id=job_id)).plans]
    if json_out is not None:
        write_json(job, json_out)
    if json_out != "-":
        click.echo(job_text(job))


@jobs.command("delete")
@click.argument("job_id")
@click.option("--force", is_flag=True, help="Delete it even while ranks are connected (their streams close; ranks "
              "that still run register the job anew).")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write what was deleted as JSON ('-' for stdout).")
@click.pass_obj
def jobs_delete(settings: Settings, job_id: str, force: bool, json_out: str | None, **options) -> None:
    """Delete a job and everything the service stored of it: its plans and their
    two-phase-commit states, its decision log, telemetry and events. Refused while
    ranks are connected, unless --force.

    \b
    Example:
      p2 jobs delete finished-run-17
    """
    reply = _client(settings, options).call("DeleteJob", api.DeleteJobRequest(job_id=job_id, force=force))
    if json_out is not None:
        write_json({"job_id": reply.job_id, "deleted": True, "force": force}, json_out)
    if json_out != "-":
        click.echo(f"job {reply.job_id} deleted")


@jobs.command("trace")
@click.argument("job_id")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the traces: trace.rank<R>.json per rank (p2 optimize --trace reads them).")
@click.option("--iterations", type=click.IntRange(min=1, max=10_000), default=8, show_default=True,
              help="The last finished iterations of each rank.")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write what was written as JSON ('-' for stdout).")
@click.pass_obj
def jobs_trace(settings: Settings, job_id: str, out_dir: Path, iterations: int, json_out: str | None,
               **options) -> None:
    """Fetch every rank's recent trace from a live job (asked over the ranks'
    links, nothing stops), ready for 'p2 optimize --trace'.

    \b
    Example:
      p2 jobs trace my-job --out traces/ && p2 optimize --trace traces/trace.rank*.json --topology t.yaml
    """
    client = _client(settings, options)
    request = api.GetTracesRequest(job_id=job_id, iterations=iterations, timeout_seconds=max(1.0, client.timeout))
    try:
        files = list(client.stub.GetTraces(request, metadata=client.metadata, timeout=client.timeout + 5))
    except grpc.RpcError as error:
        raise client.explain(error) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for file in files:
        path = out_dir / f"trace.rank{file.rank}.json"
        path.write_bytes(file.data)
        written.append({"rank": file.rank, "path": str(path), "bytes": len(file.data)})
    if json_out is not None:
        write_json({"job_id": job_id, "iterations": iterations, "traces": written}, json_out)
    if json_out != "-":
        total = sum(item["bytes"] for item in written)
        click.echo(f"{len(written)} trace(s) of job {job_id}, {total / 1024:.0f} KiB, in {out_dir}")


@jobs.command("events")
@click.argument("job_id")
@click.option("--limit", type=click.IntRange(min=1, max=MAX_DECISIONS), default=DEFAULT_DECISIONS, show_default=True,
              help="The last this many decisions.")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write the decisions as JSON ('-' for stdout).")
@click.pass_obj
def jobs_events(settings: Settings, job_id: str, limit: int, json_out: str | None, **options) -> None:
    """The job's replanning decisions, oldest first: every search, commit,
    verdict, rollback and cluster change the service made, with its reason.

    \b
    Example:
      p2 jobs events my-job --limit 20
    """
    reply = _client(settings, options).call("ListDecisions", api.ListDecisionsRequest(job_id=job_id, limit=limit))
    decisions = [json.loads(decision.document) for decision in reply.decisions]
    if json_out is not None:
        write_json({"job_id": job_id, "decisions": decisions}, json_out)
    if json_out != "-":
        click.echo(decisions_text(job_id, reply.decisions))


# ------------------------------------------------------------------- plan
@click.group("plan")
def plan() -> None:
    """Plans of a job: submit one for two-phase commit, list the history, show one."""


@plan.command("submit")
@click.option("--job", "job_id", required=True, help="The job to commit the plan to.")
@click.argument("plan_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--wait", "wait_seconds", type=click.FloatRange(min=0), default=None,
              help="Wait up to this many seconds for the commit's decision (exit 1 if it was aborted).")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write the plan's record as JSON ('-' for stdout).")
@click.pass_obj
def plan_submit(settings: Settings, job_id: str, plan_file: Path, wait_seconds: float | None, json_out: str | None,
                **options) -> None:
    """Commit PLAN_FILE (a p2enforcer-plan JSON document, e.g. from 'p2 optimize'
    or 'p2 rule-plan') to every rank of a job. The service gives it the job's
    next version; every rank switches at the same iteration, or none does."""
    try:
        text = plan_file.read_text()
    except OSError as error:
        raise InvalidInputError(f"cannot read the plan {plan_file}: {error.strerror}") from None
    value = Plan.parse(text)
    client = _client(settings, options)
    record = client.call("SubmitPlan", api.SubmitPlanRequest(job_id=job_id, plan=plan_to_proto(value)))
    if wait_seconds is not None:
        deadline = time.monotonic() + wait_seconds
        while record.state == api.PREPARING and time.monotonic() < deadline:
            time.sleep(0.1)
            record = client.call("GetPlan", api.GetPlanRequest(job_id=job_id, version=record.version))
    data = plan_dict(record, with_plan=False)
    if json_out is not None:
        write_json(data, json_out)
    if json_out != "-":
        click.echo(plan_text(data))
    if wait_seconds is not None and data["state"] != "committed":
        raise JobFailedError(f"plan {data['version']} of job {job_id} was not committed: {data['state']}"
                             + (f" ({data['reason']})" if data["reason"] else ""))


@plan.command("list")
@click.option("--job", "job_id", required=True, help="The job.")
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write the plans as JSON ('-' for stdout).")
@click.pass_obj
def plan_list(settings: Settings, job_id: str, json_out: str | None, **options) -> None:
    """A job's plans, oldest first, with each one's two-phase-commit state per rank."""
    records = _client(settings, options).call("ListPlans", api.ListPlansRequest(job_id=job_id)).plans
    found = [plan_dict(record, with_plan=False) for record in records]
    if json_out is not None:
        write_json({"job_id": job_id, "plans": found}, json_out)
    if json_out != "-":
        click.echo(plans_table(found))


@plan.command("show")
@click.option("--job", "job_id", required=True, help="The job.")
@click.argument("version", type=click.IntRange(min=1))
@service_options
@click.option("--json", "json_out", metavar="OUT", help="Write the plan (record and document) as JSON ('-' for stdout).")
@click.pass_obj
def plan_show(settings: Settings, job_id: str, version: int, json_out: str | None, **options) -> None:
    """One plan: its decision, each rank's part in the commit, and the plan itself."""
    data = plan_dict(_client(settings, options).call("GetPlan", api.GetPlanRequest(job_id=job_id, version=version)))
    if json_out is not None:
        write_json(data, json_out)
    if json_out != "-":
        click.echo(plan_text(data))



