"""The plan's JSON document: field checks, and ops to and from JSON (pure).

The document (``format`` ``p2enforcer-plan``) is shown in
:mod:`optimizer_service.plan.op_plan`; :meth:`Plan.parse
<optimizer_service.plan.plan.Plan.parse>` and :meth:`Plan.to_json
<optimizer_service.plan.plan.Plan.to_json>` use the pieces here. Every
problem is a :class:`~optimizer_service.errors.PlanError` of one line naming
the field and where it is.
"""

from __future__ import annotations

import json

from optimizer_service.errors import InvalidInputError, PlanError
from optimizer_service.plan.motif_text import parse_composition
from optimizer_service.plan.op_plan import OpKey, OpPlan

FORMAT = "p2enforcer-plan"


def op_to_json(op: OpPlan) -> dict:
    key = op.key
    entry: dict = {"seq": key.seq, "kind": key.kind, "bytes": key.nbytes, "group": list(key.group)}
    if key.kind == "broadcast":
        entry["root"] = key.root
    if key.dtype:
        entry["dtype"] = key.dtype
    entry["plan"] = str(op.plan)
    entry["order"] = list(op.order)
    return entry



_PLAN_FIELDS = ({"format", "version", "world_size", "ops"},
                {"channels", "topology", "predicted_iteration_seconds", "bound_iteration_seconds"})

_OP_FIELDS = ({"seq", "kind", "bytes", "group", "plan", "order"}, {"root", "dtype"})


def load_document(text: str) -> dict:
    try:
        document = json.loads(text)
    except (TypeError, ValueError) as error:
        raise PlanError(f"the plan is not JSON: {error}") from None
    check_fields(document, "plan", *_PLAN_FIELDS)
    if document["format"] != FORMAT:
        raise PlanError(f"plan format is {document['format']!r}, expected {FORMAT!r}")
    return document


def channels_from_json(value) -> dict[int, str | None]:
    if not isinstance(value, dict):
        raise PlanError(f"plan: 'channels' must be an object of channel id -> interface, got {json.dumps(value)}")
    channels: dict[int, str | None] = {}
    for name, interface in value.items():
        if not (name.isdigit() and name.isascii()):
            raise PlanError(f"plan: channel id {name!r} in 'channels' must be a non-negative integer")
        if interface is not None and not isinstance(interface, str):
            raise PlanError(f"plan: channel {name} must name a network interface or be null, "
                            f"got {json.dumps(interface)}")
        channels[int(name)] = interface
    return channels


def op_from_json(entry, where: str) -> OpPlan:
    check_fields(entry, where, *_OP_FIELDS)
    kind = typed(entry, "kind", str, where, "a string")
    group = integers(entry, "group", where)
    order = integers(entry, "order", where)
    text = typed(entry, "plan", str, where, "a string")
    key = OpKey(integer(entry, "seq", where), kind, integer(entry, "bytes", where), tuple(group),
                integer(entry, "root", where) if "root" in entry else 0,
                typed(entry, "dtype", str, where, "a string") if "dtype" in entry else "")
    try:
        plan = parse_composition(text)
    except InvalidInputError as error:
        raise PlanError(f"plan {key}: {error}") from None
    return OpPlan(key, plan, tuple(order))


def check_fields(value, where: str, required: set[str], optional: set[str]) -> None:
    if not isinstance(value, dict):
        raise PlanError(f"{where} must be a JSON object, got {json.dumps(value)[:60]}")
    missing = sorted(required - value.keys())
    if missing:
        raise PlanError(f"{where}: missing field {missing[0]!r}")
    unknown = sorted(value.keys() - required - optional)
    if unknown:
        raise PlanError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(required | optional))})")


def typed(value: dict, name: str, kind: type, where: str, wanted: str):
    if not isinstance(value[name], kind):
        raise PlanError(f"{where}: {name!r} must be {wanted}, got {json.dumps(value[name])[:60]}")
    return value[name]


def integer(value: dict, name: str, where: str) -> int:
    number = value[name]
    if isinstance(number, bool) or not isinstance(number, int):
        raise PlanError(f"{where}: {name!r} must be an integer, got {json.dumps(number)[:60]}")
    return number


def integers(value: dict, name: str, where: str) -> list[int]:
    numbers = typed(value, name, list, where, "a list of integers")
    if any(isinstance(n, bool) or not isinstance(n, int) for n in numbers):
        raise PlanError(f"{where}: {name!r} must be a list of integers, got {json.dumps(numbers)[:60]}")
    return numbers
