"""The coordinator's durable log: its records and their replay.

The coordinator never writes anything itself; it returns ``Persist(record)``
actions and the service driver appends each record to the job's log in the
store, durably, before it executes the actions that follow (PROTOCOL.md
§2.1). Records are JSON-able dicts, appended in this order:

``{"type": "prepare", "version": 7, "epoch": 2, "switch_iteration": 120, "time": 1712.5}``
    Written before any Prepare of ``version`` is sent. The plan body is not in
    the record: the driver stores it under its version when it assigns the
    version (before Submit), and hands it back to :func:`recover` in ``plans``.

``{"type": "decision", "version": 7, "decision": "commit", "reason": "", "switch_iteration": 120,
"epoch": 2, "time": 1713.0}``
    ``decision`` is ``"commit"`` or ``"abort"`` (then ``reason`` says why, one
    line). Written before any Commit or Abort of ``version`` is sent; at most one
    per version, and never contradicted.

``{"type": "recover", "epoch": 3, "time": 1800.0}``
    Written first by a restarted coordinator; its epoch is higher than every
    epoch before it in the log.

:func:`replay` reads a log back and rejects one that breaks these rules.

The append must be conditional on the job's current epoch being the writer's
(a fencing token): a deposed coordinator that is still alive must fail to
write, and then send nothing more (PROTOCOL.md §2.2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from optimizer_service.errors import InvalidInputError

COMMIT = "commit"
ABORT = "abort"
DECISIONS = (COMMIT, ABORT)


def prepare_record(version: int, epoch: int, switch_iteration: int, now: float) -> dict:
    return {"type": "prepare", "version": version, "epoch": epoch, "switch_iteration": switch_iteration,
            "time": now}


def decision_record(version: int, decision: str, reason: str, switch_iteration: int, epoch: int,
                    now: float) -> dict:
    return {"type": "decision", "version": version, "decision": decision, "reason": reason,
            "switch_iteration": switch_iteration, "epoch": epoch, "time": now}


def recover_record(epoch: int, now: float) -> dict:
    return {"type": "recover", "epoch": epoch, "time": now}


@dataclass(frozen=True)
class Replayed:
    """What a log says: every prepared version (in order) with its switch
    iteration, the decision of each decided one, and the highest epoch."""

    prepared: Mapping[int, int] = field(default_factory=dict)        # version -> switch_iteration
    decisions: Mapping[int, tuple[str, str]] = field(default_factory=dict)  # version -> (decision, reason)
    max_epoch: int = 0

    @property
    def committed(self) -> int:
        """The newest committed version (0: none)."""
        return max((v for v, (d, _) in self.decisions.items() if d == COMMIT), default=0)

    @property
    def undecided(self) -> tuple[int, ...]:
        return tuple(v for v in self.prepared if v not in self.decisions)

    @property
    def last(self) -> int:
        """The last prepared version (0: none)."""
        return max(self.prepared, default=0)


def _field(record: Mapping, name: str, kind: type, where: str):
    value = record.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise InvalidInputError(f"coordinator log {where}: '{name}' must be {kind.__name__}, got {value!r}")
    return value


def replay(log: Sequence[Mapping]) -> Replayed:
    """Read the records of :mod:`this module <optimizer_service.control.records>`
    back; a log that breaks their rules (a decision without its prepare, two
    decisions for one version, versions or epochs going backwards) is refused
    with a one-line :class:`InvalidInputError` naming the record."""
    prepared: dict[int, int] = {}
    decisions: dict[int, tuple[str, str]] = {}
    max_epoch = 0
    for index, record in enumerate(log):
        where = f"record {index}"
        if not isinstance(record, Mapping):
            raise InvalidInputError(f"coordinator log {where}: expected a JSON object, got {record!r}")
        kind = record.get("type")
        epoch = _field(record, "epoch", int, where)
        if epoch < max_epoch:
            raise InvalidInputError(f"coordinator log {where}: epoch {epoch} after epoch {max_epoch}")
        if kind == "recover":
            if epoch <= max_epoch and max_epoch:
                raise InvalidInputError(f"coordinator log {where}: recovery epoch {epoch} is not above {max_epoch}")
        elif kind == "prepare":
            version = _field(record, "version", int, where)
            if prepared and version <= max(prepared):
                raise InvalidInputError(f"coordinator log {where}: version {version} prepared after version "
                                        f"{max(prepared)}")
            prepared[version] = _field(record, "switch_iteration", int, where)
        elif kind == "decision":
            version = _field(record, "version", int, where)
            decision = record.get("decision")
            if decision not in DECISIONS:
                raise InvalidInputError(f"coordinator log {where}: decision must be 'commit' or 'abort', "
                                        f"got {decision!r}")
            if version not in prepared:
                raise InvalidInputError(f"coordinator log {where}: decision for version {version}, "
                                        f"which was never prepared")
            if version in decisions:
                raise InvalidInputError(f"coordinator log {where}: a second decision for version {version} "
                                        f"({decisions[version][0]}, then {decision})")
            decisions[version] = (decision, str(record.get("reason", "")))
        else:
            raise InvalidInputError(f"coordinator log {where}: unknown record type {kind!r} "
                                    f"(expected prepare, decision or recover)")
        max_epoch = max(max_epoch, epoch)
    return Replayed(prepared, decisions, max_epoch)
