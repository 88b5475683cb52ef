"""The plan contract: what the data plane executes (pure).

The only part of the optimizer the enforcer may import. It holds the values
both planes share:

* :class:`Collective` — the one enum of collectives (P² §3.2's five and
  Syndicate's AllToAll);
* motifs and their compositions (:class:`Motif`, :class:`Seq`, :class:`Par`;
  Syndicate §4.2), their text form and parser;
* lowered P² programs (:class:`LoweredStep`, :class:`LoweredProgram`; P²
  Figure 6) and their data layout on a flat tensor;
* the installed plan (:class:`OpKey`, :class:`OpPlan`, :class:`Plan`;
  Syndicate §4.4, Pseudocode 2), its numeric check and its JSON codec;
* the trace schema the enforcer writes and the optimizer reads;
* lowered cross-mesh resharding programs (:mod:`.resharding`: ``Box``,
  ``ReshardTask``, ``ReshardProgram``) and pipeline schedules
  (:mod:`.pipeline`: ``Action`` ``"2F0"``, ``PipelineSchedule``; Zhuang et
  al., MLSys 2023), and the one validator of a schedule both planes run
  (:mod:`.pipeline_validate`: structure checks and a unit-step dry run that
  finds deadlocks, ``check_schedule``, ``ScheduleError``).

May import: nothing of ``optimizer_service`` but ``errors`` and ``units``.
"""

from optimizer_service.errors import InvalidInputError, LayoutError, PlanError
from optimizer_service.plan.collective import P2_COLLECTIVES, Collective
from optimizer_service.plan.lowered import LoweredProgram, LoweredStep
from optimizer_service.plan.motif import Composition, Motif, Par, Seq, motifs_of
from optimizer_service.plan.motif_text import parse_composition, parse_motif
from optimizer_service.plan.op_plan import PLAN_KIND, OpKey, OpPlan
from optimizer_service.plan.plan import Plan

__all__ = [
    "P2_COLLECTIVES", "PLAN_KIND", "Collective", "Composition", "InvalidInputError", "LayoutError",
    "LoweredProgram", "LoweredStep", "Motif", "OpKey", "OpPlan", "Par", "Plan", "PlanError", "Seq",
    "motifs_of", "parse_composition", "parse_motif",
]
