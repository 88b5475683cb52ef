"""``p2 demo``'s run: an emulated cluster, the service, a DLRM-like job, a NIC slowed mid-run.

The steps (issue 16's main job):

1. **Cluster.** As root, an emulated ``nodes × per_node`` cluster with two
   ``tbf``-shaped NICs per node (:mod:`deploy.emulated`); without the
   privileges a loopback-only one (the loop runs; nothing can be slowed down,
   so there is no speed-up to show and no change to react to).
2. **Service.** ``p2 serve`` with replanning on, an SQLite store in the work
   folder and the cluster's topology, inside node 0's namespace on its NIC
   address: the ranks of other nodes reach it over the network, as on a cluster.
3. **Job.** One of :data:`JOBS` (``examples/train_dlrm.py``, ``train_ddp.py`` or
   ``train_fsdp.py --mixed-precision bf16``) on every rank through ``p2enforcer``
   with ``P2_SERVICE``; nobody submits a plan: the service plans, commits and
   replans by itself.
4. **Change.** Once the service's first plan has been committed and judged
   (kept or rolled back) and has run a while, the second NIC of every node
   (channel 1) is slowed ``throttle`` times with ``tc``.
5. **Report.** From rank 0's per-step times and plan versions, the NICs' drops
   and the host's cores (:mod:`deploy.emulated.cores`) sampled as each step
   ends, and the service's stored events and plan records:
   :mod:`optimizer_service.cli.demo_report`.

**The peer** (issue 32, item 5): what a user with two NICs gets without the
service — the same job under plain gloo with ``GLOO_SOCKET_IFNAME`` listing
every NIC of the node (gloo deals whole ops round-robin over them), where
passthrough keeps the inner backend on one NIC. It runs in the same run,
interleaved: both jobs start together, gated, and take turns —
``peer_every`` steps of the service's job, then ``peer_steps`` of the peer
(:mod:`optimizer_service.cli.demo_turns`). The service's job pauses between
iterations inside ``enforcer.idle()``, so neither its telemetry nor its
traces count the pauses; the service plans and replans it as if it ran alone.
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from deploy.emulated import (
    DEFAULT_FABRIC,
    can_manage_namespaces,
    cores,
    create_cluster,
    destroy_cluster,
    nic_drops,
    run_ranks,
    set_channel_rate,
)
from deploy.emulated.probe import free_port, in_namespace
from deploy.emulated.state import find_state_dir
from optimizer_service.cli.demo_report import TRACE_DIR
from optimizer_service.cli.demo_turns import (
    Meters,
    PeerTurn,
    Reading,
    clear_gate,
    job_turn_warmup,
    measured_from,
    peer_turns,
    ready,
    until,
    write_gate,
)
from optimizer_service.errors import JobFailedError
from optimizer_service.plan.plan import Plan
from optimizer_service.service.store.sqlite_store import SqlitePlanStore

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Job:
    """A job the demo trains: an example script, the flags it always gets, and what the report calls it."""

    script: str
    title: str
    flags: tuple[str, ...] = ()

    def command(self, backend: str, steps: int, out: Path, extra: Sequence[str] = ()) -> list[str]:
        """Every rank's command line: ``backend`` for ``steps`` steps, rank 0's JSON to ``out``."""
        return [sys.executable, str(ROOT / "examples" / self.script), *self.flags, "--backend", backend,
                "--steps", str(steps), "--json", str(out), *extra]


#: The jobs the demo can train (issue 32, item 7): the DLRM-like job (all-to-all + all-reduce), a DDP
#: MLP (all-reduce) and FSDP2 in bf16 mixed precision (bf16 all-gathers, reduce-scatters).
JOBS = {"dlrm": Job("train_dlrm.py", "DLRM-like"),
        "ddp": Job("train_ddp.py", "DDP"),
        # 1.05 M parameters: ~8.4 MB of bf16 all-gathers and fp32 reduce-scatters per rank and step,
        # so the NICs, not the two cores, set the pace (examples/README.md, FSDP2 in bf16)
        "fsdp": Job("train_fsdp.py", "FSDP2 bf16",
                    ("--mixed-precision", "bf16", "--width", "256", "--hidden", "1024", "--blocks", "2"))}
SWITCH_EVERY = 4
EVENTS_EVERY = 0.5      # seconds between two reads of the service's events while the job runs
#: A demo-length policy: the defaults' shape (optimizer_service/control/policy_config.py), shorter windows.
POLICY = ("first_plan_after=20", "warmup=5", "window=15", "min_samples=8", "evaluate=12", "consecutive=8",
          "cooldown=20")
#: Steps the judged first plan runs before the NIC is slowed: past the policy's baseline for it
#: (its median over the second window after warm-up), so the service can see the change against it.
CHANGE_AFTER = 20
STEP_LINE = re.compile(r"^\[r0\] step (\d+) loss (\S+)$")


@dataclass(frozen=True)
class DemoConfig:
    nodes: int = 2
    per_node: int = 4
    nic: float = 25e6               # bytes/s of each NIC (200 Mbit/s)
    nic2: float = 25e6
    throttle: float = 4.0           # the second NIC is slowed this many times mid-run
    steps: int = 300
    model: tuple[str, ...] = ()     # extra train_dlrm.py flags (model size)
    job: str = "dlrm"               # a key of JOBS
    fabric: str = DEFAULT_FABRIC    # how the emulated NICs queue (deploy.emulated.fabric)
    peer_steps: int = 10            # steps of each of the peer's turns (0: no peer)
    peer_every: int = 20            # steps of the job between two of the peer's turns
    search_budget: float = 3.0
    name: str = "p2demo"
    loopback: bool = False          # force the loopback cluster even as root
    policy: tuple[str, ...] = POLICY
    timeout: float = 1800.0
    http: str = "127.0.0.1:8080"    # the dashboard (a free port when this one is taken)


@dataclass
class Progress:
    """What the run saw as it went: rank 0's steps (and when), the change, the output's tail
    (all of it goes to ``log``, the work folder's ranks.log, when given)."""

    steps: list[tuple[int, float]] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    change_step: int | None = None
    change_unix: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    log: TextIO | None = None

    def write(self, text: str) -> int:        # run_ranks writes rank output here, line by line
        now = time.time()
        with self.lock:
            if self.log is not None:
                self.log.write(text)
                self.log.flush()
            for line in text.splitlines():
                match = STEP_LINE.match(line.strip())
                if match:
                    self.steps.append((int(match.group(1)), now))
                self.tail = (self.tail + [line])[-60:]
        return len(text)

    def flush(self) -> None:
        pass

    def last_step(self) -> int:
        with self.lock:
            return self.steps[-1][0] if self.steps else 0


class DemoRun:
    def __init__(self, config: DemoConfig, work: Path, say: Callable[[str], None]) -> None:
        self.config, self.work, self.say = config, work, say
        self.shaped = can_manage_namespaces() and not config.loopback
        self.progress = Progress(log=(work / "ranks.log").open("w"))
        self.events: list[dict] = []
        self.drops: list[tuple[int, dict[int, int]]] = []     # (rank 0's step, packets the NICs dropped so far)
        self.cores: list[tuple[int, list[float]]] = []         # (rank 0's step, the host's core times so far)
        self.info = None
        self.topology_path = work / "topology.yaml"
        self.service: subprocess.Popen | None = None
        self.address = ""
        self.dashboard = ""

    # ------------------------------------------------------------- the run
    def run(self) -> dict:
        config = self.config
        if not self.shaped:
            self.say("p2 demo: not root (no CAP_NET_ADMIN): running on loopback, with no NICs to shape or "
                     "slow down. The loop runs (committing any plan the search finds, however small its predicted "
                     "gain); speed-ups and the replanning after a NIC change need root.")
        if find_state_dir(config.name) is not None:
            self.say(f"removing the cluster {config.name!r} a previous demo left")
            destroy_cluster(config.name)
        self.say(f"building the {'emulated' if self.shaped else 'loopback'} cluster {config.name}: "
                 f"{config.nodes} x {config.per_node} ranks" +
                 (f", NICs {config.nic * 8 / 1e6:g} + {config.nic2 * 8 / 1e6:g} Mbit/s per node, "
                  f"{config.fabric} fabric" if self.shaped else ""))
        self.info = create_cluster(config.name, config.nodes, config.per_node, config.nic, config.nic2,
                                   shaped=self.shaped, fabric=config.fabric)
        # The cluster's state folder goes with it at the end; the report's offline search needs the topology.
        self.topology_path.write_text(self.info.topology_path.read_text())
        try:
            self._start_service()
            result = self._train()
            self._stop_service()
        finally:
            self._stop_service()
            destroy_cluster(config.name)
            self.progress.log.close()
        return result

    def _start_service(self) -> None:
        info, config = self.info, self.config
        port_file, db = self.work / "service.port", self.work / "service.db"
        port_file.unlink(missing_ok=True)
        host = info.master_addr
        # On loopback there is no network to plan for: the search's gain is noise-sized, and the
        # demo commits whatever it finds (a slower plan is still rolled back) to show the loop.
        items = config.policy + (() if self.shaped else ("min_gain=0",))
        policy = [arg for item in items for arg in ("--policy", item)]
        argv = [sys.executable, "-m", "optimizer_service.cli", "serve", "--listen", f"{host}:0", "--port-file",
                str(port_file), "--store", f"sqlite:///{db}", "--topology", str(self.topology_path),
                "--search-budget", f"{config.search_budget:g}", "--record-searches", str(self.work / "searches"),
                *policy]
        # The dashboard's socket is bound here, on the host, and handed over: the service runs inside
        # node 0's namespace, where a browser on the host could not reach it.
        http = self._dashboard_socket()
        argv += ["--http-fd", str(http.fileno())]
        log = (self.work / "service.log").open("w")
        try:
            self.service = subprocess.Popen(in_namespace(info.node_namespaces[0] if self.shaped else None, argv),
                                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, pass_fds=(http.fileno(),))
        finally:
            http.close()
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.service.poll() is not None or time.monotonic() > deadline:
                raise JobFailedError(f"p2 serve did not start; its log: {self.work / 'service.log'}")
            time.sleep(0.1)
        self.address = f"{host}:{int(port_file.read_text())}"
        self.say(f"optimizer service on {self.address} (store {db}; log {self.work / 'service.log'})")
        self.say(f"dashboard: {self.dashboard} (live while the demo runs)")

    def _dashboard_socket(self) -> socket.socket:
        host, _, port = self.config.http.rpartition(":")
        try:
            sock = socket.create_server((host, int(port)))
        except OSError:
            sock = socket.create_server((host, 0))
        self.dashboard = f"http://{host}:{sock.getsockname()[1]}/"
        return sock

    def _stop_service(self) -> None:
        if self.service is not None and self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(30)
            except subprocess.TimeoutExpired:
                self.service.kill()

    def _train(self) -> dict:
        """The service's job and, on the emulated cluster, the peer, in turns (module docstring)."""
        config = self.config
        out = self.work / "rank0.json"
        out.unlink(missing_ok=True)
        job = JOBS[config.job]
        ranks = config.nodes * config.per_node
        peer = self._peer_job(ranks) if self.shaped and config.peer_steps else None
        every = config.peer_every if peer else config.steps
        gate = self.work / "gate-job"
        clear_gate(gate, ranks)
        command = job.command("p2enforcer", config.steps, out, config.model) + ["--gate", str(gate)]
        env = {"P2_SERVICE": self.address, "P2_JOB": config.job, "P2_SWITCH_EVERY": str(SWITCH_EVERY)}
        self.say(f"training {config.job} ({config.steps} steps, examples/{job.script} "
                 f"{' '.join(job.flags + config.model)}) through p2enforcer; the service plans it by itself")
        if peer:
            self.say(f"the peer: {config.job} under plain gloo over every NIC (GLOO_SOCKET_IFNAME={peer.ifnames}), "
                     f"{config.peer_steps} steps after every {every} of the job's, in turns on the same cluster")
        store = None
        shown_step, sampled_step, polled = 0, -1, 0.0
        meters = Meters(self._reading)

        def watch() -> None:
            nonlocal store, shown_step, sampled_step, polled
            step = self.progress.last_step()
            if time.monotonic() - polled >= EVENTS_EVERY:
                polled = time.monotonic()
                if store is None and (self.work / "service.db").exists():
                    store = SqlitePlanStore.open(self.work / "service.db")
                if store is not None:
                    self._poll_events(store)
            if step > sampled_step:            # one reading per step (module docstring of demo_report)
                sampled_step, reading = step, meters.job()
                _sample(self.drops, step, lambda: reading.drops)
                _sample(self.cores, step, lambda: reading.cores)
            if step >= shown_step + 10:
                shown_step = step
                self.say(self._progress_line(step))
            self._maybe_change(step)

        ports = self._ports(2 if peer else 1)
        runners = {"the job": _Ranks(self, command, env, self.progress, ports[0])}
        if peer:
            runners["the peer"] = _Ranks(self, peer.command, peer.env, peer.progress, ports[1])
        deadline = time.monotonic() + config.timeout
        running = set(runners)

        def ended() -> str | None:
            """What ended before its time, with its last lines (None: both run)."""
            name = next((name for name in running if not runners[name].alive()), None)
            return None if name is None else runners[name].ended(name)

        until(lambda: ready(gate, ranks) and (peer is None or ready(peer.gate, ranks)), ended, lambda: None,
              deadline, "every rank of both jobs was ready")
        allowed = 0
        while allowed < config.steps:
            allowed = min(config.steps, allowed + every)
            write_gate(gate, allowed)
            until(lambda allowed=allowed: self.progress.last_step() >= allowed, ended, watch, deadline,
                  f"the job's step {allowed}")
            watch()
            if allowed == config.steps:         # the job leaves before the peer's last turn
                running.discard("the job")
                runners["the job"].join(deadline)
            if peer:
                self._peer_turn(peer, meters, allowed, ended, deadline)
        code = runners["the job"].join(deadline)
        plans = {}
        if store is not None:
            self._poll_events(store)
            for stored in store.list_plans(config.job):
                state = store.get_plan_state(config.job, stored.version) or {}
                plans[stored.version] = {**state, "bound_iteration_seconds":
                                         Plan.parse(stored.plan_json).bound_iteration_seconds}
            store.close()
        if code != 0 or not out.exists():
            raise JobFailedError(f"the job failed (exit code {code}); its last lines:\n" +
                                 "\n".join(self.progress.tail[-15:]))
        return {"rank0": json.loads(out.read_text()), "events": self.events, "plans": plans,
                "change_step": self.progress.change_step, "change_unix": self.progress.change_unix,
                "shaped": self.shaped, "address": self.address, "steps_seen": list(self.progress.steps),
                "drops": self.drops, "cores": self.cores, "turn_warmup": job_turn_warmup(config.steps, every),
                "peer": self._peer_result(peer, runners.get("the peer"), deadline)}

    def _peer_job(self, ranks: int) -> _Peer:
        """The peer's command (the job under plain gloo over every NIC, gated), for all its turns."""
        config = self.config
        # Every node names its NICs alike (deploy.emulated.names.node_ifname), so node 0's list is every rank's.
        ifnames = ",".join(self.info.nic(0, channel).ifname for channel in range(self.info.channels))
        out, gate = self.work / "peer.json", self.work / "gate-peer"
        out.unlink(missing_ok=True)
        clear_gate(gate, ranks)
        steps = peer_turns(config.steps, config.peer_every) * config.peer_steps
        command = JOBS[config.job].command("gloo", steps, out, config.model) + ["--gate", str(gate)]
        log = (self.work / "peer.log").open("w")
        return _Peer(command, {"GLOO_SOCKET_IFNAME": ifnames}, Progress(log=log), gate, out, ifnames)

    def _peer_turn(self, peer: _Peer, meters: Meters, job_step: int, ended: Callable[[], str | None],
                   deadline: float) -> None:
        """One turn of the peer after the job's step ``job_step``; its counts are taken out of the job's."""
        config = self.config
        first = len(peer.turns) * config.peer_steps + 1
        turn = PeerTurn(first, first + config.peer_steps - 1, measured_from(first), job_step,
                        "before" if self.progress.change_step is None else "after")
        paused = self._reading()
        write_gate(peer.gate, turn.last_step)

        def tick() -> None:
            if turn.start is None and peer.progress.last_step() >= turn.measured_from - 1:
                turn.start = self._reading()

        until(lambda: peer.progress.last_step() >= turn.last_step, ended, tick, deadline,
              f"the peer's step {turn.last_step}")
        turn.end = self._reading()
        meters.take_out(paused, turn.end)
        peer.turns.append(turn)

    def _peer_result(self, peer: _Peer | None, runner: _Ranks | None, deadline: float) -> dict | None:
        """The peer's rank-0 JSON, its turns and the NICs it used (None without a peer)."""
        if peer is None or runner is None:
            return None
        code = runner.join(deadline)
        peer.progress.log.close()
        if code != 0 or not peer.out.exists():
            raise JobFailedError(runner.ended("the peer"))
        return {"rank0": json.loads(peer.out.read_text()), "turns": [turn.as_json() for turn in peer.turns],
                "ifnames": peer.ifnames, "every": self.config.peer_every}

    def _reading(self) -> Reading:
        return Reading(nic_drops(self.info) if self.shaped else None, _core_times())

    def _ports(self, count: int) -> list[int]:
        """``count`` distinct free rendezvous ports in node 0's namespace (one per job run at once)."""
        namespace = self.info.node_namespaces[0] if self.shaped else None
        ports: list[int] = []
        while len(ports) < count:
            port = free_port(namespace)
            if port not in ports:
                ports.append(port)
        return ports

    # ------------------------------------------------------------- watching
    def _poll_events(self, store: SqlitePlanStore) -> None:
        events = store.recent_events(self.config.job, limit=10_000)
        for event in events[len(self.events):]:
            step = "" if event.get("iteration") is None else f"step {event['iteration'] + 1}: "
            self.say(f"  [{step}{event['kind']}{' v' + str(event['version']) if event.get('version') else ''}] "
                     f"{event['reason']}")
        self.events = events

    def _progress_line(self, step: int) -> str:
        with self.progress.lock:
            recent = [t for s, t in self.progress.steps[-11:]]
        # The median step, not the mean: a pause for the peer's turn lies between two of them.
        per_step = statistics.median(b - a for a, b in itertools.pairwise(recent)) if len(recent) > 1 else float("nan")
        running, asked = 0, None
        for event in self.events:          # a commit or rollback names the plan; "committed" says it went in
            if event["kind"] in ("commit", "rollback"):
                asked = event["version"]
            elif event["kind"] == "committed" and asked is not None:
                running, asked = asked, None
            elif event["kind"] == "commit-failed":
                asked = None
        plan = f"v{running}" if running else "passthrough"
        return f"step {step:4d}  {per_step * 1e3:7.1f} ms/step  plan committed last: {plan}"

    def _maybe_change(self, step: int) -> None:
        """Slow the second NIC once the first plan was judged and ran CHANGE_AFTER more steps (or at 55 %)."""
        if not self.shaped or self.progress.change_step is not None:
            return
        judged = [e for e in self.events if e["kind"] in ("kept", "rollback")]
        due = judged and step >= judged[0]["iteration"] + 1 + CHANGE_AFTER
        late = step >= 0.55 * self.config.steps
        if not (due or late):
            return
        if late and not due:
            self.say("the service's first plan was not judged by 55 % of the steps; changing the cluster anyway")
        rate = self.config.nic2 / self.config.throttle
        set_channel_rate(self.info, 1, rate)
        self.progress.change_step, self.progress.change_unix = step, time.time()
        self.say(f"step {step}: CLUSTER CHANGE: the second NIC of every node slowed {self.config.throttle:g}x, "
                 f"to {rate * 8 / 1e6:g} Mbit/s (tc); the ranks and the service are not told")
        self._fetch_traces()

    def _fetch_traces(self) -> None:
        """A trace window of the changed cluster, in the background: the offline search of the report
        (:func:`optimizer_service.cli.demo_report.offline_best`) plans the same job knowing the new rate."""
        argv = [sys.executable, "-m", "optimizer_service.cli", "jobs", "trace", self.config.job, "--out",
                str(self.work / TRACE_DIR), "--iterations", "4", "--service", self.address]

        def fetch() -> None:
            time.sleep(8.0)        # past the change's first iterations
            namespace = self.info.node_namespaces[0] if self.shaped else None
            with (self.work / "trace-fetch.log").open("w") as log:
                subprocess.run(in_namespace(namespace, argv), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                               timeout=120, check=False)

        threading.Thread(target=fetch, daemon=True).start()


@dataclass
class _Peer:
    """The peer's run: its command and environment, progress, gate, rank 0's JSON, NICs and turns so far."""

    command: list[str]
    env: dict[str, str]
    progress: Progress
    gate: Path
    out: Path
    ifnames: str
    turns: list[PeerTurn] = field(default_factory=list)


class _Ranks:
    """One job's ranks, run by :func:`run_ranks` on a thread (rank output to ``progress``)."""

    def __init__(self, run: DemoRun, command: list[str], env: dict[str, str], progress: Progress, port: int) -> None:
        self.code: list[int] = []
        self.progress = progress

        def ranks() -> None:
            try:
                self.code.append(run_ranks(run.info, command, env=env, out=progress, err=progress, master_port=port))
            except Exception as error:        # the caller reports it: it sees no rank-0 JSON
                progress.write(f"[demo] {error}\n")
                self.code.append(1)

        self.thread = threading.Thread(target=ranks, daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def join(self, deadline: float) -> int:
        """Its exit code, once its ranks ended (a :class:`JobFailedError` past the monotonic ``deadline``)."""
        self.thread.join(max(0.0, deadline - time.monotonic()))
        if self.thread.is_alive():
            raise JobFailedError("the ranks did not finish in time")
        return self.code[0]

    def ended(self, name: str) -> str:
        """``name`` ended (or failed to start), with its exit code and last lines."""
        code = self.code[0] if self.code else None
        return f"{name} ended (exit code {code}); its last lines:\n" + "\n".join(self.progress.tail[-15:])


def _sample(samples: list[tuple[int, object]], step: int, read: Callable[[], object | None]) -> None:
    """Append ``(step, read())`` for a step later than the last sampled (one sample per
    step: the first seen); nothing where ``read`` gives None."""
    if samples and step <= samples[-1][0]:
        return
    value = read()
    if value is not None:
        samples.append((step, value))


def _core_times() -> list[float] | None:
    """The host's core times now, as the report keeps them (None where they cannot be read)."""
    now = cores.sample()
    return None if now is None else now.to_list()
