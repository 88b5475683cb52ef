"""Pipeline-parallel training of a small MLP with cross-mesh resharding at the
stage boundaries (Zhuang et al., MLSys 2023, §4 and §5.2): 1F1B against eager-1F1B.

    .venv/bin/python examples/train_pipeline.py --schedule eager-1f1b        # 8 local ranks on loopback
    p2 cluster run --name pipe -- .venv/bin/python examples/train_pipeline.py --schedule 1f1b --json 1f1b.json

The model is ``--stages`` stages of ``--layers`` × (Linear(H, H), ReLU), the
last one ending in Linear(H, 1). The world's ranks are cut into ``--stages``
consecutive meshes (on the emulated cluster: one node's ranks per stage, rank
``r`` on node ``r // per_node``); each stage's module is replicated on its
mesh and each micro-batch's activation, ``(batch / microbatches) × H``, is
``S^0R`` over it — rows sharded, data parallel inside the stage. Every rank
plans the two resharding programs of every boundary with the optimizer's
planner (activation ``S^0R`` on mesh ``s`` → ``S^0R`` on mesh ``s+1``, and its
gradient back; deterministic, so all ranks plan the same) and the enforcer's
:class:`~enforcer.pipeline.runtime.PipelineRuntime` runs the schedule: the training
thread computes, one thread per boundary and direction moves the tensors.
After the last micro-batch the weight gradients are summed inside each stage
mesh and SGD steps.

Each step's batch is drawn from a fixed seed (the same on every rank; each
rank takes its rows), the targets from a fixed random "teacher", so losses
match across schedules bit for bit. ``--schedule 1f1b,eager-1f1b`` trains
both side by side, each its own copy of the model on the same batches, taking
turns step by step (who goes first rotates): on a shared machine that is the
fair comparison. Without a launcher (no ``RANK``) it starts ``stages ×
--per-node`` local ranks; under ``p2 cluster run`` or ``torchrun`` each
process is one rank.

Rank 0 prints per step its time (the slowest rank's, from the barrier that
starts it) and the loss, then per schedule a summary; ``--json OUT`` writes,
per schedule, ``schedule``, ``schedule_text``, ``stages``, ``microbatches``,
``world_size``, ``meshes``, ``hidden``, ``layers``, ``batch``,
``activation_bytes`` (one micro-batch's whole activation),
``predicted_transfer_seconds`` (the planner's, per boundary and direction),
``nic_floor_seconds`` (the busiest node's outgoing bytes per step over the
NIC rate: no schedule beats it), ``step_seconds``, ``median_seconds`` (steps
after the first), ``median_actions_end_seconds`` (until the last action ended
on the slowest rank, before the gradient all-reduce), ``losses``,
``cores_busy`` (all ranks' CPU seconds per step over its wall time),
``stage_busy_seconds`` (median per stage of its ranks' compute time in a
step), ``stage_action_seconds`` (median duration of each action kind per
stage), ``simulated_seconds`` (the planner's simulator run with those
durations and the predicted transfers) and ``records`` (the last step's
:class:`~enforcer.pipeline.records.IterationRecord` of every rank, as text).
With several schedules the document is ``{"interleaved": true, "runs": [one
per schedule], "median_ratio_to_first": {name: median / the first's}}``.

Defaults (``--hidden 256 --layers 4 --batch 1024 --microbatches 8``) are sized
for the emulated 4 × 2 cluster (200 Mbit/s NIC, 8 ranks on the machine's 2
cores): one micro-batch's activation (128 × 256 float32, 128 KiB, 5.4 ms on
the NIC) against a stage's forward and backward of about 2 ms on a rank —
the transfer comparable to the compute, where eager-1F1B's extra warm-up
forwards should pay. What was measured, and why eager-1F1B does not win
there (a middle node's NIC carries both its activations and its gradients):
``examples/README.md``, "Pipeline parallelism".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from deploy.emulated.model import cluster_topology
from enforcer.pipeline.runtime import PipelineRuntime
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.pipeline import ActionKind, PipelineSchedule
from optimizer_service.plan.resharding import ReshardProgram
from optimizer_service.resharding.mesh import Mesh
from optimizer_service.resharding.pipeline_costs import CommEdge, PipelineCosts, StageCost
from optimizer_service.resharding.pipeline_schedules import SCHEDULE_NAMES, build_schedule
from optimizer_service.resharding.pipeline_sim import simulate
from optimizer_service.resharding.planner import ALGORITHMS, plan_resharding

MODEL_SEED = 1234
DATA_SEED = 5678
#: The emulated cluster's links (``p2 cluster up --nic 200Mbit/s``): what the planner prices transfers with.
NIC_RATE = 200e6 / 8
LOOPBACK_RATE = 1e9


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedule", default="eager-1f1b", metavar="NAME[,NAME...]",
                        help=f"pipeline schedule ({', '.join(SCHEDULE_NAMES)}; default eager-1f1b); several, "
                             "comma-separated, train side by side taking turns step by step")
    parser.add_argument("--stages", type=int, default=4, help="pipeline stages (default 4)")
    parser.add_argument("--microbatches", type=int, default=8, help="micro-batches per step (default 8)")
    parser.add_argument("--steps", type=int, default=6, help="training steps (default 6; the first is warm-up)")
    parser.add_argument("--hidden", type=int, default=256, help="width H of every layer (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="Linear+ReLU layers per stage (default 4)")
    parser.add_argument("--batch", type=int, default=1024, help="rows per step (default 1024)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--per-node", type=int, default=int(os.environ.get("LOCAL_WORLD_SIZE", "2")),
                        help="ranks per node (default $LOCAL_WORLD_SIZE, else 2); without a launcher the local "
                             "world is stages x per-node ranks")
    parser.add_argument("--algo", choices=ALGORITHMS, default="ensemble", help="resharding load-balance algorithm")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank (default 1)")
    parser.add_argument("--backend", default=os.environ.get("P2_EXAMPLE_BACKEND", "gloo"))
    parser.add_argument("--json", dest="json_out", metavar="OUT", help="rank 0 writes the results here")
    args = parser.parse_args(argv)
    for name in ("stages", "microbatches", "steps", "hidden", "layers", "batch", "per_node", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    args.schedules = [name.strip() for name in args.schedule.split(",") if name.strip()]
    unknown = [name for name in args.schedules if name not in SCHEDULE_NAMES]
    if unknown or not args.schedules or len(set(args.schedules)) != len(args.schedules):
        parser.error(f"--schedule {args.schedule!r}: give distinct names out of {', '.join(SCHEDULE_NAMES)}")
    if args.batch % args.microbatches:
        parser.error(f"--batch {args.batch} is not a multiple of --microbatches {args.microbatches}")
    return args


def stage_meshes(world: int, stages: int) -> list[list[int]]:
    """``stages`` meshes of consecutive ranks."""
    if world % stages:
        raise InvalidInputError(f"{world} ranks do not split into {stages} equal stage meshes; use a world size "
                                f"that is a multiple of --stages")
    size = world // stages
    return [list(range(s * size, (s + 1) * size)) for s in range(stages)]


def shard_rows(rows: int, mesh: list[int], rank: int) -> slice:
    """The rows of a micro-batch ``rank`` holds under ``S^0R`` on ``mesh``
    (ceil-sized chunks, the spec's layout: what the boundary programs move)."""
    size = -(-rows // len(mesh))
    start = min(rows, mesh.index(rank) * size)
    return slice(start, min(rows, start + size))


def boundary_plans(meshes: list[list[int]], rows: int, hidden: int, per_node: int, algorithm: str):
    """Per boundary the forward and backward resharding plans of the ``S^0R`` activation."""
    ranks = sum(len(m) for m in meshes)
    nodes = -(-ranks // per_node)
    name = f"emulated-{nodes}x{per_node}"
    topology = Topology.from_yaml(cluster_topology(name, nodes, per_node, NIC_RATE, None, LOOPBACK_RATE),
                                  source=name)
    forward, backward = [], []
    for a, b in itertools.pairwise(meshes):
        for plans, src, dst in ((forward, a, b), (backward, b, a)):
            plans.append(plan_resharding((rows, hidden), "S^0R", Mesh.grid(src), "S^0R", Mesh.grid(dst),
                                         topology, algorithm=algorithm, element_bytes=4))
    return forward, backward


def nic_floor_seconds(programs: list[ReshardProgram], microbatches: int, per_node: int) -> float:
    """The busiest node's outgoing bytes in one step over the NIC rate: a bound
    no schedule beats (a node's NIC carries both its stage's activations to the
    next stage and its input gradients to the previous one). Every hop of a
    task's chain that leaves a node counts at the node it leaves."""
    egress: dict[int, int] = {}
    for program in programs:
        for task in program.tasks:
            hops = zip((task.sender, *task.receivers), task.receivers)
            for a, b in hops:
                if a // per_node != b // per_node:
                    egress[a // per_node] = egress.get(a // per_node, 0) + task.box.elements * program.element_bytes
    return max(egress.values(), default=0) * microbatches / NIC_RATE


def build_stages(stages: int, hidden: int, layers: int) -> list[nn.Sequential]:
    """All stages, from one seed (every rank builds them alike and keeps its own)."""
    torch.manual_seed(MODEL_SEED)
    modules = []
    for s in range(stages):
        parts: list[nn.Module] = []
        for _ in range(layers):
            parts += [nn.Linear(hidden, hidden), nn.ReLU()]
        if s == stages - 1:
            parts.append(nn.Linear(hidden, 1))
        modules.append(nn.Sequential(*parts))
    return modules


def make_batch(step: int, batch: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s inputs and a fixed teacher's targets (identical on every rank)."""
    teacher = torch.Generator().manual_seed(DATA_SEED)
    direction = torch.randn(hidden, 1, generator=teacher) / hidden ** 0.5
    gen = torch.Generator().manual_seed(DATA_SEED + 1 + step)
    x = torch.randn(batch, hidden, generator=gen)
    return x, torch.tanh(3 * x @ direction)


@dataclass
class _Run:
    """One schedule's model copy, runtime, optimizer and what it measured on this rank."""

    name: str
    schedule: PipelineSchedule
    module: nn.Module
    runtime: PipelineRuntime
    optimizer: torch.optim.Optimizer
    records: list = field(default_factory=list)
    cpu_seconds: list = field(default_factory=list)

    def results(self, rank: int, stage: int) -> dict:
        records = self.records
        return {"rank": rank, "stage": stage, "seconds": [r.seconds for r in records], "cpu": self.cpu_seconds,
                "last_action": [r.actions[-1].end if r.actions else 0.0 for r in records],
                "losses": [r.loss for r in records], "busy": [r.busy_seconds for r in records],
                "actions": {kind.value: [a.seconds for r in records[1:] or records for a in r.actions
                                         if a.action.kind is kind] for kind in ActionKind},
                "record": str(records[-1])}


def run_rank(config: dict) -> dict:
    """One rank's training; returns what rank 0 summarizes. With several
    schedules, each trains its own copy of the model on the same batches and
    the schedules take turns step by step (who goes first rotates), so a
    shared machine's load drifts over all of them alike."""
    torch.set_num_threads(config["threads"])
    rank, world = dist.get_rank(), dist.get_world_size()
    stages, count, hidden, batch_rows = config["stages"], config["microbatches"], config["hidden"], config["batch"]
    rows = batch_rows // count
    meshes = stage_meshes(world, stages)
    forward, backward = boundary_plans(meshes, rows, hidden, config["per_node"], config["algo"])
    stage = next(s for s, mesh in enumerate(meshes) if rank in mesh)
    runs = []
    for name in config["schedules"]:
        module = build_stages(stages, hidden, config["layers"])[stage]
        schedule = build_schedule(name, stages, count)
        runtime = PipelineRuntime(schedule, meshes, module, [p.program for p in forward],
                                  [p.program for p in backward],
                                  loss_fn=lambda out, y: ((out - y) ** 2).sum() / batch_rows)
        runs.append(_Run(name, schedule, module, runtime, torch.optim.SGD(module.parameters(), lr=config["lr"])))
    mine = shard_rows(rows, meshes[stage], rank)
    try:
        for step in range(config["steps"]):
            x, y = make_batch(step, batch_rows, hidden)
            inputs = [x[m * rows:(m + 1) * rows][mine] for m in range(count)] if stage == 0 else None
            targets = [y[m * rows:(m + 1) * rows][mine] for m in range(count)] if stage == stages - 1 else None
            for turn in range(len(runs)):
                run = runs[(step + turn) % len(runs)]
                run.optimizer.zero_grad(set_to_none=True)
                cpu = time.process_time()
                run.records.append(run.runtime.run(inputs, targets))
                run.cpu_seconds.append(time.process_time() - cpu)
                run.optimizer.step()
    finally:
        for run in runs:
            run.runtime.close()
    gathered: list = [None] * world
    dist.all_gather_object(gathered, {run.name: run.results(rank, stage) for run in runs})
    if rank != 0:
        return {}
    return {"ranks": gathered, "meshes": meshes, "schedules": {run.name: str(run.schedule) for run in runs},
            "nic_floor": nic_floor_seconds([p.program for p in forward + backward], count, config["per_node"]),
            "predicted": {"forward": [p.predicted_seconds for p in forward],
                          "backward": [p.predicted_seconds for p in backward]}}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def summarize(config: dict, gathered: dict, name: str) -> dict:
    """Schedule ``name``'s JSON document (module docstring) from every rank's results."""
    ranks, stages = [per_rank[name] for per_rank in gathered["ranks"]], config["stages"]
    steps = config["steps"]
    step_seconds = [max(r["seconds"][k] for r in ranks) for k in range(steps)]
    losses = [sum(r["losses"][k] for r in ranks if r["stage"] == stages - 1) for k in range(steps)]
    cores = [sum(r["cpu"][k] for r in ranks) / step_seconds[k] for k in range(steps)]
    actions_end = [max(r["last_action"][k] for r in ranks) for k in range(steps)]
    later = slice(1, None) if steps > 1 else slice(None)
    busy, action_seconds = [], []
    for s in range(stages):
        mesh = [r for r in ranks if r["stage"] == s]
        busy.append(_median([b for r in mesh for b in r["busy"][later]]))
        action_seconds.append({kind: _median([t for r in mesh for t in r["actions"][kind]])
                               for kind in ("F", "B", "I", "W") if any(r["actions"][kind] for r in mesh)})
    schedule = PipelineSchedule.parse(gathered["schedules"][name])
    predicted = gathered["predicted"]
    costs = PipelineCosts("measured", tuple(
        StageCost(a.get("F", 0.0), a.get("B", a.get("I", 0.0)), a.get("W", 0.0)) for a in action_seconds),
        tuple(CommEdge(s, s + 1, predicted["forward"][s], predicted["backward"][s]) for s in range(stages - 1)))
    rows = config["batch"] // config["microbatches"]
    return {"schedule": name, "schedule_text": gathered["schedules"][name], "stages": stages,
            "microbatches": config["microbatches"], "world_size": len(ranks), "meshes": gathered["meshes"],
            "hidden": config["hidden"], "layers": config["layers"], "batch": config["batch"],
            "activation_bytes": rows * config["hidden"] * 4, "predicted_transfer_seconds": predicted,
            "nic_floor_seconds": gathered["nic_floor"], "steps": steps, "step_seconds": step_seconds,
            "median_seconds": _median(step_seconds[later]), "median_actions_end_seconds": _median(actions_end[later]),
            "losses": losses, "cores_busy": _median(cores[later]), "stage_busy_seconds": busy,
            "stage_action_seconds": action_seconds,
            "simulated_seconds": simulate(schedule, costs).iteration_seconds,
            "records": [r["record"] for r in ranks]}


def describe(summary: dict) -> str:
    busy = ", ".join(f"{b * 1e3:.1f}" for b in summary["stage_busy_seconds"])
    transfer = summary["predicted_transfer_seconds"]["forward"]
    return (f"{summary['schedule']}: {summary['stages']} stages x {summary['microbatches']} micro-batches on "
            f"{summary['world_size']} ranks, activation {summary['activation_bytes'] / 1024:.1f} KiB per micro-batch "
            f"(predicted transfer {max(transfer, default=0) * 1e3:.1f} ms, NIC floor of a step "
            f"{summary['nic_floor_seconds'] * 1e3:.1f} ms); median step {summary['median_seconds'] * 1e3:.1f} ms "
            f"(simulated {summary['simulated_seconds'] * 1e3:.1f} ms); stage busy {busy} ms; "
            f"{summary['cores_busy']:.2f} cores busy")


def document(summaries: list[dict]) -> dict:
    """One schedule: its summary; several: ``{"interleaved": true, "runs": [...],
    "median_ratio_to_first": {name: median / first's median}}``."""
    if len(summaries) == 1:
        return summaries[0]
    first = summaries[0]["median_seconds"]
    return {"interleaved": True, "runs": summaries,
            "median_ratio_to_first": {s["schedule"]: s["median_seconds"] / first if first else None
                                      for s in summaries}}


def report(summaries: list[dict], json_out: str | None) -> None:
    names = [s["schedule"] for s in summaries]
    for k in range(len(summaries[0]["step_seconds"])):
        times = "  ".join(f"{s['step_seconds'][k] * 1e3:8.1f} ms" for s in summaries)
        print(f"step {k} {times}  loss {summaries[0]['losses'][k]:.6f}" + (f"  ({', '.join(names)})"
                                                                          if len(names) > 1 else ""))
    for summary in summaries:
        print(describe(summary))
    doc = document(summaries)
    if "median_ratio_to_first" in doc:
        print("median step over " + names[0] + "'s: " + ", ".join(
            f"{name} {ratio:.3f}" for name, ratio in doc["median_ratio_to_first"].items() if ratio is not None))
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=1))


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    config = {k: getattr(args, k) for k in ("schedules", "stages", "microbatches", "steps", "hidden", "layers",
                                             "batch", "lr", "per_node", "algo", "threads")}
    if "RANK" in os.environ:                      # p2 cluster run / torchrun: this process is one rank
        dist.init_process_group(args.backend)
        try:
            try:
                gathered = run_rank(config)
            except InvalidInputError as error:
                print(f"error: {error}", file=sys.stderr)
                return 2
            if dist.get_rank() == 0:
                report([summarize(config, gathered, name) for name in args.schedules], args.json_out)
            dist.barrier()
        finally:
            dist.destroy_process_group()
        return 0
    try:
        stage_meshes(args.stages * args.per_node, args.stages)
    except InvalidInputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from deploy.local_world import run_world
    results = run_world(args.stages * args.per_node, run_rank, config, backend=args.backend)
    report([summarize(config, results[0], name) for name in args.schedules], args.json_out)
    return 0

if __name__ == "__main__":
    sys.exit(main())
