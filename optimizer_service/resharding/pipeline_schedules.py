"""Synchronous pipeline schedules as values (Zhuang et al., MLSys 2023, §4):
GPipe, 1F1B, eager-1F1B and eager-1F1B with backward weight delaying.

Stages are numbered from 0 (the first stage) to ``S-1`` (the last); every
stage runs every micro-batch ``0..M-1`` in order. A schedule of the 1F1B
family is fixed by each stage's **warm-up**: the number of forwards it runs
before its first backward. After it the stage alternates one backward, one
forward (the steady phase) until its forwards are done, then runs the
remaining backwards (the cool-down).

* ``gpipe`` — every forward, then every backward (warm-up ``M``).
* ``1f1b`` — warm-up ``S - s`` on stage ``s``. The paper writes
  "``#stages − i + 1``" with stages numbered from 1 (``i = s + 1``): the first
  stage runs ``S`` forwards before its first backward and the last stage one,
  which is 1F1B (PipeDream-flush, Narayanan et al. 2021).
* ``eager-1f1b`` — warm-up ``2·(S − s) − 1`` on stage ``s``: the paper's
  "``2 × (#stages − i) + 1``", again with 1-based ``i = s + 1``. The reading
  keeps the paper's claims true: the last stage's warm-up stays 1 (a larger one
  there would hold back the first backward and lengthen the pipeline even
  without communication), so with no communication cost its latency equals
  1F1B's; stage ``s`` runs ``S − 1 − s`` forwards more than in 1F1B, so it
  holds at most ``S − 1 < S`` more activations ("at most ``#stages ×
  size_activation``"); and each stage's forward of micro-batch ``m`` runs two
  1F1B steps before the next stage needs it, which is the room in which the
  forward transfer is hidden. Warm-ups are capped at ``M``.
* ``eager-1f1b-wd`` — eager-1F1B with backward weight delaying: each
  backward is split into ``I`` (the input gradient, which the previous stage
  waits for and which is all the cross-mesh transfer sends) and ``W`` (the
  weight gradient, which nothing waits for). Our reading of "we delay the
  second part so that it overlaps with the communication": the gradient
  leaves as soon as ``I(m)`` ends, so it travels while ``W(m)`` runs (``d =
  0``: ``W(m)`` right after ``I(m)``, in ``B(m)``'s place); ``W(m)`` may be
  delayed further, past the next ``d`` actions of its stage (``W`` actions not
  counted), which lets those actions — the next ``I`` among them — send their
  outputs sooner. ``d`` is per stage; "delay the least to cover all
  communications" is :func:`choose_weight_delays`, with the simulator as the
  cost model. Delayed ``W`` actions that land at the same place run in micro-batch
  order; those delayed past the stage's last action run at its end.

:func:`build_schedule` makes any of them by name; every schedule made here
passes :func:`optimizer_service.plan.pipeline_validate.check_schedule`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind, PipelineSchedule
from optimizer_service.resharding.pipeline_costs import PipelineCosts
from optimizer_service.resharding.pipeline_sim import simulate

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT

SCHEDULE_NAMES = ("gpipe", "1f1b", "eager-1f1b", "eager-1f1b-wd")
#: The longest weight-gradient delay (in actions) :func:`choose_weight_delays` tries.
MAX_WEIGHT_DELAY = 3


def _check_sizes(stages: int, microbatches: int) -> None:
    if not isinstance(stages, int) or stages < 1:
        raise InvalidInputError(f"a pipeline needs at least one stage, got {stages!r}")
    if not isinstance(microbatches, int) or microbatches < 1:
        raise InvalidInputError(f"a pipeline needs at least one micro-batch, got {microbatches!r}")


def warmup_1f1b(stage: int, stages: int, microbatches: int) -> int:
    """Forwards stage ``stage`` (0-based) runs before its first backward in 1F1B."""
    return min(stages - stage, microbatches)


def warmup_eager(stage: int, stages: int, microbatches: int) -> int:
    """Forwards stage ``stage`` (0-based) runs before its first backward in eager-1F1B."""
    return min(2 * (stages - stage) - 1, microbatches)


def one_forward_one_backward(stage: int, warmup: int, microbatches: int,
                             backward: ActionKind = B) -> list[Action]:
    """``warmup`` forwards, then backward/forward alternately, then the rest of the backwards."""
    order = [Action(stage, F, m) for m in range(warmup)]
    for m in range(microbatches):
        order.append(Action(stage, backward, m))
        if warmup + m < microbatches:
            order.append(Action(stage, F, warmup + m))
    return order


def _by_warmup(name: str, stages: int, microbatches: int, warmup: Callable[[int, int, int], int],
               backward: ActionKind = B) -> PipelineSchedule:
    _check_sizes(stages, microbatches)
    return PipelineSchedule(name, microbatches, tuple(
        tuple(one_forward_one_backward(s, warmup(s, stages, microbatches), microbatches, backward))
        for s in range(stages)))


def gpipe(stages: int, microbatches: int) -> PipelineSchedule:
    """All forwards, then all backwards, on every stage (Huang et al. 2019)."""
    return _by_warmup("gpipe", stages, microbatches, lambda s, n, m: m)


def one_f_one_b(stages: int, microbatches: int) -> PipelineSchedule:
    """1F1B: warm-up ``S - s`` on stage ``s`` (module docstring)."""
    return _by_warmup("1f1b", stages, microbatches, warmup_1f1b)


def eager_1f1b(stages: int, microbatches: int) -> PipelineSchedule:
    """Eager-1F1B (§4): warm-up ``2·(S − s) − 1`` on stage ``s`` (module docstring)."""
    return _by_warmup("eager-1f1b", stages, microbatches, warmup_eager)


def delay_weights(order: Sequence[Action], delay: int) -> list[Action]:
    """``order`` (with ``I`` backwards) with each ``W(m)`` placed after the
    ``delay``-th action that follows ``I(m)`` (module docstring)."""
    if delay < 0:
        raise InvalidInputError(f"a weight-gradient delay of {delay} actions is not possible; give 0 or more")
    base = [a for a in order if a.kind is not W]
    landing: dict[int, list[Action]] = {}
    for position, action in enumerate(base):
        if action.kind is I:
            target = min(position + delay, len(base) - 1)
            landing.setdefault(target, []).append(Action(action.stage, W, action.microbatch))
    out: list[Action] = []
    for position, action in enumerate(base):
        out.append(action)
        out.extend(sorted(landing.get(position, []), key=lambda a: a.microbatch))
    return out


def eager_1f1b_wd(stages: int, microbatches: int, delays: int | Sequence[int] = 0) -> PipelineSchedule:
    """Eager-1F1B with backward weight delaying (§4): ``delays`` is ``d`` for
    every stage or one per stage (module docstring)."""
    base = _by_warmup("eager-1f1b-wd", stages, microbatches, warmup_eager, I)
    per_stage = [delays] * stages if isinstance(delays, int) else list(delays)
    if len(per_stage) != stages:
        raise InvalidInputError(f"{len(per_stage)} weight delays given for {stages} stages; give one or {stages}")
    return PipelineSchedule(base.name, microbatches, tuple(
        tuple(delay_weights(actions, d)) for actions, d in zip(base.stages, per_stage)))


def choose_weight_delays(stages: int, microbatches: int, costs: PipelineCosts, overlap: bool = True,
                         longest: int = MAX_WEIGHT_DELAY, links: str = "edge") -> tuple[int, ...]:
    """Each stage's weight-gradient delay ``d`` for ``eager-1f1b-wd`` under
    ``costs`` ("delay the least to cover all communications", §4), with the
    simulator as the cost model: starting from ``d = 0`` everywhere, from the
    last stage to the first, the least ``d`` in ``0..longest`` that gives the
    shortest simulated iteration (a larger ``d`` must win outright: it keeps an
    activation longer), ``links`` being the simulator's link model. Never
    slower than ``d = 0``, which under ``links="edge"`` is never slower than
    eager-1F1B (the same order with each ``B`` run as ``I`` then ``W``: the
    gradient leaves ``W`` earlier)."""
    def seconds(delays: list[int]) -> float:
        return simulate(eager_1f1b_wd(stages, microbatches, delays), costs, overlap, links).iteration_seconds

    delays = [0] * stages
    best = seconds(delays)
    for stage in reversed(range(stages)):
        for d in range(1, longest + 1):
            trial = delays[:stage] + [d] + delays[stage + 1:]
            found = seconds(trial)
            if found < best * (1 - 1e-9):
                best, delays = found, trial
    return tuple(delays)


def build_schedule(name: str, stages: int, microbatches: int, costs: PipelineCosts | None = None,
                   overlap: bool = True, delays: int | Sequence[int] | None = None,
                   links: str = "edge") -> PipelineSchedule:
    """The schedule called ``name`` (:data:`SCHEDULE_NAMES`). For
    ``eager-1f1b-wd``: ``delays`` if given, else those
    :func:`choose_weight_delays` picks under ``costs``, else 0."""
    if name == "gpipe":
        return gpipe(stages, microbatches)
    if name == "1f1b":
        return one_f_one_b(stages, microbatches)
    if name == "eager-1f1b":
        return eager_1f1b(stages, microbatches)
    if name == "eager-1f1b-wd":
        if delays is None:
            _check_sizes(stages, microbatches)
            delays = 0 if costs is None else choose_weight_delays(stages, microbatches, costs, overlap,
                                                                  links=links)
        return eager_1f1b_wd(stages, microbatches, delays)
    raise InvalidInputError(f"unknown pipeline schedule {name!r}; known: {', '.join(SCHEDULE_NAMES)}")
