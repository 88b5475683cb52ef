"""Multiproc (loopback): the DDP and FSDP2 training examples train, and give the same losses on every backend.

Each example runs as a real job: one ``python examples/train_*.py`` process
per rank with env:// rendezvous, exactly as torchrun or ``p2 cluster run``
starts it. The rendezvous store is a ``TCPStore(port=0)`` in this process and
every rank joins it as a client (``TORCHELASTIC_USE_AGENT_STORE``, torchrun's
own mechanism), so no port is guessed. Same seeds, same data and same math
on every backend: ``p2enforcer`` passes the ops through to gloo, so its losses
must equal gloo's to float rounding. The ``p2enforcer`` cases skip, with the
reason, while the backend cannot be initialized.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPTS = ["train_ddp.py", "train_fsdp.py"]
BACKENDS = ["gloo", "p2enforcer"]
WORLD_SIZES = [2, 4]
STEPS = 8
RUN_TIMEOUT = 180.0
REL_TOLERANCE = 1e-5

# The examples' imports (torch, then the enforcer), from their sys.path[0] (examples/),
# then a 1-rank world on a HashStore.
PROBE = """
import sys
import torch.distributed as dist
import enforcer
if not hasattr(enforcer, "step"):
    sys.exit("enforcer has no step() yet")
dist.init_process_group(sys.argv[1], store=dist.HashStore(), rank=0, world_size=1)
dist.destroy_process_group()
"""
# Every backend against a gloo run; gloo against a second gloo run (the determinism the
# comparison relies on) only on the smallest world, to keep this tier short.
PARITY_CASES = [(script, world_size, backend) for script in SCRIPTS for world_size in WORLD_SIZES
                for backend in BACKENDS if backend != "gloo" or world_size == min(WORLD_SIZES)]


@functools.cache
def unavailable(backend: str) -> str | None:
    """Why ``backend`` cannot run the examples here, or None."""
    if backend == "gloo":
        return None
    probe = subprocess.run([sys.executable, "-c", PROBE, backend], cwd=EXAMPLES, capture_output=True, text=True,
                           timeout=120)
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"]
    return f"{backend} cannot be initialized: {lines[-1]}"


def rank_command(script: str, backend: str, steps: int, json_path: Path | None, flags: Sequence[str] = ()) -> list[str]:
    command = [sys.executable, str(EXAMPLES / script), "--backend", backend, "--steps", str(steps), *flags]
    return command + (["--json", str(json_path)] if json_path else [])


def run_job(script: str, backend: str, world_size: int, steps: int, folder: Path,
            extra_env: dict[str, str] | None = None, flags: Sequence[str] = ()) -> tuple[dict, list[str]]:
    """Run ``script`` as ``world_size`` ranks (with the script's own ``flags``); returns rank 0's JSON
    and every rank's output."""
    json_path = folder / "result.json"
    logs = launch_ranks(rank_command(script, backend, steps, json_path, flags), world_size, folder, extra_env,
                        f"{script} --backend {backend}")
    return json.loads(json_path.read_text()), logs


def launch_ranks(command: Sequence[str], world_size: int, folder: Path, extra_env: dict[str, str] | None = None,
                 label: str = "") -> list[str]:
    """Run ``command`` as ``world_size`` ranks under an env:// rendezvous (what
    torchrun and ``p2 cluster run`` do: one process per rank, the store a
    ``TCPStore(port=0)`` in this process that every rank joins as a client);
    returns every rank's output.

    The first rank to fail (or a job past ``RUN_TIMEOUT``) kills the others and
    fails the test with that rank's output.
    """
    import torch.distributed as dist

    folder.mkdir(parents=True, exist_ok=True)
    server = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port),
           "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size),
           "TORCHELASTIC_USE_AGENT_STORE": "True", "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    logs = [folder / f"rank{rank}.log" for rank in range(world_size)]
    procs = []
    try:
        for rank, log in enumerate(logs):
            with log.open("w") as out:
                procs.append(subprocess.Popen(
                    list(command), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                    env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}))
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            codes = [proc.poll() for proc in procs]
            if all(code == 0 for code in codes):
                break
            failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed or time.monotonic() > deadline:
                rank = failed[0] if failed else codes.index(None)
                why = f"exited with code {codes[rank]}" if failed else f"ran past {RUN_TIMEOUT:.0f} s"
                pytest.fail(f"{label or command[1]}, {world_size} ranks: rank {rank} {why}:\n"
                            f"{logs[rank].read_text()[-4000:]}")
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        del server
    return [log.read_text() for log in logs]


class JobRuns:
    """Each job once per module, by key: a backend this machine lacks skips the test, and a failed
    job is remembered too: the next test that needs it fails with the same message at once."""

    def __init__(self) -> None:
        self.done: dict[tuple, object] = {}
        self.failed: dict[tuple, str] = {}

    def get(self, key: tuple, backend: str, run: Callable[[], object]):
        reason = unavailable(backend)
        if reason:
            pytest.skip(reason)
        if key in self.failed:
            pytest.fail(self.failed[key])
        if key not in self.done:
            try:
                self.done[key] = run()
            except pytest.fail.Exception as failure:
                self.failed[key] = str(failure)
                raise
        return self.done[key]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Runs each (script, backend, world size, repeat) once per module; repeat > 0 is a fresh second run."""
    runs = JobRuns()

    def get(script: str, backend: str, world_size: int, repeat: int = 0) -> tuple[dict, list[str]]:
        def run() -> tuple[dict, list[str]]:
            folder = tmp_path_factory.mktemp(f"{Path(script).stem}-{backend}-{world_size}-{repeat}")
            return run_job(script, backend, world_size, STEPS, folder)

        return runs.get((script, backend, world_size, repeat), backend, run)

    return get


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_describes_the_flags(script):
    result = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for flag in ("--backend", "--steps", "--json", "--after-plan", "P2_EXAMPLE_BACKEND", "torchrun", "p2 cluster run"):
        assert flag in result.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_unknown_backend_is_one_line_and_exit_code_2(script):
    # Checked before the rendezvous, so no other rank or store is needed.
    result = subprocess.run(rank_command(script, "no-such-backend", 1, None), cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"{script}: error: torch.distributed backend 'no-such-backend' is not registered "
                           "(known: ")
    assert "gloo" in line


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("script", SCRIPTS)
def test_training_reduces_the_loss(jobs, script, world_size, backend):
    result, logs = jobs(script, backend, world_size)
    assert {k: result[k] for k in ("backend", "world_size", "steps")} == {
        "backend": backend, "world_size": world_size, "steps": STEPS}
    losses = result["losses"]
    assert len(losses) == STEPS
    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < losses[0], losses
    assert result["seconds"] > 0
    # Rank 0 prints every step's rank-averaged loss; the other ranks print none.
    printed = re.findall(r"^step (\d+) loss (\S+)$", logs[0], flags=re.MULTILINE)
    assert [int(step) for step, _ in printed] == list(range(1, STEPS + 1))
    assert [float(loss) for _, loss in printed] == pytest.approx(losses, abs=1e-6)
    assert all("step 1 loss" not in log for log in logs[1:])


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("script,world_size,backend", PARITY_CASES, ids=["-".join(map(str, c)) for c in PARITY_CASES])
def test_losses_equal_a_gloo_run(jobs, script, world_size, backend):
    """Same seeds, same math: any backend (gloo itself in a second run) gives gloo's losses."""
    reference, _ = jobs(script, "gloo", world_size)
    result, _ = jobs(script, backend, world_size, repeat=1 if backend == "gloo" else 0)
    assert len(result["losses"]) == len(reference["losses"]) == STEPS
    mismatches = [(step, want, got) for step, (want, got) in enumerate(zip(reference["losses"], result["losses"]), 1)
                  if not math.isclose(got, want, rel_tol=REL_TOLERANCE)]
    assert mismatches == [], f"(step, gloo, {backend}) where they differ"


@pytest.mark.multiproc
@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_losses_under_a_plan_from_the_trace_equal_gloo(jobs, tmp_path, script):
    """Trace a passthrough run, plan every op of its last iteration by rule (segmented,
    ring-splined, two channels), run again with P2_PLAN_FILE: same losses as gloo."""
    from optimizer_service.plan.op_plan import PLAN_KIND
    from optimizer_service.plan.plan import Plan

    reason = unavailable("p2enforcer")
    if reason:
        pytest.skip(reason)
    world_size = min(WORLD_SIZES)
    reference, _ = jobs(script, "gloo", world_size)
    run_job(script, "p2enforcer", world_size, STEPS, tmp_path / "traced",
            {"P2_TRACE_FILE": str(tmp_path / "traced" / "trace.json")})
    made = subprocess.run([sys.executable, "-m", "optimizer_service.cli", "rule-plan",
                           str(tmp_path / "traced" / "trace.rank0.json"), str(tmp_path / "plan.json"),
                           "--segments", "2", "--channels", "2"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    plan = Plan.parse((tmp_path / "plan.json").read_text())
    assert len(plan.ops) >= 2 and plan.channel_ids() == (0, 1)
    result, _ = run_job(script, "p2enforcer", world_size, STEPS, tmp_path / "planned",
                        {"P2_PLAN_FILE": str(tmp_path / "plan.json"),
                         "P2_TRACE_FILE": str(tmp_path / "planned" / "trace.json")})
    planned_trace = json.loads((tmp_path / "planned" / "trace.rank0.json").read_text())
    enforced = [op for op in planned_trace["ops"] if op["enforced"]]
    assert len(enforced) >= len(plan.ops) * (STEPS // 2)
    # Every planned kind ran under the plan (FSDP2's reduce-scatters are AVG: planned as SUM / p).
    assert {PLAN_KIND[op["kind"]] for op in enforced} == {op.key.kind for op in plan.ops}
    mismatches = [(step, want, got) for step, (want, got) in enumerate(zip(reference["losses"], result["losses"]), 1)
                  if not math.isclose(got, want, rel_tol=REL_TOLERANCE)]
    assert mismatches == [], "(step, gloo, p2enforcer with a plan) where they differ"


@pytest.mark.multiproc
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gated_job_runs_its_steps_only_in_the_turns_it_is_given(tmp_path, backend):
    """``--gate``: every rank reports ready, runs no step before its turn, stops at the end of each
    turn, and the waits are in no step's time."""
    import threading
    if unavailable(backend):
        pytest.skip(unavailable(backend))
    gate = tmp_path / "gate"
    done: list[tuple[dict, list[str]]] = []
    job = threading.Thread(target=lambda: done.append(run_job("train_ddp.py", backend, 2, 4, tmp_path / "job",
                                                              flags=["--gate", str(gate)])), daemon=True)
    job.start()

    def steps_printed() -> list[str]:
        log = tmp_path / "job" / "rank0.log"
        return re.findall(r"^step (\d+) ", log.read_text(), re.M) if log.exists() else []

    def until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + RUN_TIMEOUT
        while not condition():
            assert job.is_alive() and time.monotonic() < deadline, "the gated job ended or hung"
            time.sleep(0.05)

    until(lambda: all(Path(f"{gate}.ready.{rank}").exists() for rank in range(2)))
    time.sleep(1.0)
    assert steps_printed() == []                                   # no turn yet
    for allowed in (2, 4):
        gate.write_text(f"{allowed}\n")
        until(lambda allowed=allowed: len(steps_printed()) >= allowed)
        if allowed < 4:
            time.sleep(1.0)
            assert steps_printed() == ["1", "2"]                   # the turn ends at its last step
    job.join(RUN_TIMEOUT)
    result, _ = done[0]
    assert len(result["step_seconds"]) == 4 and max(result["step_seconds"]) < 0.9   # the 1 s waits are no step's


def test_a_gate_that_holds_no_number_is_one_line(tmp_path):
    gate = tmp_path / "gate"
    gate.write_text("soon")
    done = subprocess.run(rank_command("train_ddp.py", "gloo", 1, None, ["--gate", str(gate)]), cwd=ROOT,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          env={**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0", "RANK": "0",
                               "WORLD_SIZE": "1", "GLOO_SOCKET_IFNAME": "lo"})
    assert done.returncode != 0 and "holds 'soon', not a number of steps" in done.stderr.strip().splitlines()[-1]
