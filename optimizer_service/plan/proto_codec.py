"""The plan as a protocol buffer (``p2.v1.Plan``, ``proto/p2/v1/plan.proto``) and back.

The proto mirrors :class:`~optimizer_service.plan.plan.Plan` field for field;
a composition is a tree of ``Composition`` nodes (a motif, or the parts of a
``Seq`` or ``Par``); a motif's ``element_bytes`` is 0 for the default 4.
Decoding builds the values through their constructors, so a message that
does not make a valid plan is a one-line
:class:`~optimizer_service.errors.PlanError` naming what is wrong, like the
JSON codec's. ``plan_from_proto(plan_to_proto(p)) == p`` for every plan.
"""

from __future__ import annotations

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES
from optimizer_service.plan.motif import Composition, Motif, Par, Seq
from optimizer_service.plan.op_plan import OpKey, OpPlan
from optimizer_service.plan.plan import Plan
from p2.v1 import plan_pb2

_TO_PROTO = {Collective.ALL_REDUCE: plan_pb2.ALL_REDUCE, Collective.REDUCE_SCATTER: plan_pb2.REDUCE_SCATTER,
             Collective.ALL_GATHER: plan_pb2.ALL_GATHER, Collective.REDUCE: plan_pb2.REDUCE,
             Collective.BROADCAST: plan_pb2.BROADCAST, Collective.ALL_TO_ALL: plan_pb2.ALL_TO_ALL}
_FROM_PROTO = {number: collective for collective, number in _TO_PROTO.items()}
#: Deepest composition accepted (the planner's are a few levels deep; this bounds the decoder's recursion).
MAX_DEPTH = 32


def plan_to_proto(plan: Plan) -> plan_pb2.Plan:
    message = plan_pb2.Plan(version=plan.version, world_size=plan.world_size,
                            ops=[_op_to_proto(op) for op in plan.ops])
    for channel in plan.channel_ids():
        entry = message.channels.add(id=channel)
        if plan.channels[channel] is not None:
            entry.interface = plan.channels[channel]
    if plan.topology is not None:
        message.topology = plan.topology
    if plan.predicted_iteration_seconds is not None:
        message.predicted_iteration_seconds = plan.predicted_iteration_seconds
    if plan.bound_iteration_seconds is not None:
        message.bound_iteration_seconds = plan.bound_iteration_seconds
    return message


def plan_from_proto(message: plan_pb2.Plan) -> Plan:
    channels: dict[int, str | None] = {}
    for entry in message.channels:
        if entry.id in channels:
            raise PlanError(f"plan: channel {entry.id} is listed twice")
        channels[entry.id] = entry.interface if entry.HasField("interface") else None
    return Plan(version=message.version, world_size=message.world_size, channels=channels or {0: None},
                ops=tuple(_op_from_proto(op, f"plan ops[{i}]") for i, op in enumerate(message.ops)),
                topology=message.topology if message.HasField("topology") else None,
                predicted_iteration_seconds=(message.predicted_iteration_seconds
                                             if message.HasField("predicted_iteration_seconds") else None),
                bound_iteration_seconds=(message.bound_iteration_seconds
                                         if message.HasField("bound_iteration_seconds") else None))


def _op_to_proto(op: OpPlan) -> plan_pb2.OpPlan:
    key = op.key
    return plan_pb2.OpPlan(key=plan_pb2.OpKey(seq=key.seq, kind=key.kind, bytes=key.nbytes, group=key.group,
                                              root=key.root, dtype=key.dtype),
                           composition=_composition_to_proto(op.plan), order=op.order)


def _op_from_proto(message: plan_pb2.OpPlan, where: str) -> OpPlan:
    if not message.HasField("key"):
        raise PlanError(f"{where}: missing field 'key'")
    key = message.key
    op_key = OpKey(key.seq, key.kind, key.bytes, tuple(key.group), key.root, key.dtype)
    if not message.HasField("composition"):
        raise PlanError(f"plan {op_key}: missing field 'composition'")
    try:
        composition = _composition_from_proto(message.composition, 0)
    except InvalidInputError as error:
        raise PlanError(f"plan {op_key}: {error}") from None
    return OpPlan(op_key, composition, tuple(message.order))


def _composition_to_proto(part: Composition) -> plan_pb2.Composition:
    if isinstance(part, Motif):
        motif = plan_pb2.Motif(collective=_TO_PROTO[part.kind], ranks=part.ranks, channel=part.channel,
                               ranges=[plan_pb2.Range(lo=lo, hi=hi) for lo, hi in part.ranges],
                               element_bytes=0 if part.element_bytes == DEFAULT_ELEMENT_BYTES else part.element_bytes)
        if part.kind is Collective.ALL_TO_ALL:
            motif.window.lo, motif.window.hi = part.window
        return plan_pb2.Composition(motif=motif)
    parts = plan_pb2.Parts(parts=[_composition_to_proto(inner) for inner in part.parts])
    return plan_pb2.Composition(seq=parts) if isinstance(part, Seq) else plan_pb2.Composition(par=parts)


def _composition_from_proto(message: plan_pb2.Composition, depth: int) -> Composition:
    if depth > MAX_DEPTH:
        raise InvalidInputError(f"the composition is nested deeper than {MAX_DEPTH} levels")
    node = message.WhichOneof("node")
    if node == "motif":
        motif = message.motif
        if motif.collective not in _FROM_PROTO:
            raise InvalidInputError(f"motif collective {motif.collective} is not one of "
                                    f"{', '.join(c.value for c in Collective)}")
        kind = _FROM_PROTO[motif.collective]
        window = (motif.window.lo, motif.window.hi) if kind is Collective.ALL_TO_ALL else (0, 0)
        return Motif(kind, tuple(motif.ranks), tuple((r.lo, r.hi) for r in motif.ranges), window, motif.channel,
                     motif.element_bytes or DEFAULT_ELEMENT_BYTES)
    if node is None:
        raise InvalidInputError("an empty composition node (neither motif, seq nor par)")
    parts = tuple(_composition_from_proto(inner, depth + 1) for inner in getattr(message, node).parts)
    return Seq(parts) if node == "seq" else Par(parts)
