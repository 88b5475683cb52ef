"""Simulating one iteration of a pipeline schedule with cross-mesh
communication (Zhuang et al., MLSys 2023, §4, §5.3.2): when every action and
every transfer starts and ends, the bubbles, and the activation memory each
stage holds over time. Deterministic, event-free (no clock).

Model:

* every stage runs its actions one at a time, in its schedule's order; an
  action starts when the stage is free and its inputs have arrived, and takes
  its stage's time (:class:`~optimizer_service.resharding.pipeline_costs.PipelineCosts`);
* ``F(s, m)`` needs the forward output of micro-batch ``m`` from every stage
  that feeds ``s`` (the previous one, and skip edges); the backward ``B`` or
  ``I`` of ``(s, m)`` needs the gradient of ``m`` from every stage ``s``
  feeds; ``W`` needs nothing from other stages. An action's output is sent on
  every edge as soon as it ends (``F``'s forward, ``B``'s or ``I``'s
  backward; ``W`` sends nothing);
* **Overlap** (the default, the paper's "Overlap"): each directed edge is a
  channel of its own that runs beside compute, one transfer at a time, in the
  order the sending stage produced them (FIFO); a transfer starts when its
  action ends and the channel is free;
* ``overlap=False`` (the paper's "Broadcast" baseline, §5.3.2): a send holds
  the sending stage — it runs its transfers, one after the other, before its
  next action (our reading; the receiver is not held: it waits for the data
  only when an action needs it, as a posted receive does);
* **memory**: stage ``s`` holds one activation (``activation_bytes``) of
  micro-batch ``m`` from the start of ``F(s, m)`` until its backward has
  ended — ``B(s, m)``, or ``W(s, m)`` when the backward is split (the weight
  gradient needs the stored activation, so a delayed ``W`` keeps it). At
  equal times a release comes before an allocation.

The iteration ends when the last action ends. A stage's bubble is the time it
does not compute; ``bubble_fraction`` is the share of stage-seconds idle.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.resharding.pipeline_costs import PipelineCosts
from optimizer_service.resharding.pipeline_validate import check_schedule

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


@dataclass(frozen=True)
class ActionTiming:
    action: Action
    start: float
    end: float

    def __str__(self) -> str:
        return f"{self.action} {self.start:.9g}-{self.end:.9g}"


@dataclass(frozen=True)
class TransferTiming:
    """One transfer on one directed edge: the forward output (``F``) of
    ``microbatch`` from ``from_stage`` to ``to_stage``, or its gradient (``B``)
    from ``from_stage`` back to ``to_stage``."""

    from_stage: int
    to_stage: int
    direction: ActionKind      # F or B
    microbatch: int
    start: float
    end: float

    @property
    def channel(self) -> tuple[int, int]:
        return self.from_stage, self.to_stage

    def __str__(self) -> str:
        return f"{self.from_stage}>{self.to_stage} {self.direction}{self.microbatch} {self.start:.9g}-{self.end:.9g}"


@dataclass(frozen=True)
class PipelineTimeline:
    """Everything :func:`simulate` found (module docstring)."""

    schedule: PipelineSchedule
    overlap: bool
    actions: tuple[tuple[ActionTiming, ...], ...]         # per stage, in its order
    transfers: tuple[TransferTiming, ...]                 # in the order they were sent
    memory: tuple[tuple[tuple[float, int], ...], ...]     # per stage: (time, bytes held from then on)

    @property
    def stage_count(self) -> int:
        return len(self.actions)

    @property
    def iteration_seconds(self) -> float:
        return max((t.end for stage in self.actions for t in stage), default=0.0)

    @property
    def busy_seconds(self) -> tuple[float, ...]:
        return tuple(sum(t.end - t.start for t in stage) for stage in self.actions)

    @property
    def idle_seconds(self) -> tuple[float, ...]:
        total = self.iteration_seconds
        return tuple(total - busy for busy in self.busy_seconds)

    @property
    def bubble_fraction(self) -> float:
        total = self.iteration_seconds * self.stage_count
        return 1.0 - sum(self.busy_seconds) / total if total > 0 else 0.0

    @property
    def peak_activation_bytes(self) -> tuple[int, ...]:
        return tuple(max((held for _, held in stage), default=0) for stage in self.memory)

    @property
    def peak_inflight_microbatches(self) -> tuple[int, ...]:
        """Most micro-batches whose activation a stage holds at once."""
        peaks = []
        for stage in self.actions:
            events = sorted([(t.start, 1) for t in stage if t.action.kind is F]
                            + [(t.end, -1) for t in stage if t.action.kind in (B, W)])
            held = peak = 0
            for _, change in events:
                held += change
                peak = max(peak, held)
            peaks.append(peak)
        return tuple(peaks)

    def timing(self, action: Action) -> ActionTiming:
        for timing in self.actions[action.stage]:
            if timing.action == action:
                return timing
        raise InvalidInputError(f"action {action} is not in schedule {self.schedule.name}")

    def __str__(self) -> str:
        lines = [f"{self.schedule.name}: {self.iteration_seconds:.9g} s, bubble {self.bubble_fraction:.3f}"]
        lines += [f"{s}: " + " ".join(map(str, stage)) for s, stage in enumerate(self.actions)]
        return "\n".join(lines)


def simulate(schedule: PipelineSchedule, costs: PipelineCosts, overlap: bool = True) -> PipelineTimeline:
    """Simulate ``schedule`` under ``costs`` (module docstring)."""
    if costs.stage_count != schedule.stage_count:
        raise InvalidInputError(f"schedule {schedule.name} has {schedule.stage_count} stages but cost profile "
                                f"{costs.name} has {costs.stage_count}")
    check_schedule(schedule)
    count = schedule.stage_count
    downstream = [costs.downstream(s) for s in range(count)]
    upstream = [costs.upstream(s) for s in range(count)]
    arrival: dict[tuple[int, int, ActionKind, int], float] = {}   # (from, to, direction, m) -> arrival
    channel_free: dict[tuple[int, int], float] = {}
    stage_free = [0.0] * count
    position = [0] * count
    timings: list[list[ActionTiming]] = [[] for _ in range(count)]
    transfers: list[TransferTiming] = []

    def inputs(action: Action) -> float | None:
        stage, kind, m = action
        if kind is F:
            keys = [(p, stage, F, m) for p in upstream[stage]]
        elif kind in (B, I):
            keys = [(t, stage, B, m) for t in downstream[stage]]
        else:
            keys = []
        if any(k not in arrival for k in keys):
            return None
        return max((arrival[k] for k in keys), default=0.0)

    transfer_seconds = {}
    for edge in costs.all_edges():
        transfer_seconds[(edge.from_stage, edge.to_stage)] = edge.forward_seconds
        transfer_seconds[(edge.to_stage, edge.from_stage)] = edge.backward_seconds
    compute_seconds = [{kind: stage.seconds(kind) for kind in ActionKind} for stage in costs.stages]

    def send(stage: int, to: int, direction: ActionKind, m: int, ready: float) -> float:
        seconds = transfer_seconds[(stage, to)]
        start = max(ready, channel_free.get((stage, to), 0.0))
        end = start + seconds
        channel_free[(stage, to)] = end
        arrival[(stage, to, direction, m)] = end
        transfers.append(TransferTiming(stage, to, direction, m, start, end))
        return end

    progressed = True
    while progressed:
        progressed = False
        for stage, actions in enumerate(schedule.stages):
            while position[stage] < len(actions):
                action = actions[position[stage]]
                ready = inputs(action)
                if ready is None:
                    break
                start = max(stage_free[stage], ready)
                end = start + compute_seconds[stage][action.kind]
                timings[stage].append(ActionTiming(action, start, end))
                stage_free[stage] = end
                position[stage] += 1
                progressed = True
                if action.kind is F:
                    targets = [(t, F) for t in downstream[stage]]
                elif action.kind in (B, I):
                    targets = [(p, B) for p in upstream[stage]]
                else:
                    targets = []
                for to, direction in targets:
                    done = send(stage, to, direction, action.microbatch, end if overlap else stage_free[stage])
                    if not overlap:
                        stage_free[stage] = done
    # check_schedule proved the schedule deadlock-free, so every action ran
    assert all(position[s] == len(schedule.stages[s]) for s in range(count))
    memory = tuple(_memory(stage_timings, costs.stages[s].activation_bytes) for s, stage_timings in enumerate(timings))
    return PipelineTimeline(schedule, overlap, tuple(tuple(t) for t in timings), tuple(transfers), memory)


def _memory(timings: list[ActionTiming], activation: int) -> tuple[tuple[float, int], ...]:
    """Bytes held over time: +activation at each F's start, -activation when the
    micro-batch's backward (B, or W when split) ends; releases first at ties."""
    events = sorted([(t.start, 1, activation) for t in timings if t.action.kind is F]
                    + [(t.end, 0, -activation) for t in timings if t.action.kind in (B, W)])
    held, steps = 0, [(0.0, 0)]
    for time, _, change in events:
        held += change
        if steps[-1][0] == time:
            steps.pop()
        if not steps or steps[-1][1] != held:
            steps.append((time, held))
    return tuple(steps)
