"""The pipeline workloads of ``p2 optimize`` (Zhuang et al., MLSys 2023, §4 and
§5.2): a pipeline schedule's compute and its cross-mesh resharding as a
training DAG (:func:`optimizer_service.syndicate.pipeline_dag.pipeline_dag`),
so Syndicate's joint optimizer and the baselines of §6.4 order the
resharding motifs with the stages' compute.

They live in the shell because they join two pure packages that may not
import each other: :mod:`optimizer_service.resharding` plans every boundary's
transfer, :mod:`optimizer_service.syndicate` schedules the result.

* ``pipeline-gpt`` — a GPT-like stack (:func:`~optimizer_service.resharding.pipeline_costs.gpt_like`):
  each stage sends its output to the next one;
* ``pipeline-u-transformer`` — a U-Transformer-like network
  (:func:`~optimizer_service.resharding.pipeline_costs.u_transformer_like`):
  also a skip edge from stage ``i`` to stage ``S-1-i``, carrying a map
  :data:`SKIP_FACTOR` times the activation (higher resolution).

:data:`STAGES` stages, stage ``s`` a ``1 x 4`` mesh on the first devices of
host ``s``. Every edge's activation ``(micro-batch, sequence, hidden)``
(:data:`ACTIVATION`, fp32) moves ``S^0RR`` → ``S^0RR`` forward and its
gradient the same way back: on a ``1 x 4`` mesh ``S^0`` splits over the
mesh's one row, so every device of a stage holds the whole tensor (the
operator-parallel devices replicate it, §5.2), and the resharding planner
(:func:`~optimizer_service.resharding.planner.plan_resharding`, the
ensemble) makes it one broadcast-based unit task from a device of the sender
to the four of the receiver. Every task of the planned program becomes one
Broadcast motif (sender first, then the receivers), which Syndicate may
split into halves, segment and put on any channel.

Compute per micro-batch and stage (:data:`FORWARD_SECONDS`,
:data:`BACKWARD_SECONDS`) is sized for the emulated cluster's 200 Mbit/s NIC,
so that a boundary transfer is a large fraction of a forward, as in the
paper's U-Transformer (our choice, the same as ``benchmarks/resharding.py``'s
simulated pipeline). The description also gives the pipeline simulator's
iteration time with the planner's transfer times
(:func:`~optimizer_service.resharding.pipeline_sim.simulate`: a channel per
directed edge), the reference for the systems' predictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optimizer_service.cli.reshard import emulated_topology
from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES
from optimizer_service.plan.pipeline import PipelineSchedule
from optimizer_service.resharding.mesh import Mesh
from optimizer_service.resharding.pipeline_costs import PipelineCosts, gpt_like, u_transformer_like
from optimizer_service.resharding.pipeline_schedules import build_schedule
from optimizer_service.resharding.pipeline_sim import simulate
from optimizer_service.resharding.planner import ReshardPlan, plan_resharding
from optimizer_service.syndicate.dag import TrainingDAG
from optimizer_service.syndicate.pipeline_dag import BoundaryMotifs, broadcasts, pipeline_dag

#: Workload name -> the stage profile it uses.
PIPELINE_WORKLOADS = {"pipeline-gpt": "gpt", "pipeline-u-transformer": "u-transformer"}
STAGES = 4
MESH = (1, 4)
DEFAULT_SCHEDULE = "eager-1f1b"
DEFAULT_MICROBATCHES = 8
#: One micro-batch's activation, (micro-batch, sequence, hidden), fp32.
ACTIVATION = (8, 256, 1024)
#: The U-Transformer's skip edges carry maps this many times larger (along the micro-batch dimension).
SKIP_FACTOR = 2
SKIP_SHAPE = (ACTIVATION[0] * SKIP_FACTOR, *ACTIVATION[1:])
CHAIN = [(s, s + 1) for s in range(STAGES - 1)]
SPEC = "S^0RR"
FORWARD_SECONDS = 0.25
BACKWARD_SECONDS = 0.50
#: The emulated cluster the pipeline workloads default to: a host per stage, a device per mesh column.
DEFAULT_TOPOLOGY_NAME = f"emulated-{STAGES}x{MESH[1]}"


def is_pipeline_workload(name: str | None) -> bool:
    return name in PIPELINE_WORKLOADS


def default_topology() -> Topology:
    """The emulated 4 x 4 cluster (200 Mbit/s NIC, 1 GB/s loopback)."""
    return emulated_topology(STAGES, MESH[1])      # named DEFAULT_TOPOLOGY_NAME


def stage_mesh(stage: int, topology: Topology) -> Mesh:
    """Stage ``stage``'s ``1 x 4`` mesh: the first devices of host ``stage``."""
    first = stage * topology.devices_per_instance(0)
    return Mesh(MESH, tuple(first + k for k in range(math.prod(MESH))))


def check_fits(name: str, topology: Topology) -> None:
    hosts, per_host = topology.hierarchy[0], topology.devices_per_instance(0)
    if len(topology.levels) < 2 or hosts < STAGES or per_host < MESH[1]:
        raise InvalidInputError(f"workload {name} puts {STAGES} stages on {STAGES} hosts of at least {MESH[1]} "
                                f"devices, but topology {topology.name!r} has {hosts} of {per_host}; pass a larger "
                                f"--topology or leave it out (the emulated {STAGES} x {MESH[1]} cluster)")


@dataclass(frozen=True)
class PipelineWorkload:
    """A built pipeline workload: its DAG, the schedule and stage profile it
    comes from (with the planner's transfer times), the planned reshardings
    per directed edge ``(from, to)``, and the simulator's iteration time."""

    dag: TrainingDAG
    schedule: PipelineSchedule
    costs: PipelineCosts
    transfers: dict[tuple[int, int], tuple[ReshardPlan, ...]]
    simulated_seconds: float


def _plan(shape: tuple[int, ...], src: int, dst: int, topology: Topology) -> ReshardPlan:
    return plan_resharding(shape, SPEC, stage_mesh(src, topology), SPEC, stage_mesh(dst, topology), topology,
                           algorithm="ensemble")


def _motifs(plans: tuple[ReshardPlan, ...]) -> tuple:
    """Every planned task as a Broadcast motif over global ranks (payload in the motifs' 4-byte elements)."""
    tasks = []
    for plan in plans:
        element_bytes = plan.program.element_bytes
        for task in plan.program.tasks:
            elements = -(-task.box.elements * element_bytes // DEFAULT_ELEMENT_BYTES)
            tasks.append(((task.sender, *task.receivers), elements))
    return broadcasts(tasks)


def workload_costs(name: str, topology: Topology) -> tuple[PipelineCosts, dict[tuple[int, int], tuple[ReshardPlan, ...]]]:
    """The stage profile of workload ``name`` with the planner's transfer
    times, and the planned reshardings per directed edge ``(from, to)``."""
    if name not in PIPELINE_WORKLOADS:
        raise InvalidInputError(f"unknown pipeline workload {name!r}; known: {', '.join(PIPELINE_WORKLOADS)}")
    check_fits(name, topology)
    profile = PIPELINE_WORKLOADS[name]
    transfers: dict[tuple[int, int], list[ReshardPlan]] = {}
    for edges, shape in ((CHAIN, ACTIVATION), (skip_edges(name), SKIP_SHAPE)):
        for a, b in edges:
            transfers.setdefault((a, b), []).append(_plan(shape, a, b, topology))
            transfers.setdefault((b, a), []).append(_plan(shape, b, a, topology))
    planned = {edge: tuple(plans) for edge, plans in transfers.items()}
    seconds = {edge: [p.predicted_seconds for p in plans] for edge, plans in planned.items()}
    forward = [seconds[edge][0] for edge in CHAIN]
    backward = [seconds[(b, a)][0] for a, b in CHAIN]
    activation_bytes = 4 * math.prod(ACTIVATION)
    if profile == "gpt":
        return gpt_like(STAGES, FORWARD_SECONDS, BACKWARD_SECONDS, forward, backward, activation_bytes), planned
    skip = [seconds[edge][-1] for edge in skip_edges(name)]   # each way alike: the profile takes one value per skip edge
    return u_transformer_like(STAGES, FORWARD_SECONDS, BACKWARD_SECONDS, forward, skip, backward,
                              activation_bytes), planned


def skip_edges(name: str) -> list[tuple[int, int]]:
    """The U-Transformer's long skip edges ``(i, S-1-i)``; none for GPT."""
    if PIPELINE_WORKLOADS[name] != "u-transformer":
        return []
    return [(i, STAGES - 1 - i) for i in range(STAGES) if i < STAGES - 1 - i]


def build_pipeline_workload(name: str, topology: Topology, schedule_name: str = DEFAULT_SCHEDULE,
                            microbatches: int = DEFAULT_MICROBATCHES) -> PipelineWorkload:
    """The workload ``name`` (:data:`PIPELINE_WORKLOADS`) on ``topology`` (module docstring)."""
    costs, planned = workload_costs(name, topology)
    profile = PIPELINE_WORKLOADS[name]
    chain, skips = CHAIN, skip_edges(name)
    seconds = {edge: [p.predicted_seconds for p in plans] for edge, plans in planned.items()}
    schedule = build_schedule(schedule_name, STAGES, microbatches, costs)
    boundaries = [BoundaryMotifs(a, b, _motifs(planned[(a, b)]), _motifs(planned[(b, a)]))
                  for a, b in sorted({*chain, *skips})]
    simulated = simulate(schedule, costs).iteration_seconds
    edges = ", ".join(f"{a}>{b} {sum(seconds[(a, b)]) * 1e3:.3g} ms" for a, b in sorted({*chain, *skips}))
    motifs = sum(len(b.forward) + len(b.backward) for b in boundaries)
    description = (f"{name}: {profile}-like, {STAGES} stages of {MESH[0]}x{MESH[1]} meshes (a host each), "
                   f"{schedule.name} x {microbatches} micro-batches, F {FORWARD_SECONDS * 1e3:g} ms "
                   f"B {BACKWARD_SECONDS * 1e3:g} ms; activation {'x'.join(map(str, ACTIVATION))} {SPEC} -> "
                   f"{SPEC}, {motifs} broadcast motifs per micro-batch, planned ({edges}); simulated "
                   f"{simulated * 1e3:.0f} ms per iteration (a channel per edge)")
    dag = pipeline_dag(schedule, costs.seconds, boundaries, name)
    return PipelineWorkload(TrainingDAG(dag.name, dag.nodes, description), schedule, costs, planned, simulated)
