"""The whole plan an enforcer installs: every planned op of an iteration and
the channels its motifs use (Syndicate §4.4's ``E_colls`` and ``S`` for all
ops; the per-op tables are :class:`~optimizer_service.plan.op_plan.OpPlan`).
Its text form is the JSON document of :mod:`optimizer_service.plan.codec`
(``Plan.parse(plan.to_json()) == plan``)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from optimizer_service.errors import PlanError
from optimizer_service.plan import codec
from optimizer_service.plan.op_plan import OpPlan


@dataclass(frozen=True)
class Plan:
    """A whole installed plan: every planned op of an iteration and the channels."""

    version: int
    world_size: int
    channels: dict[int, str | None]
    ops: tuple[OpPlan, ...]
    topology: str | None = None
    predicted_iteration_seconds: float | None = None
    #: The lower bound on the job's iteration time on the cluster state the plan was searched for
    #: (:mod:`optimizer_service.syndicate.bound`); None when unknown.
    bound_iteration_seconds: float | None = None
    _index: dict[tuple[tuple[int, ...], int], OpPlan] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "channels", dict(self.channels))
        object.__setattr__(self, "ops", tuple(self.ops))
        if self.version < 1:
            raise PlanError(f"plan version must be >= 1, got {self.version}")
        if self.world_size < 1:
            raise PlanError(f"plan world_size must be >= 1, got {self.world_size}")
        for channel in self.channels:
            if channel < 0:
                raise PlanError(f"plan channel {channel} must be >= 0")
        for name in ("predicted_iteration_seconds", "bound_iteration_seconds"):
            seconds = getattr(self, name)
            if seconds is not None and not (math.isfinite(seconds) and seconds >= 0):
                raise PlanError(f"plan {name} must be a finite number >= 0, got {seconds}")
        index: dict[tuple[tuple[int, ...], int], OpPlan] = {}
        for op in self.ops:
            self._check_op(op)
            if (op.key.group, op.key.seq) in index:
                op._fail(f"a second op with seq {op.key.seq} on this group")
            index[op.key.group, op.key.seq] = op
        object.__setattr__(self, "_index", index)

    def _check_op(self, op: OpPlan) -> None:
        outside = [r for r in op.key.group if r >= self.world_size]
        if outside:
            op._fail(f"group rank {outside[0]} is outside the world of {self.world_size} ranks")
        for index, motif in enumerate(op.motifs):
            if motif.channel not in self.channels:
                op._fail(f"motif {index} ({motif}) uses channel {motif.channel}, which 'channels' does not "
                         f"list (listed: {', '.join(map(str, self.channel_ids())) or 'none'})")

    # -- queries
    def lookup(self, group: Sequence[int], seq: int, kind: str, nbytes: int, root: int = 0) -> OpPlan | None:
        """The plan for the ``seq``-th op of ``group``, or ``None`` when the plan
        has none, or was made for a different op there (kind, bytes or root
        differ: the iteration changed shape and this entry must not run it)."""
        op = self._index.get((tuple(group), seq))
        if op is None or (op.key.kind, op.key.nbytes, op.key.root) != (kind, nbytes, root):
            return None
        return op

    def check_world(self, world_size: int) -> None:
        if world_size != self.world_size:
            raise PlanError(f"the plan is for a world of {self.world_size} ranks but this job has {world_size}")

    def channel_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.channels))

    def member_sets(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        """For each listed channel, the member sets (sorted global ranks) of the
        motifs on it, sorted, so every rank creates the same subgroups in the
        same order before the first op (motif ranks mapped through the op's group)."""
        sets: dict[int, set[tuple[int, ...]]] = {channel: set() for channel in self.channels}
        for op in self.ops:
            for motif in op.motifs:
                sets[motif.channel].add(tuple(sorted(op.key.group[r] for r in motif.ranks)))
        return {channel: tuple(sorted(members)) for channel, members in sorted(sets.items())}

    # -- JSON
    @classmethod
    def parse(cls, text: str) -> Plan:
        """The plan in a JSON document (the module docstring shows one)."""
        document = codec.load_document(text)
        channels = codec.channels_from_json(document.get("channels", {"0": None}))
        ops = codec.typed(document, "ops", list, "plan", "a list")
        topology = document.get("topology")
        if topology is not None and not isinstance(topology, str):
            raise PlanError(f"plan: 'topology' must be a string, got {json.dumps(topology)}")
        seconds = {name: document.get(name) for name in ("predicted_iteration_seconds", "bound_iteration_seconds")}
        for name, value in seconds.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise PlanError(f"plan: {name!r} must be a number, got {json.dumps(value)}")
        return cls(version=codec.integer(document, "version", "plan"),
                   world_size=codec.integer(document, "world_size", "plan"),
                   channels=channels,
                   ops=tuple(codec.op_from_json(entry, f"plan ops[{i}]") for i, entry in enumerate(ops)),
                   topology=topology,
                   **{name: None if value is None else float(value) for name, value in seconds.items()})

    def to_json(self) -> str:
        """The JSON document :meth:`parse` reads back; one line per op, so plans diff well."""
        header: dict = {"format": codec.FORMAT, "version": self.version, "world_size": self.world_size,
                        "channels": {str(c): self.channels[c] for c in self.channel_ids()}}
        if self.topology is not None:
            header["topology"] = self.topology
        for name in ("predicted_iteration_seconds", "bound_iteration_seconds"):
            if getattr(self, name) is not None:
                header[name] = getattr(self, name)
        fields = [f" {json.dumps(name)}: {json.dumps(value)}," for name, value in header.items()]
        ops = ",\n".join(f"  {json.dumps(codec.op_to_json(op))}" for op in self.ops)
        return "\n".join(["{", *fields, ' "ops": [', *([ops] if ops else []), " ]", "}"]) + "\n"
