"""The one enum of collective operations, shared by P² and Syndicate.

P² reasons about five of them (§3.2: AllReduce, ReduceScatter, AllGather,
Reduce, Broadcast; :data:`P2_COLLECTIVES`); Syndicate's motifs add AllToAll
(§4.2.1). The root of Reduce and Broadcast is the group's first device (P²
§3.2: "we always use the first device in a reduction group as the root").
"""

from __future__ import annotations

from enum import Enum

from optimizer_service.errors import InvalidInputError


class Collective(str, Enum):
    """A collective over a group of devices (its text form is its value)."""

    ALL_REDUCE = "AllReduce"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_GATHER = "AllGather"
    REDUCE = "Reduce"
    BROADCAST = "Broadcast"
    ALL_TO_ALL = "AllToAll"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> Collective:
        for member in cls:
            if member.value.lower() == text.strip().lower():
                return member
        raise InvalidInputError(
            f"unknown collective {text!r}; expected one of {', '.join(m.value for m in cls)}")


#: The collectives P² synthesizes programs from, in enumeration order
#: (deterministic tie-breaking); AllToAll moves data without reducing it.
P2_COLLECTIVES: tuple[Collective, ...] = (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER,
                                          Collective.ALL_GATHER, Collective.REDUCE, Collective.BROADCAST)
