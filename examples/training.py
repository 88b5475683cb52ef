"""What the training examples share: flags, synthetic data, the training loop, the JSON.

``train_ddp.py`` and ``train_fsdp.py`` differ only in the model and how it is
wrapped; each calls :func:`main` with its own description and model builder.
``train_hybrid.py`` runs the same loop (:func:`train`) with a gradient
average across its subgroups after each backward pass. ``train_dlrm.py`` has
its own loop (two model halves, its own data) but the same flags
(:func:`parse_args` with its model's), start-up and shut-down (:func:`run`),
step end (:func:`finish_step`), JSON (:func:`summary`) and per-step record
(:class:`StepClock`).
Every rank builds the same model (fixed seed), draws its own deterministic
synthetic batches (seed + rank) from a fixed random "teacher" network, and
trains with SGD. Each step the loss is averaged over the ranks (one more
all-reduce, before the iteration boundary so every collective of step K
belongs to iteration K) and rank 0 prints ``step K loss X``; with ``--json OUT``
rank 0 writes ``{"backend", "world_size", "steps", "losses", "seconds",
"step_seconds", "plan_versions"}`` (per step: its wall time on rank 0, and the
version of the plan the enforcer ran it under, 0 in passthrough;
:func:`summary` and :class:`StepClock`).

``--gate FILE`` runs the steps in turns a launcher gives (:class:`Gate`): ``p2
demo`` runs the service's job and the all-NICs peer on one cluster this way,
interleaved. The waits for a turn are in no step's time.

``--after-plan N`` (the scripts that use :func:`train`) ends the run N
steps after the first step that ran under a plan the optimizer service
committed (``P2_SERVICE``), or at ``--steps``. Every rank switches plans at the
same iteration, so every rank stops at the same step without asking the others.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch import nn

import enforcer  # registers the p2enforcer backend; step() marks iterations

DEFAULT_BACKEND = "p2enforcer"
# Teacher and student share one seed on every rank; the data seed is offset by the rank.
MODEL_SEED = 1234
DATA_SEED = 5678
BATCH_SIZE = 64
LEARNING_RATE = 0.05


def parse_args(description: str, argv: list[str] | None = None,
               add_flags: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The shared flags, and a script's own (``add_flags`` adds them to the parser)."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=os.environ.get("P2_EXAMPLE_BACKEND", DEFAULT_BACKEND),
                        help="torch.distributed backend (default: $P2_EXAMPLE_BACKEND or %(default)s)")
    parser.add_argument("--steps", type=int, default=20, help="training steps (default: %(default)s)")
    parser.add_argument("--json", metavar="OUT", help="rank 0 writes the losses and the time here")
    parser.add_argument("--gate", metavar="FILE",
                        help="run each step only once FILE holds a number at least its own (turns a launcher "
                             "gives; see examples/training.py, Gate)")
    if add_flags is not None:
        add_flags(parser)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


def backend_problem(backend: str) -> str | None:
    """Why ``backend`` cannot be used, or None (``import enforcer`` registers ``p2enforcer``)."""
    if backend.lower() in dist.Backend.backend_list:
        return None
    known = ", ".join(b for b in dist.Backend.backend_list if b != "undefined")
    return f"torch.distributed backend {backend!r} is not registered (known: {known})"


def teacher_network(width: int, generator: torch.Generator) -> nn.Sequential:
    """The fixed random MLP (``width`` -> 64 -> 1) whose outputs the examples learn; weights from ``generator``."""
    teacher = nn.Sequential(nn.Linear(width, 64), nn.ReLU(), nn.Linear(64, 1))
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(parameter.shape[-1]))
    return teacher


def synthetic_batches(rank: int, width: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's endless batches: inputs from seed ``DATA_SEED + rank``, targets from a fixed teacher MLP."""
    teacher = teacher_network(width, torch.Generator().manual_seed(MODEL_SEED + 1))
    generator = torch.Generator().manual_seed(DATA_SEED + rank)
    while True:
        inputs = torch.randn(BATCH_SIZE, width, generator=generator)
        with torch.no_grad():
            targets = teacher(inputs)
        yield inputs, targets


def finish_step(step: int, loss: torch.Tensor, optimizers: Sequence[torch.optim.Optimizer]) -> float:
    """End iteration ``step`` after its backward pass; returns the loss averaged over the ranks.

    The loss average is the iteration's last collective, so every collective of
    step K belongs to iteration K; then the optimizers step, ``enforcer.step()``
    marks the boundary, and rank 0 prints ``step K loss X``.
    """
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    for optimizer in optimizers:
        optimizer.step()
    enforcer.step()           # the iteration boundary, where the enforcer may switch plans
    mean = mean_loss.item() / dist.get_world_size()
    if dist.get_rank() == 0:
        print(f"step {step} loss {mean:.6f}", flush=True)
    return mean


def summary(args: argparse.Namespace, losses: list[float], seconds: float) -> dict:
    """What ``--json`` holds (a script may add its own keys)."""
    return {"backend": args.backend, "world_size": dist.get_world_size(), "steps": len(losses), "losses": losses,
            "seconds": seconds}


class Gate:
    """``--gate FILE``: each step waits for its turn, so that a launcher can run two jobs on one
    cluster in turns (``p2 demo`` runs the service's job and the all-NICs peer so, interleaved).

    ``FILE`` holds how many steps the job may have run (no file: none); the launcher raises it
    a turn at a time, writing it whole (a rename). Before step K every rank waits until it holds
    K or more, polling every :data:`POLL` seconds. On its first wait each rank creates
    ``FILE.ready.RANK``: once all are there, every rank has joined the world and built its
    model, and the launcher can start the turns. The waits are inside :func:`enforcer.idle`:
    under p2enforcer a pause is no part of the next iteration's time or compute."""

    #: Seconds between two reads of the gate file: a waiting rank then takes about 0.2 % of a core
    #: (at 0.01 s, 1.1 %: eight waiting ranks took 4.5 % of a two-core host from the job that runs).
    POLL = 0.05

    def __init__(self, path: str) -> None:
        self.path = path
        self._ready = False

    def allowed(self) -> int:
        """The steps the launcher allows now."""
        try:
            with open(self.path) as source:
                text = source.read().strip()
        except FileNotFoundError:
            return 0
        try:
            return int(text)
        except ValueError:
            raise SystemExit(f"--gate {self.path}: holds {text[:40]!r}, not a number of steps") from None

    def wait(self, step: int) -> None:
        """Return once step ``step`` may run (at once when its turn has come: no idle to record)."""
        if not self._ready:
            open(f"{self.path}.ready.{dist.get_rank()}", "w").close()
            self._ready = True
        if self.allowed() >= step:
            return
        with enforcer.idle():
            while self.allowed() < step:
                time.sleep(self.POLL)


class StepClock:
    """Per step, its wall time and the plan version the enforcer ran it under (``--json``'s
    ``step_seconds`` and ``plan_versions``): :meth:`turn` before each step (it waits for the
    step's turn with ``--gate``, outside the step's time), :meth:`tick` after its :func:`finish_step`."""

    def __init__(self, gate: str | None = None) -> None:
        self.start = self.last = time.perf_counter()
        self.step_seconds: list[float] = []
        self.plan_versions: list[int] = []
        self._running = enforcer.plan_version()
        self.gate = None if gate is None else Gate(gate)

    def turn(self, step: int) -> None:
        """Step ``step`` starts: with ``--gate``, once its turn has come; its time counts from then."""
        if self.gate is not None:
            self.gate.wait(step)
            self.last = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        self.step_seconds.append(now - self.last)
        self.plan_versions.append(self._running)
        # Plans switch only in enforcer.step(), at the step's end: what runs now is the next step's.
        self._running = enforcer.plan_version()
        self.last = now

    def steps_under_a_plan(self) -> int:
        """Steps since the first one that ran a plan (0 before any did)."""
        first = next((k for k, version in enumerate(self.plan_versions) if version > 0), None)
        return 0 if first is None else len(self.plan_versions) - first

    def elapsed(self) -> float:
        """Seconds since the clock started (before the first step)."""
        return time.perf_counter() - self.start

    def as_json(self) -> dict:
        return {"step_seconds": self.step_seconds, "plan_versions": self.plan_versions}


def add_loop_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the shared loop (:func:`train`) beyond :func:`parse_args`'s."""
    parser.add_argument("--after-plan", type=_count, metavar="N",
                        help="end N steps after the first step that ran a plan the optimizer service committed "
                             "(P2_SERVICE), or at --steps")


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def train(args: argparse.Namespace, build_model: Callable[[], nn.Module], width: int,
          after_backward: Callable[[nn.Module], None] | None = None) -> dict:
    """The shared loop: ``--steps`` steps of SGD on ``build_model()`` (or fewer with ``--after-plan``);
    ``after_backward(model)`` runs between each backward pass and the step's end (:func:`finish_step`)."""
    torch.manual_seed(MODEL_SEED)
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    batches = synthetic_batches(dist.get_rank(), width)
    losses = []
    clock = StepClock(args.gate)
    for step in range(1, args.steps + 1):
        clock.turn(step)
        inputs, targets = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        if after_backward is not None:
            after_backward(model)
        losses.append(finish_step(step, loss, [optimizer]))
        clock.tick()
        if args.after_plan is not None and clock.steps_under_a_plan() > args.after_plan:
            break
    return {**summary(args, losses, clock.elapsed()), **clock.as_json()}


def write_json(path: str, result: dict) -> None:
    partial = f"{path}.partial"
    with open(partial, "w") as out:
        json.dump(result, out, indent=2)
        out.write("\n")
    os.replace(partial, path)


def run(args: argparse.Namespace, train_job: Callable[[argparse.Namespace], dict],
        check: Callable[[argparse.Namespace], str | None] | None = None) -> int:
    """A script's life: check the flags, join the env:// world, ``train_job``, leave, rank 0 writes the JSON.

    A problem with the backend (or one ``check`` names) is one line on stderr
    and exit code 2, before any rendezvous.
    """
    problem = backend_problem(args.backend) or (check(args) if check is not None else None)
    if problem:
        print(f"{os.path.basename(sys.argv[0])}: error: {problem}", file=sys.stderr)
        return 2
    dist.init_process_group(backend=args.backend)
    try:
        rank = dist.get_rank()
        result = train_job(args)
    finally:
        # A wrapped model (FSDP2's especially) lives on in reference cycles that hold the
        # process group. Collect it so the group goes down here: left to interpreter exit,
        # about 1 FSDP2 run in 10 aborted with "terminate called without an active exception"
        # (torch 2.13, gloo, CPU; 0 in 60 with this).
        gc.collect()
        dist.destroy_process_group()
    if args.json and rank == 0:
        write_json(args.json, result)
    return 0


def main(description: str, build_model: Callable[[], nn.Module], width: int, argv: list[str] | None = None) -> int:
    """A DDP or FSDP2 script: the shared flags (and ``--after-plan``), then :func:`run` of :func:`train`."""
    return run(parse_args(description, argv, add_loop_flags), lambda args: train(args, build_model, width))
