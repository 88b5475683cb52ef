"""What a pipeline's actions and its cross-mesh transfers cost (Zhuang et al.,
MLSys 2023, §4 and §5.2): per-stage compute seconds, the communication edges
between stage meshes, and the activation each in-flight micro-batch holds.

* :class:`StageCost` — one stage: forward seconds, the two halves of its
  backward (``backward_input``, the gradient the previous stage waits for, and
  ``backward_weight``; a whole backward ``B`` costs their sum) and the bytes of
  activation one micro-batch keeps from its forward until its backward is done.
* :class:`CommEdge` — stage ``from_stage`` feeds stage ``to_stage``
  (``from_stage < to_stage``): the forward activation travels down that edge in
  ``forward_seconds``, its gradient travels back in ``backward_seconds``. Every
  pair of adjacent stages is connected even when no edge is listed (the model
  is a chain; a missing edge costs nothing).
* :class:`PipelineCosts` — the stages and edges of one model; a text form that
  round-trips::

      pipeline-costs gpt stages=2
      stage 0: F=0.01 I=0.01 W=0.01 activation=48000000
      stage 1: F=0.01 I=0.01 W=0.01 activation=48000000
      edge 0>1: F=0.004 B=0.004

Two profiles as values, whose communication seconds a caller may take from
the resharding planner's predictions:

* :func:`gpt_like` — a homogeneous stack of transformer layers: every stage
  sends the output of its last layer to the next stage only (§5.2);
* :func:`u_transformer_like` — a U-shaped network with long skip connections:
  layer ``i`` also feeds the ``i``-th layer from the last (§5.2), so stage
  ``i`` also feeds stage ``S-1-i``. A skip edge that joins two adjacent stages
  (the middle of the U) shares their link with the chain's own tensor: its
  seconds are added to that edge (both tensors cross the same two meshes, one
  after the other).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.plan.pipeline import Action, ActionKind

#: Activation bytes one micro-batch of one GPT-3 layer holds (Table 1: 2·B·S·H bytes in fp16 at B=2,
#: S=1024, H=12288: 48 MiB).
TABLE1_ACTIVATION_BYTES = 2 * 2 * 1024 * 12288
#: The share of a backward that is the weight gradient: a linear layer's two
#: backward matmuls (input gradient, weight gradient) cost the same.
WEIGHT_SHARE = 0.5


def _seconds(value: float, what: str) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
        raise InvalidInputError(f"{what} is {value!r}; it must be a finite number of seconds >= 0")
    return float(value)


def _number(value: float) -> str:
    """The shortest text that reads back as the same float (``0.01``, ``1e-05``)."""
    return repr(float(value))


@dataclass(frozen=True)
class StageCost:
    forward: float
    backward_input: float
    backward_weight: float
    activation_bytes: int = 0

    def __post_init__(self) -> None:
        _seconds(self.forward, "a stage's forward time")
        _seconds(self.backward_input, "a stage's input-gradient time")
        _seconds(self.backward_weight, "a stage's weight-gradient time")
        if not isinstance(self.activation_bytes, int) or self.activation_bytes < 0:
            raise InvalidInputError(f"activation size {self.activation_bytes!r} must be a whole number of bytes >= 0")

    @property
    def backward(self) -> float:
        return self.backward_input + self.backward_weight

    def seconds(self, kind: ActionKind) -> float:
        return {ActionKind.FORWARD: self.forward, ActionKind.BACKWARD: self.backward,
                ActionKind.BACKWARD_INPUT: self.backward_input,
                ActionKind.BACKWARD_WEIGHT: self.backward_weight}[kind]

    def __str__(self) -> str:
        return (f"F={_number(self.forward)} I={_number(self.backward_input)} W={_number(self.backward_weight)} "
                f"activation={self.activation_bytes}")


@dataclass(frozen=True)
class CommEdge:
    from_stage: int
    to_stage: int
    forward_seconds: float
    backward_seconds: float

    def __post_init__(self) -> None:
        if not 0 <= self.from_stage < self.to_stage:
            raise InvalidInputError(f"edge {self.from_stage}>{self.to_stage}: a stage feeds a later stage "
                                    "(from < to, both >= 0)")
        _seconds(self.forward_seconds, f"edge {self.from_stage}>{self.to_stage}'s forward time")
        _seconds(self.backward_seconds, f"edge {self.from_stage}>{self.to_stage}'s backward time")

    def __str__(self) -> str:
        return (f"{self.from_stage}>{self.to_stage}: F={_number(self.forward_seconds)} "
                f"B={_number(self.backward_seconds)}")


@dataclass(frozen=True)
class PipelineCosts:
    """Per-stage costs and the edges between stages (module docstring)."""

    name: str
    stages: tuple[StageCost, ...]
    edges: tuple[CommEdge, ...] = ()

    def __post_init__(self) -> None:
        if not self.stages:
            raise InvalidInputError("pipeline costs need at least one stage")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", self.name):
            raise InvalidInputError(f"pipeline cost profile name {self.name!r} must be one word")
        seen = set()
        for edge in self.edges:
            if edge.to_stage >= len(self.stages):
                raise InvalidInputError(f"edge {edge.from_stage}>{edge.to_stage} names stage {edge.to_stage}; "
                                        f"the pipeline has stages 0..{len(self.stages) - 1}")
            pair = (edge.from_stage, edge.to_stage)
            if pair in seen:
                raise InvalidInputError(f"edge {edge.from_stage}>{edge.to_stage} is listed twice; "
                                        "give one edge per pair of stages (add their seconds)")
            seen.add(pair)

    @property
    def stage_count(self) -> int:
        return len(self.stages)

    def seconds(self, action: Action) -> float:
        """Compute time of ``action`` on its stage."""
        return self.stages[action.stage].seconds(action.kind)

    def edge(self, from_stage: int, to_stage: int) -> CommEdge:
        """The edge ``from_stage > to_stage``; an adjacent pair not listed costs nothing."""
        for edge in self.edges:
            if (edge.from_stage, edge.to_stage) == (from_stage, to_stage):
                return edge
        if to_stage == from_stage + 1 and 0 <= from_stage and to_stage < self.stage_count:
            return CommEdge(from_stage, to_stage, 0.0, 0.0)
        raise InvalidInputError(f"stages {from_stage} and {to_stage} are not connected")

    def downstream(self, stage: int) -> tuple[int, ...]:
        """The stages ``stage``'s forward output goes to (the next one, and skip edges)."""
        found = {e.to_stage for e in self.edges if e.from_stage == stage}
        if stage + 1 < self.stage_count:
            found.add(stage + 1)
        return tuple(sorted(found))

    def upstream(self, stage: int) -> tuple[int, ...]:
        """The stages whose forward output ``stage`` needs (and whose gradients it sends back)."""
        found = {e.from_stage for e in self.edges if e.to_stage == stage}
        if stage > 0:
            found.add(stage - 1)
        return tuple(sorted(found))

    def all_edges(self) -> tuple[CommEdge, ...]:
        """Every connected pair (listed or adjacent), by (from, to)."""
        return tuple(self.edge(s, t) for s in range(self.stage_count) for t in self.downstream(s))

    def with_comm_scaled(self, factor: float) -> PipelineCosts:
        """The same profile with every transfer ``factor`` times as long (0: no communication)."""
        _seconds(factor, "the communication scale")
        return PipelineCosts(self.name, self.stages, tuple(
            CommEdge(e.from_stage, e.to_stage, e.forward_seconds * factor, e.backward_seconds * factor)
            for e in self.edges))

    def __str__(self) -> str:
        lines = [f"pipeline-costs {self.name} stages={self.stage_count}"]
        lines += [f"stage {i}: {stage}" for i, stage in enumerate(self.stages)]
        lines += [f"edge {edge}" for edge in self.edges]
        return "\n".join(lines)

    @classmethod
    def parse(cls, text: str) -> PipelineCosts:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        head = re.fullmatch(r"pipeline-costs\s+(\S+)\s+stages=(\d+)", lines[0]) if lines else None
        if not head:
            raise InvalidInputError("pipeline costs start with 'pipeline-costs NAME stages=S'")
        number = r"([0-9.eE+-]+)"
        stages, edges = [], []
        for line in lines[1:]:
            stage = re.fullmatch(rf"stage (\d+): F={number} I={number} W={number} activation=(\d+)", line)
            edge = re.fullmatch(rf"edge (\d+)>(\d+): F={number} B={number}", line)
            try:
                if stage and int(stage.group(1)) == len(stages):
                    stages.append(StageCost(float(stage.group(2)), float(stage.group(3)), float(stage.group(4)),
                                            int(stage.group(5))))
                elif edge:
                    edges.append(CommEdge(int(edge.group(1)), int(edge.group(2)), float(edge.group(3)),
                                          float(edge.group(4))))
                else:
                    raise InvalidInputError(f"pipeline costs line {line!r} is not 'stage {len(stages)}: F= I= W= "
                                            "activation=' nor 'edge A>B: F= B='")
            except ValueError as error:
                if isinstance(error, InvalidInputError):
                    raise
                raise InvalidInputError(f"pipeline costs line {line!r} has a number that is not one") from None
        if len(stages) != int(head.group(2)):
            raise InvalidInputError(f"pipeline costs say stages={head.group(2)} but list {len(stages)}")
        return cls(head.group(1), tuple(stages), tuple(edges))


def per_stage(value: float | Sequence[float], count: int, what: str) -> tuple[float, ...]:
    """``value`` for each of ``count`` items: one number for all, or one each."""
    if isinstance(value, (int, float)):
        return (float(value),) * count
    values = tuple(float(v) for v in value)
    if len(values) != count:
        raise InvalidInputError(f"{what}: {len(values)} values given for {count}; give one number or {count}")
    return values


def _stages(stages: int, forward: float | Sequence[float], backward: float | Sequence[float],
            weight_share: float, activation_bytes: int | Sequence[int]) -> tuple[StageCost, ...]:
    if not isinstance(stages, int) or stages < 1:
        raise InvalidInputError(f"a pipeline needs at least one stage, got {stages!r}")
    if not 0.0 <= weight_share <= 1.0:
        raise InvalidInputError(f"weight-gradient share {weight_share!r} must lie in [0, 1]")
    forwards = per_stage(forward, stages, "forward seconds")
    backwards = per_stage(backward, stages, "backward seconds")
    activations = per_stage(activation_bytes, stages, "activation bytes")
    return tuple(StageCost(f, b * (1 - weight_share), b * weight_share, int(a))
                 for f, b, a in zip(forwards, backwards, activations))


def gpt_like(stages: int, forward_seconds: float | Sequence[float] = 0.010,
             backward_seconds: float | Sequence[float] = 0.020, comm_seconds: float | Sequence[float] = 0.004,
             backward_comm_seconds: float | Sequence[float] | None = None,
             activation_bytes: int | Sequence[int] = TABLE1_ACTIVATION_BYTES,
             weight_share: float = WEIGHT_SHARE) -> PipelineCosts:
    """A GPT-like profile (§5.2): ``stages`` equal stages (or one value per
    stage), an edge between adjacent stages only, carrying the activation
    forward in ``comm_seconds`` (one per boundary, or one for all) and its
    gradient back in ``backward_comm_seconds`` (the same size: by default the
    same seconds)."""
    costs = _stages(stages, forward_seconds, backward_seconds, weight_share, activation_bytes)
    forward_comm = per_stage(comm_seconds, stages - 1, "communication seconds per boundary")
    backward_comm = forward_comm if backward_comm_seconds is None else per_stage(
        backward_comm_seconds, stages - 1, "backward communication seconds per boundary")
    edges = tuple(CommEdge(s, s + 1, f, b) for s, (f, b) in enumerate(zip(forward_comm, backward_comm)))
    return PipelineCosts("gpt", costs, edges)


def u_transformer_like(stages: int, forward_seconds: float | Sequence[float] = 0.010,
                       backward_seconds: float | Sequence[float] = 0.020,
                       comm_seconds: float | Sequence[float] = 0.004,
                       skip_seconds: float | Sequence[float] | None = None,
                       backward_comm_seconds: float | Sequence[float] | None = None,
                       activation_bytes: int | Sequence[int] = TABLE1_ACTIVATION_BYTES,
                       weight_share: float = WEIGHT_SHARE) -> PipelineCosts:
    """A U-Transformer-like profile (§5.2): the chain's edges as in
    :func:`gpt_like`, plus a skip edge from stage ``i`` to stage ``S-1-i`` for
    every ``i < S-1-i`` carrying ``skip_seconds`` each way (one per skip edge,
    outermost first, or one for all; default: ``comm_seconds`` of the first
    boundary). Where a skip edge joins adjacent stages its seconds are added to
    that boundary's (module docstring)."""
    chain = gpt_like(stages, forward_seconds, backward_seconds, comm_seconds, backward_comm_seconds,
                     activation_bytes, weight_share)
    skips = [(i, stages - 1 - i) for i in range(stages) if i < stages - 1 - i]
    default = chain.edges[0].forward_seconds if chain.edges else 0.0
    sizes = per_stage(default if skip_seconds is None else skip_seconds, len(skips), "skip seconds per skip edge")
    edges = {(e.from_stage, e.to_stage): (e.forward_seconds, e.backward_seconds) for e in chain.edges}
    for (i, j), seconds in zip(skips, sizes):
        forward, backward = edges.get((i, j), (0.0, 0.0))
        edges[(i, j)] = (forward + seconds, backward + seconds)
    return PipelineCosts("u-transformer", chain.stages,
                         tuple(CommEdge(i, j, f, b) for (i, j), (f, b) in sorted(edges.items())))
