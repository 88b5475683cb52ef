"""Cross-mesh resharding and pipeline schedules (Zhuang et al., MLSys 2023:
sharding specs and unit tasks §2–3.1, load balancing §3.2, eager-1F1B §4).

The resharding planner, one idea per module, what → how → lowered:

* :mod:`.mesh` — device meshes (``2x4`` or ``[[0,1],[2,3]]``) and their
  placement on a topology's hosts;
* :mod:`.spec` — sharding specs (``S^0RR``) and the slice each device holds
  (uneven shards padded, the pad never sent);
* :mod:`.unit_tasks` — App. B.2's decomposition into unit tasks;
* :mod:`.strategies` — §3.1's strategies for one unit task, priced with
  :class:`~optimizer_service.hardware.cost_model.CostModel`;
* :mod:`.schedule` — §3.2's problem (Eq. 1–3), schedules and their timing;
  :mod:`.solvers` and :mod:`.dfs` — naive, load balance, DFS, randomized
  greedy, ensemble (AlpaComm), swappable behind one signature;
* :mod:`.bounds` — the NIC lower bound;
* :mod:`.request`, :mod:`.planner` — a request in, a :class:`ReshardPlan` out,
  lowered to the :class:`~optimizer_service.plan.resharding.ReshardProgram`
  the enforcer runs;
* :mod:`.cases` — Table 2's micro-benchmark cases.

Pipeline schedules (§4), on the contract's
:class:`~optimizer_service.plan.pipeline.PipelineSchedule`:

* :mod:`.pipeline_schedules` — GPipe, 1F1B, eager-1F1B and eager-1F1B with
  backward weight delaying;
* :func:`check_schedule` (re-exported from the contract's
  :mod:`optimizer_service.plan.pipeline_validate`, which the enforcer shares)
  — structure checks and a dry run that renders the stage × step grid with
  ``<-- ERROR HERE``;
* :mod:`.pipeline_costs` — per-stage compute and per-edge communication
  (GPT-like and U-Transformer-like profiles);
* :mod:`.pipeline_sim` — the simulator: iteration time, bubbles, activation
  memory per stage.

May import: ``hardware``, ``plan`` (and ``errors``, ``units``).
"""

from optimizer_service.plan.pipeline_validate import ScheduleError, check_schedule
from optimizer_service.resharding.bounds import LowerBound, host_bandwidth, lower_bound, lower_bound_seconds
from optimizer_service.resharding.cases import PAPER_SHAPE, TABLE2_CASES, ReshardCase, scaled_shape, table2_case
from optimizer_service.resharding.mesh import Mesh, host_of, parse_mesh, parse_mesh_shape, place_meshes
from optimizer_service.resharding.planner import (
    ALGORITHMS,
    PreparedResharding,
    ReshardPlan,
    plan_prepared,
    plan_request,
    plan_resharding,
    prepare,
)
from optimizer_service.resharding.pipeline_costs import CommEdge, PipelineCosts, StageCost, gpt_like, u_transformer_like
from optimizer_service.resharding.pipeline_schedules import SCHEDULE_NAMES, build_schedule
from optimizer_service.resharding.pipeline_sim import PipelineTimeline, simulate
from optimizer_service.resharding.request import ReshardRequest, build_request, request_from_endpoints
from optimizer_service.resharding.schedule import (
    Schedule,
    ScheduleProblem,
    SearchBudget,
    SolveResult,
    Timeline,
    evaluate,
)
from optimizer_service.resharding.solvers import SOLVERS, solve
from optimizer_service.resharding.spec import DimSharding, ShardingSpec, parse_endpoint
from optimizer_service.resharding.strategies import TaskPrice, UnitTaskPricer
from optimizer_service.resharding.unit_tasks import UnitTask, decompose

__all__ = [
    "ALGORITHMS", "CommEdge", "DimSharding", "PipelineCosts", "PipelineTimeline", "SCHEDULE_NAMES",
    "ScheduleError", "StageCost", "build_schedule", "check_schedule", "gpt_like", "simulate",
    "u_transformer_like", "LowerBound", "Mesh", "PAPER_SHAPE", "PreparedResharding", "ReshardCase",
    "ReshardPlan", "ReshardRequest", "SOLVERS", "Schedule", "ScheduleProblem", "SearchBudget", "ShardingSpec",
    "SolveResult", "TABLE2_CASES", "TaskPrice", "Timeline", "UnitTask", "UnitTaskPricer", "build_request",
    "decompose", "evaluate", "host_bandwidth", "host_of", "lower_bound", "lower_bound_seconds", "parse_endpoint",
    "parse_mesh", "parse_mesh_shape", "place_meshes", "plan_prepared", "plan_request", "plan_resharding",
    "prepare", "request_from_endpoints", "scaled_shape", "solve", "table2_case",
]
