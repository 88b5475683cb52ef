"""The collective operations P² reasons about (§3.2)."""

from __future__ import annotations

from enum import Enum

from optimizer_service.errors import InvalidInputError


class Collective(str, Enum):
    """A collective over a group of devices. The root of Reduce and Broadcast is
    the group's first device (P² §3.2: "we always use the first device in a
    reduction group as the root")."""

    ALL_REDUCE = "AllReduce"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_GATHER = "AllGather"
    REDUCE = "Reduce"
    BROADCAST = "Broadcast"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> Collective:
        for member in cls:
            if member.value.lower() == text.strip().lower():
                return member
        raise InvalidInputError(
            f"unknown collective {text!r}; expected one of {', '.join(m.value for m in cls)}")


#: Enumeration order of collectives in synthesis (deterministic tie-breaking).
COLLECTIVES: tuple[Collective, ...] = tuple(Collective)
