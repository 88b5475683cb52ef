"""Which names the dashboard answers to: the ``Host`` allowlist that stops DNS
rebinding, and the ``Origin`` check of requests that change things.

DNS rebinding: a page on ``evil.example`` re-points its own name at 127.0.0.1;
the browser then sends the page's requests to the dashboard with
``Host: evil.example`` and lets the page read the answers (same origin, as far as
the browser knows). Checking ``Origin`` against the request's own ``Host`` (what
this module replaces) passes such requests, because both say ``evil.example``.
Only a list of names fixed by the operator tells the two apart: by default the
address ``p2 serve`` binds and the loopback names; more with
``P2_DASHBOARD_HOSTS`` (``*`` turns the check off, e.g. behind a proxy that does it).

An entry is a host name or address, optionally with ``:PORT`` (without one, any
port); IPv6 addresses in brackets or bare; matched case-insensitively.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

LOOPBACK = ("localhost", "127.0.0.1", "::1")


def split_host(value: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of a ``Host`` header or list entry (lower case, brackets and a
    trailing dot removed); None when it cannot be one."""
    value = value.strip().lower()
    if not value or len(value) > 300 or any(c.isspace() or c in "/@?#\\" for c in value):
        return None
    port: int | None = None
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif value.count(":") > 1:                         # a bare IPv6 address (list entries only)
        host, port_text = value, None
    else:
        host, _, port_text = value.partition(":")
        port_text = port_text if ":" in value else None
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            return None
        port = int(port_text)
    host = host.rstrip(".")
    return (host, port) if host else None


class HostAllowlist:
    """The names the dashboard answers to."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.any = False
        self._entries: set[tuple[str, int | None]] = set()
        for entry in entries:
            if entry.strip() == "*":
                self.any = True
                continue
            parsed = split_host(entry)
            if parsed is None:
                raise ValueError(f"{entry!r} is not a host name or HOST:PORT")
            self._entries.add(parsed)

    def allows(self, host_header: str | None) -> bool:
        if self.any:
            return True
        parsed = split_host(host_header or "")
        if parsed is None:
            return False
        host, port = parsed
        if (host, None) in self._entries:
            return True
        # A Host or Origin without a port means the scheme's default one.
        return any((host, p) in self._entries for p in ((port,) if port is not None else (80, 443)))

    def allows_origin(self, origin: str) -> bool:
        """A browser's ``Origin`` (``scheme://host[:port]``) names an allowed host."""
        if self.any:
            return True
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            return False
        return self.allows(parts.netloc)

    def describe(self) -> str:
        if self.any:
            return "any host"
        names = sorted(f"[{h}]" if ":" in h else h for h, _ in self._entries)
        return ", ".join(dict.fromkeys(names)) or "no host"
