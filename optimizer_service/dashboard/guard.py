"""What happens to every HTTP request before routing, and to every answer: a pure ASGI middleware.

* A request whose ``Host`` is not on the allowlist (:mod:`.hosts`) is answered
  421 with one line and nothing else runs: that is what stops DNS rebinding
  from reading the dashboard. ``/healthz`` is exempt (probes dial an address
  the operator may not list, and it says only "ok", or "standby": it names
  the leader only to an allowed Host, :mod:`.standby`).
* Every answer — pages, the API, errors, static files, refusals of other
  middlewares inside this one — carries the security headers
  (:data:`SECURITY_HEADERS`): a Content-Security-Policy that allows only this
  dashboard's own scripts, styles and connections (the pages have no inline
  script; ``/docs`` loads its setup from a file for the same reason) and no
  framing (``frame-ancestors 'none'``, and ``X-Frame-Options`` for old browsers).

Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``: it adds no task per
request and sees the answer's start message, whoever sends it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from optimizer_service.dashboard.hosts import HostAllowlist

Scope = dict[str, Any]
Message = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
EXEMPT = frozenset({"/healthz"})


class GuardMiddleware:
    """Refuses unknown hosts (421) and puts :data:`SECURITY_HEADERS` on every answer."""

    def __init__(self, app: ASGIApp, hosts: HostAllowlist) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                message["headers"] = [*message.get("headers", ()),
                                      *((n, v) for n, v in SECURITY_HEADERS if n not in present)]
            await send(message)

        if scope.get("path") not in EXEMPT:
            host = next((value for name, value in scope.get("headers", ()) if name == b"host"), None)
            text = host.decode("latin-1") if host is not None else None
            if not self.hosts.allows(text):
                await self._refuse(secured, text)
                return
        await self.app(scope, receive, secured)

    async def _refuse(self, send, host: str | None) -> None:
        shown = "no Host header" if host is None else f"Host {host[:100]!r}"
        body = json.dumps({"error": f"{shown} is not a name this dashboard answers to ({self.hosts.describe()}); "
                                    "use one of those, or add it to P2_DASHBOARD_HOSTS", "field": "Host"}).encode()
        await send({"type": "http.response.start", "status": 421,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
