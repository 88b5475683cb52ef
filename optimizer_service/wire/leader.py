"""Finding the leader among several services: the addresses a client is given
(``P2_SERVICE=a:50051,b:50051``, ``--service``, or a name that resolves to
several addresses) and the leader's name a standby answers with.

A standby refuses every call but the health check with UNAVAILABLE, and names
the leader in the trailing metadata ``p2-leader`` (and in the message, for
people). A client (a rank's stream, the CLI) tries its addresses in turn and
goes straight to a named leader: :class:`Targets` keeps that order.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

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


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order ([] when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return [info[4][0] for info in infos]


def expand(address: str, resolver: Callable[[str, int], list[str]] = resolve) -> tuple[str, ...]:
    """``address``, or the addresses its name resolves to when it resolves to several (a headless
    Kubernetes Service, a round-robin DNS name): one ``IP:PORT`` each, in order."""
    host, _, port = address.rpartition(":")
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare)
        return (address,)
    except ValueError:
        pass
    found: list[str] = []
    for ip in resolver(bare, int(port)):
        target = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
        if target not in found:
            found.append(target)
    return tuple(found) if len(found) > 1 else (address,)


class Targets:
    """The order in which a client tries its services: the current one until it fails,
    then the leader the refusal named (if any), else the next address. A name that resolves
    to several addresses counts as those addresses, looked up again at every round; TLS still
    checks the certificate against the name (:meth:`options`)."""

    def __init__(self, given: tuple[str, ...], resolver: Callable[[str, int], list[str]] = resolve) -> None:
        self.given = given
        self._resolver = resolver
        self._names: dict[str, str] = {}        # an address a name resolved to -> that name
        self.addresses = self._expand()
        self.current = self.addresses[0]
        self._next = 0
        self.hinted = False         # the current address came from a standby's answer

    def _expand(self) -> tuple[str, ...]:
        found: list[str] = []
        for address in self.given:
            for target in expand(address, self._resolver):
                if target != address:
                    self._names[target] = address.rpartition(":")[0].strip("[]")
                if target not in found:
                    found.append(target)
        return tuple(found)

    def failed(self, error: grpc.RpcError | None) -> bool:
        """Move on after a failed call or stream; True when the next target is a named leader
        (worth trying at once), False when it is the next address (or the same one again)."""
        hint = leader_hint(error) if error is not None else None
        if hint is not None and hint != self.current:
            self.current, self.hinted = hint, True
            return True
        failed = self.current
        self._next = (self._next + 1) % len(self.addresses)
        if self._next == 0:                                             # a round is over: names again
            self.addresses = self._expand()
        if self.addresses[self._next] == failed and self.several:      # a named leader that failed: not twice
            self._next = (self._next + 1) % len(self.addresses)
        self.current, self.hinted = self.addresses[self._next], False
        return False

    def options(self, base: tuple = ()) -> tuple:
        """Channel options for the current target: ``base``, and where the target is an address a
        name resolved to, that name for TLS to check the service's certificate against."""
        name = self._names.get(self.current)
        return (*base, ("grpc.ssl_target_name_override", name)) if name else tuple(base)

    @property
    def several(self) -> bool:
        return len(self.addresses) > 1

    def __str__(self) -> str:
        return ",".join(self.given)
