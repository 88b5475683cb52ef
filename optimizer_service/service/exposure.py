"""Who can reach the service's ports, and the one warning when strangers can and nothing stops them.

Binding ``0.0.0.0`` (or any address but loopback) without a token lets anyone on the network submit
plans to running jobs; without TLS the token itself travels in clear. Neither is refused (a lab
network may be trusted), but ``p2 serve`` says so once, at start, in one line (issue 30, item 7).
"""

from __future__ import annotations

import ipaddress


def is_wildcard(host: str) -> bool:
    """Whether ``host`` binds every interface."""
    return host.strip("[]") in ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name a socket binds) is reachable from this machine only.
    Names other than localhost count as reachable from elsewhere (the warning errs on that side)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen_host(address: str) -> str | None:
    """The host part of a gRPC listen address (``HOST:PORT``, ``[V6]:PORT``); None for a Unix socket."""
    if address.startswith(("unix:", "unix-abstract:")):
        return None
    return address.rpartition(":")[0].strip("[]")


def exposure_warning(listeners: dict[str, str], token: bool, tls: bool) -> str | None:
    """One line when any of ``listeners`` (what → bound host) is reachable beyond loopback and the
    service has no token or no TLS; ``None`` when there is nothing to say."""
    exposed = [f"{what} on {'every interface' if is_wildcard(host) else host}"
               for what, host in listeners.items() if not is_loopback(host)]
    if not exposed or (token and tls):
        return None
    where = " and ".join(exposed)
    if not token:
        remedy = "--token-file FILE" + ("" if tls else " and --tls-cert/--tls-key")
        return (f"service: {where} beyond loopback without a token{'' if tls else ' or TLS'}: anyone who can "
                f"reach it can change jobs and plans; give {remedy}")
    return (f"service: {where} beyond loopback without TLS: the token and every answer cross the network in "
            "clear; give --tls-cert/--tls-key")
