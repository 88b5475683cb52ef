"""What the dashboard's port answers while this ``p2 serve`` is a standby (issue 33, "reads may be served").

The port serves from the moment the service listens, not only once it leads, so Prometheus and an
operator can tell a healthy standby from a dead one (both used to accept connections and never answer):

* ``/metrics``: the service's own series, ``p2_service_leader 0`` among them; the jobs' series are
  absent (only the leader's core holds jobs; a standby's has not started).
* ``/healthz``: 200 ``{"status": "standby", "leader": "HOST:PORT"}``. 200 because the process is
  alive, which is what ``/healthz`` has always said (a leader still answers ``ok``) and what a liveness
  probe asks: a 503 would have a probe restart a healthy standby. Readiness is the gRPC health
  service's ``""`` entry, NOT_SERVING on a standby. ``leader`` is the leader's gRPC address as last
  seen (null: none known yet); it is left out for a request that may not read the dashboard (without
  the token where reads need it, or with a Host off the allowlist, which /healthz alone skips), as
  gRPC names the leader only to calls that carry the token.
* everything else (pages, ``/api/``, ``/docs``, static files): 503 with one line naming the leader's
  gRPC address — its dashboard is on its own HTTP port, which a standby cannot know. ``{"error",
  "leader"}`` where the app answers JSON, a short HTML page otherwise. Nothing of the core is read.

The Host check and the security headers (:mod:`.guard`, outside this gate), the token (``/metrics``
checks it as on a leader), the connection cap and TLS (:mod:`optimizer_service.service.http_server`)
hold on a standby too. The refusals are not in the request metrics: they have no route to name.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, JSONResponse

from optimizer_service.dashboard.auth import Access

#: ``() -> (leading, leader)``: whether this service leads, and the leader's gRPC address as last seen
#: (None: nobody known yet). The service passes its own (:class:`~optimizer_service.service.server.Service`).
Role = Callable[[], tuple[bool, str | None]]
#: What a standby serves.
SERVED = frozenset({"/metrics", "/healthz"})


def always_leading() -> tuple[bool, str | None]:
    """The role of an app with no leadership around it (tests, benchmarks): it always leads."""
    return True, None


def names_leader(access: Access, request: Request) -> bool:
    """May ``request`` learn the leader's address: it could read the dashboard (Host and token)."""
    return access.hosts.allows(request.headers.get("host")) and access.can_read(request)


def standby_health(leader: str | None, named: bool) -> dict[str, str | None]:
    """A standby's ``/healthz`` body (see the module)."""
    return {"status": "standby"} | ({"leader": leader} if named else {})


def refusal_message(leader: str | None, named: bool) -> str:
    if not named:
        return "this p2 serve is a standby; the leader serves the dashboard (send the token to learn its address)"
    if leader is None:
        return "this p2 serve is a standby and no leader is known yet; try again in a few seconds"
    return f"this p2 serve is a standby; the leader is at {leader} (gRPC; its dashboard is on its own HTTP port)"


class StandbyGate:
    """Pure ASGI, inside the Host check: while ``role()`` says standby, only :data:`SERVED` reach the
    app; every other request is answered 503 (see the module) without its body being read."""

    def __init__(self, app: Any, role: Role, access: Access, json_answer: Callable[[str], bool]) -> None:
        self.app, self.role, self.access, self.json_answer = app, role, access, json_answer

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope.get("path") in SERVED:
            await self.app(scope, receive, send)
            return
        leading, leader = self.role()
        if leading:
            await self.app(scope, receive, send)
            return
        named = names_leader(self.access, Request(scope))
        message = refusal_message(leader, named)
        if self.json_answer(scope.get("path", "")):
            body = {"error": message} | ({"leader": leader} if named and leader else {})
            answer = JSONResponse(body, status_code=503)
        else:
            answer = HTMLResponse(f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>503 '
                                  f"standby</title></head><body><p>{html.escape(message)}</p></body></html>\n",
                                  status_code=503)
        await answer(scope, receive, send)
