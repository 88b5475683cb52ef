"""Simulating one iteration of a pipeline schedule with cross-mesh
communication (Zhuang et al., MLSys 2023, §4, §5.3.2): when every action and
every transfer starts and ends, the bubbles, and the activation memory each
stage holds over time. Deterministic, no wall clock: ``links="edge"`` is
event-free, ``links="host"`` steps a simulated clock.

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
* **Overlap** (the default, the paper's "Overlap"): transfers run beside
  compute; a transfer starts when its action ends and its link is free
  (``links`` below);
* ``overlap=False`` (the paper's "Broadcast" baseline, §5.3.2): a send holds
  the sending stage — it runs its transfers, one after the other (destination
  stage ascending), before its next action (our reading; the receiver is not
  held: it waits for the data only when an action needs it, as a posted
  receive does);
* **links** — what a transfer occupies while it runs:

  - ``"edge"`` (the default; Syndicate's scheduler reproduces it exactly):
    each directed edge ``(a, b)`` is a channel of its own, one transfer at a
    time in the order the sending stage produced them (FIFO), so a stage's
    forward to ``s+1``, its gradient to ``s-1`` and its skip sends all travel
    at once, each at full speed;
  - ``"host"``: the links of §3's cluster, "each host has only one NIC" and it
    is full duplex ("separate sending/receiving bandwidth"). Our reading: a
    stage's mesh spreads every cross-mesh transfer over all its hosts' NICs
    (the resharding planner's load balance, §3.2), so the mesh acts as one
    **egress** (all it sends) and one **ingress** (all it receives), and an
    edge's seconds are the time that transfer takes holding them alone. A
    transfer ``a -> b`` holds ``a``'s egress and ``b``'s ingress together for
    its seconds; each of those carries one transfer at a time, and a stage's
    egress and ingress are independent (full duplex). Transfers are served in
    the order they become ready, greedily: whenever an egress or ingress frees
    (or a transfer becomes ready), the waiting transfers are taken by ready
    time — ties: the lower sending stage first, then the order that stage
    produced them (its action order, then destination stage ascending) — and
    each whose egress and ingress are both free starts now (a later one may
    pass an earlier one whose other end is still busy; a started transfer is
    never interrupted). On one edge the order stays the sender's (FIFO), so
    every constraint of ``"edge"`` still holds and ``"host"`` is never faster
    (``"edge"`` gives the earliest times those constraints allow); with two
    stages each NIC carries one direction of one edge and the two models
    agree exactly. Greedy service can make a schedule that readies a transfer
    sooner slower (it may take a NIC a more urgent one then waits for), so
    the ``"edge"`` orderings between schedules (eager-1F1B with backward
    weight delaying never slower than eager-1F1B) need not hold here;
* **memory**: stage ``s`` holds one activation (``activation_bytes``) of
  micro-batch ``m`` from the start of ``F(s, m)`` until its backward has
  ended — ``B(s, m)``, or ``W(s, m)`` when the backward is split (the weight
  gradient needs the stored activation, so a delayed ``W`` keeps it). At
  equal times a release comes before an allocation.

The iteration ends when the last action ends. A stage's bubble is the time it
does not compute; ``bubble_fraction`` is the share of stage-seconds idle.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from itertools import count as counter

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.plan.pipeline_validate import check_schedule
from optimizer_service.resharding.pipeline_costs import PipelineCosts

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT
#: What a transfer occupies while it runs (module docstring): its directed edge, or its two stages' NICs.
LINK_MODELS = ("edge", "host")
#: ``links="host"``: events this close (seconds) count as one moment when deciding what starts next. Sums of
#: float durations that are equal on paper differ in their last bits; without it a NIC freeing 1e-14 s "later"
#: loses its turn. What starts still starts at the exact time its own causes allow (the "edge" arithmetic).
SIMULTANEOUS = 1e-9


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
    links: str = "edge"                                   # LINK_MODELS

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


def simulate(schedule: PipelineSchedule, costs: PipelineCosts, overlap: bool = True,
             links: str = "edge") -> PipelineTimeline:
    """Simulate ``schedule`` under ``costs``, transfers running on ``links``
    (:data:`LINK_MODELS`; module docstring)."""
    if links not in LINK_MODELS:
        raise InvalidInputError(f"link model {links!r} is not one of {', '.join(LINK_MODELS)}; 'edge': a channel "
                                "per directed edge, 'host': a stage's sends share its NIC")
    if costs.stage_count != schedule.stage_count:
        raise InvalidInputError(f"schedule {schedule.name} has {schedule.stage_count} stages but cost profile "
                                f"{costs.name} has {costs.stage_count}")
    check_schedule(schedule)
    wiring = _Wiring(costs)
    run = _run_on_edges if links == "edge" else _run_on_hosts
    timings, transfers = run(schedule, wiring, overlap)
    # check_schedule proved the schedule deadlock-free, so every action ran
    assert all(len(timings[s]) == len(schedule.stages[s]) for s in range(schedule.stage_count))
    memory = tuple(_memory(stage_timings, costs.stages[s].activation_bytes) for s, stage_timings in enumerate(timings))
    return PipelineTimeline(schedule, overlap, tuple(tuple(t) for t in timings), tuple(transfers), memory, links)


Arrivals = dict[tuple[int, int, ActionKind, int], float]     # (from, to, direction, m) -> arrival


class _Wiring:
    """Who feeds whom and how long everything takes, read once from the costs."""

    def __init__(self, costs: PipelineCosts) -> None:
        count = costs.stage_count
        self.downstream = [costs.downstream(s) for s in range(count)]
        self.upstream = [costs.upstream(s) for s in range(count)]
        self.transfer_seconds: dict[tuple[int, int], float] = {}
        for edge in costs.all_edges():
            self.transfer_seconds[(edge.from_stage, edge.to_stage)] = edge.forward_seconds
            self.transfer_seconds[(edge.to_stage, edge.from_stage)] = edge.backward_seconds
        self.compute_seconds = [{kind: stage.seconds(kind) for kind in ActionKind} for stage in costs.stages]

    def inputs(self, action: Action, arrival: Arrivals) -> float | None:
        """When the last input of ``action`` has arrived; None while one is not known yet."""
        stage, kind, m = action
        if kind is F:
            keys = [(p, stage, F, m) for p in self.upstream[stage]]
        elif kind in (B, I):
            keys = [(t, stage, B, m) for t in self.downstream[stage]]
        else:
            keys = []
        if any(k not in arrival for k in keys):
            return None
        return max((arrival[k] for k in keys), default=0.0)

    def targets(self, action: Action) -> list[tuple[int, ActionKind]]:
        """Where the output of ``action`` goes, destination stage ascending."""
        if action.kind is F:
            return [(t, F) for t in self.downstream[action.stage]]
        if action.kind in (B, I):
            return [(p, B) for p in self.upstream[action.stage]]
        return []


def _run_on_edges(schedule: PipelineSchedule, wiring: _Wiring,
                  overlap: bool) -> tuple[list[list[ActionTiming]], list[TransferTiming]]:
    """``links="edge"``: a FIFO channel per directed edge. Event-free: a stage
    runs ahead as far as its inputs are known, as every channel's order is
    fixed by its sender alone."""
    count = schedule.stage_count
    arrival: Arrivals = {}
    channel_free: dict[tuple[int, int], float] = {}
    stage_free = [0.0] * count
    position = [0] * count
    timings: list[list[ActionTiming]] = [[] for _ in range(count)]
    transfers: list[TransferTiming] = []

    def send(stage: int, to: int, direction: ActionKind, m: int, ready: float) -> float:
        start = max(ready, channel_free.get((stage, to), 0.0))
        end = start + wiring.transfer_seconds[(stage, to)]
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
                ready = wiring.inputs(action, arrival)
                if ready is None:
                    break
                start = max(stage_free[stage], ready)
                end = start + wiring.compute_seconds[stage][action.kind]
                timings[stage].append(ActionTiming(action, start, end))
                stage_free[stage] = end
                position[stage] += 1
                progressed = True
                for to, direction in wiring.targets(action):
                    done = send(stage, to, direction, action.microbatch, end if overlap else stage_free[stage])
                    if not overlap:
                        stage_free[stage] = done
    return timings, transfers


def _run_on_hosts(schedule: PipelineSchedule, wiring: _Wiring,
                  overlap: bool) -> tuple[list[list[ActionTiming]], list[TransferTiming]]:
    """``links="host"``: a transfer holds its sender's egress and its
    receiver's ingress. Which transfer goes first depends on what else is
    ready at that moment, so this runs on a simulated clock: at each moment
    it delivers what ends then, starts every action whose stage is free and
    whose inputs are there, and only then starts waiting transfers in ready
    order (module docstring)."""
    count = schedule.stage_count
    arrival: Arrivals = {}
    position = [0] * count
    free = [True] * count                # the stage neither computes nor waits for its own sends
    free_at = [0.0] * count              # ... since then
    unsent: list[list[tuple[int, ActionKind, int]]] = [[] for _ in range(count)]   # overlap=False: sends to go
    produced = [0] * count               # transfers each stage has produced (the tie rule's last key)
    egress_busy = [False] * count
    ingress_busy = [False] * count
    egress_at = [0.0] * count            # when each egress / ingress last became free
    ingress_at = [0.0] * count
    waiting: list[tuple[float, int, int, int, ActionKind, int]] = []   # (ready, from, nth, to, direction, m)
    ending: list[tuple[float, int, tuple]] = []       # (time, order, (stage, action) or (from, to, direction, m))
    order = counter()
    timings: list[list[ActionTiming]] = [[] for _ in range(count)]
    transfers: list[TransferTiming] = []
    now = 0.0

    def post(stage: int, to: int, direction: ActionKind, m: int, ready: float) -> None:
        heapq.heappush(waiting, (ready, stage, produced[stage], to, direction, m))
        produced[stage] += 1

    def action_ends(moment: float, stage: int, action: Action) -> None:
        sends = [(to, direction, action.microbatch) for to, direction in wiring.targets(action)]
        if overlap:
            for send in sends:
                post(stage, *send, moment)
        else:                            # one after the other, as under "edge", the stage held until the last ends
            unsent[stage] = sends[1:]
            if sends:
                post(stage, *sends[0], moment)
        free[stage] = overlap or not sends
        free_at[stage] = moment

    def transfer_ends(moment: float, stage: int, to: int, direction: ActionKind, m: int) -> None:
        arrival[(stage, to, direction, m)] = moment
        egress_busy[stage] = ingress_busy[to] = False
        egress_at[stage] = ingress_at[to] = moment
        if not overlap:
            if unsent[stage]:
                post(stage, *unsent[stage].pop(0), moment)
            else:
                free[stage] = True
                free_at[stage] = moment

    def start_actions() -> bool:
        started = False
        for stage, actions in enumerate(schedule.stages):
            if not free[stage] or position[stage] == len(actions):
                continue
            action = actions[position[stage]]
            inputs = wiring.inputs(action, arrival)
            if inputs is None:                              # an input is known only once it has arrived
                continue
            begin = max(free_at[stage], inputs)             # from its own causes, as under "edge" (SIMULTANEOUS)
            end = begin + wiring.compute_seconds[stage][action.kind]
            timings[stage].append(ActionTiming(action, begin, end))
            free[stage] = False
            position[stage] += 1
            heapq.heappush(ending, (end, next(order), (stage, action)))
            started = True
        return started

    def start_transfers() -> None:
        blocked = []
        while waiting:
            item = heapq.heappop(waiting)
            ready, stage, _, to, direction, m = item
            if egress_busy[stage] or ingress_busy[to]:
                blocked.append(item)
                continue
            begin = max(ready, egress_at[stage], ingress_at[to])
            end = begin + wiring.transfer_seconds[(stage, to)]
            egress_busy[stage] = ingress_busy[to] = True
            transfers.append(TransferTiming(stage, to, direction, m, begin, end))
            heapq.heappush(ending, (end, next(order), (stage, to, direction, m)))
        for item in blocked:
            heapq.heappush(waiting, item)

    while True:
        while True:                      # everything that happens at `now`, zero-length work included
            while ending and ending[0][0] <= now + SIMULTANEOUS:
                moment, _, what = heapq.heappop(ending)
                if len(what) == 2:
                    action_ends(moment, *what)
                else:
                    transfer_ends(moment, *what)
            if start_actions():
                continue
            before = len(transfers)
            start_transfers()
            if len(transfers) == before and not (ending and ending[0][0] <= now + SIMULTANEOUS):
                break
        if not ending:
            break
        now = ending[0][0]
    assert not waiting
    return timings, transfers


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
