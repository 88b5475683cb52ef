"""A pipeline schedule as a training DAG for Syndicate's scheduler (Zhuang et
al., MLSys 2023, §4; Syndicate §4.3): each stage's compute actions and the
cross-mesh resharding between stages as comm-ops, so ``p2 optimize``
(:func:`optimizer_service.syndicate.facade.plan_job`) chooses every
resharding motif's execution plan and orders the motifs with compute.

Inputs are values this package can read without :mod:`optimizer_service.resharding`
(which it may not import): a :class:`~optimizer_service.plan.pipeline.PipelineSchedule`,
the seconds of each action (any ``Action -> seconds`` callable, such as
``PipelineCosts.seconds``), and per pair of connected stages a
:class:`BoundaryMotifs`: the resharding of the activation forward and of its
gradient backward, each a set of motifs over global ranks — typically the
broadcasts of the resharding planner's unit tasks (:func:`broadcasts` builds
them from ``(ranks with the root first, elements)``).

The schedule is checked first
(:func:`optimizer_service.plan.pipeline_validate.check_schedule`: a bad
structure or a deadlock raises its one-line error). Nodes, in program order
(the order of its dry run, step by step and stage by stage, each action
followed by the sends it makes):

* compute ``"2F0"`` (the action's text), its seconds, on compute stream
  ``s`` (:mod:`optimizer_service.syndicate.dag`: each stage computes on its
  own mesh, beside the others); ``F(s, m)`` after the forward comm-ops into
  ``s`` of micro-batch ``m`` (or, for a boundary with no motifs, after the
  producing ``F``); ``B``/``I(s, m)`` after ``F(s, m)`` and the backward
  comm-ops into ``s``; ``W(s, m)`` after ``I(s, m)``;
* comm-ops ``"0>1:F3#k"`` (the ``k``-th motif of the activation of
  micro-batch 3 from stage 0 to stage 1) after ``F(0, 3)``, and
  ``"1>0:B3#k"`` (its gradient back) after ``B``/``I(1, 3)``; each directed
  edge's comm-ops on a lane of their own (lanes ``0, 1, ...`` in the order of
  the edges ``(from, to)``), as the pipeline simulator gives each directed
  edge a channel of its own: transfers between other meshes do not queue
  behind them (:mod:`optimizer_service.syndicate.dag`);
* the stage's order is the schedule's: every action also waits for the one
  before it on its stage (``after``, so every system keeps it). A pipeline
  runtime runs a stage's actions in its schedule's order, and that order is
  what bounds the stage's activation memory (eager-1F1B's warm-up, §4);
  Syndicate orders the motifs, not the compute, so it may not drop it as it
  drops a training loop's ``issued_after`` (our reading);
* across iterations, a stage's first action waits for every weight gradient
  (``B`` or ``W``) of the stage in the previous iteration: the optimizer step.

With a compute stream per stage and a lane per directed edge, Syndicate's
critical-path scheduler runs the stages and the edges side by side, as the
pipeline does: with every resharding priced as
:func:`~optimizer_service.resharding.pipeline_sim.simulate` prices its edge,
``p2 optimize`` (:func:`~optimizer_service.syndicate.facade.plan_job`) times
every action as the simulator does under the critical-path systems (HO,
S-Sched, Syndicate, where the chosen plans keep one motif per transfer). The
others may take longer: under FIFO (and S-Exec) one thread issues every
motif of the job in program order (:mod:`optimizer_service.syndicate.scheduler`),
so a stage's send can wait for another stage's to start; BS+'s LIFO may send
an edge's queued transfers newest first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.motif import Motif, comm_op
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.plan.pipeline_validate import check_schedule
from optimizer_service.syndicate.dag import Node, TrainingDAG

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


@dataclass(frozen=True)
class BoundaryMotifs:
    """The resharding between two connected stages (``from_stage < to_stage``):
    ``forward`` moves the activation, ``backward`` its gradient; each motif is
    one comm-op (they run independently; the consumer waits for all)."""

    from_stage: int
    to_stage: int
    forward: tuple[Motif, ...]
    backward: tuple[Motif, ...]

    def __post_init__(self) -> None:
        if not 0 <= self.from_stage < self.to_stage:
            raise InvalidInputError(f"boundary {self.from_stage}>{self.to_stage}: a stage feeds a later stage "
                                    "(from < to, both >= 0)")


def broadcasts(unit_tasks: Sequence[tuple[Sequence[int], int]]) -> tuple[Motif, ...]:
    """One Broadcast motif per ``(ranks, elements)``, the root first in ``ranks``."""
    return tuple(comm_op(Collective.BROADCAST, ranks, elements) for ranks, elements in unit_tasks)


def pipeline_dag(schedule: PipelineSchedule, seconds: Callable[[Action], float],
                 boundaries: Sequence[BoundaryMotifs], name: str | None = None) -> TrainingDAG:
    """The DAG of one iteration of ``schedule`` (module docstring)."""
    count = schedule.stage_count
    by_pair: dict[tuple[int, int], BoundaryMotifs] = {}
    for boundary in boundaries:
        pair = (boundary.from_stage, boundary.to_stage)
        if boundary.to_stage >= count:
            raise InvalidInputError(f"boundary {pair[0]}>{pair[1]} names stage {pair[1]}; schedule "
                                    f"{schedule.name} has stages 0..{count - 1}")
        if pair in by_pair:
            raise InvalidInputError(f"boundary {pair[0]}>{pair[1]} is given twice")
        by_pair[pair] = boundary
    for s in range(count - 1):
        by_pair.setdefault((s, s + 1), BoundaryMotifs(s, s + 1, (), ()))
    backward_kind = {(a.stage, a.microbatch): a.kind for actions in schedule.stages for a in actions
                     if a.kind in (B, I)}
    nodes: list[Node] = []
    previous_on_stage: dict[int, str] = {}
    weights = {s: tuple(str(a) for a in schedule.stages[s] if a.kind in (B, W)) for s in range(count)}
    lanes = {edge: k for k, edge in enumerate(sorted({e for a, b in by_pair for e in ((a, b), (b, a))}))}
    for action in check_schedule(schedule).order:
        stage, kind, m = action
        after: list[str] = []
        if kind is F:
            for (a, b), boundary in sorted(by_pair.items()):
                if b == stage:
                    after += _inputs(boundary.forward, f"{a}>{b}:F{m}", str(Action(a, F, m)))
        elif kind in (B, I):
            after.append(str(Action(stage, F, m)))
            for (a, b), boundary in sorted(by_pair.items()):
                if a == stage:
                    producer = Action(b, backward_kind[(b, m)], m)   # it ran: check_schedule found no deadlock
                    after += _inputs(boundary.backward, f"{b}>{a}:B{m}", str(producer))
        else:
            after.append(str(Action(stage, I, m)))
        if stage in previous_on_stage:
            after.insert(0, previous_on_stage[stage])
        previous = weights[stage] if stage not in previous_on_stage else ()
        nodes.append(Node(str(action), seconds(action), None, tuple(dict.fromkeys(after)), previous,
                          stream=stage))
        previous_on_stage[stage] = str(action)
        if kind is F:
            for (a, b), boundary in sorted(by_pair.items()):
                if a == stage:
                    nodes += _sends(boundary.forward, f"{a}>{b}:F{m}", str(action), lanes[(a, b)])
        elif kind in (B, I):
            for (a, b), boundary in sorted(by_pair.items()):
                if b == stage:
                    nodes += _sends(boundary.backward, f"{b}>{a}:B{m}", str(action), lanes[(b, a)])
    motifs = sum(len(b.forward) + len(b.backward) for b in by_pair.values())
    description = (f"{name or schedule.name}: pipeline schedule {schedule.name}, {count} stages x "
                   f"{schedule.microbatches} micro-batches, {motifs} resharding motifs per micro-batch")
    return TrainingDAG(name or f"pipeline-{schedule.name}", tuple(nodes), description)


def _inputs(motifs: tuple[Motif, ...], prefix: str, producer: str) -> list[str]:
    return [f"{prefix}#{k}" for k in range(len(motifs))] if motifs else [producer]


def _sends(motifs: tuple[Motif, ...], prefix: str, producer: str, lane: int) -> list[Node]:
    return [Node(f"{prefix}#{k}", 0.0, motif, (producer,), lane=lane) for k, motif in enumerate(motifs)]


def stage_of(node_name: str) -> int | None:
    """The stage of a compute node (``"2F0"`` -> 2); None for a comm-op."""
    try:
        return Action.parse(node_name.split("@")[0]).stage
    except InvalidInputError:
        return None
