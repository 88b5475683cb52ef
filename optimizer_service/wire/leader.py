"""Finding the leader among several services: the addresses a client is given
(``P2_SERVICE=a:50051,b:50051``, ``--service``) and the leader's name a standby
answers with.

A standby refuses every call but the health check with UNAVAILABLE, and names
the leader in the trailing metadata ``p2-leader`` (and in the message, for
people). A client (a rank's stream, the CLI) tries its addresses in turn and
goes straight to a named leader: :class:`Targets` keeps that order.
"""

from __future__ import annotations

import grpc

from optimizer_service.errors import InvalidInputError

LEADER_METADATA_KEY = "p2-leader"


def parse_addresses(text: str, where: str) -> tuple[str, ...]:
    """``HOST:PORT[,HOST:PORT...]`` as a tuple, in order, without repeats; one line if one is not HOST:PORT."""
    found: list[str] = []
    for part in text.split(","):
        address = part.strip()
        if not address:
            continue
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInputError(f"{where}={text!r}: {address!r} is not HOST:PORT (several services: "
                                    "HOST:PORT,HOST:PORT)")
        if address not in found:
            found.append(address)
    if not found:
        raise InvalidInputError(f"{where} is empty: give the service's HOST:PORT")
    return tuple(found)


def leader_hint(error: grpc.RpcError) -> str | None:
    """The leader a standby named in its refusal, if it named one."""
    if not hasattr(error, "trailing_metadata"):
        return None
    try:
        metadata = error.trailing_metadata() or ()
    except Exception:  # noqa: BLE001 — a call that never reached a server has none
        return None
    for key, value in metadata:
        if key == LEADER_METADATA_KEY and isinstance(value, str) and value:
            return value
    return None


def from_standby(error: grpc.RpcError | None) -> bool:
    """Whether ``error`` is a standby's refusal: a live service that will lead once the lease passes."""
    if error is None or not hasattr(error, "code") or error.code() is not grpc.StatusCode.UNAVAILABLE:
        return False
    return leader_hint(error) is not None or "standby" in (error.details() or "")


class Targets:
    """The order in which a client tries its services: the current one until it fails,
    then the leader the refusal named (if any), else the next address given."""

    def __init__(self, addresses: tuple[str, ...]) -> None:
        self.addresses = addresses
        self.current = addresses[0]
        self._next = 0
        self.hinted = False         # the current address came from a standby's answer

    def failed(self, error: grpc.RpcError | None) -> bool:
        """Move on after a failed call or stream; True when the next target is a named leader
        (worth trying at once), False when it is the next address (or the same one again)."""
        hint = leader_hint(error) if error is not None else None
        if hint is not None and hint != self.current:
            self.current, self.hinted = hint, True
            return True
        failed = self.current
        self._next = (self._next + 1) % len(self.addresses)
        if self.addresses[self._next] == failed and self.several:      # a named leader that failed: not twice
            self._next = (self._next + 1) % len(self.addresses)
        self.current, self.hinted = self.addresses[self._next], False
        return False

    @property
    def several(self) -> bool:
        return len(self.addresses) > 1

    def __str__(self) -> str:
        return ",".join(self.addresses)
