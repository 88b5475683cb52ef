"""Request bodies bounded before they are read: a pure ASGI middleware.

Without it a client, with or without the token, could send any body: uvicorn buffers what arrives
and FastAPI reads all of it before a handler (and its token check) runs. An unauthenticated 120 MB
``POST /api/jobs/J/plans`` grew the service by 670 MB and stalled gRPC health for 2.9 s (issue 30,
item 2). Each route now has a limit (:func:`limit_for`): plan documents 64 MiB
(:data:`~optimizer_service.dashboard.api.MAX_PLAN_BYTES`), the login form 8 KiB, everything else 64 KiB.

* A ``Content-Length`` over the limit is answered 413 at once; nothing of the body is read.
* A body without one (chunked) is counted as the application reads it; the piece that passes the
  limit ends the request with 413, whatever the application was doing with it.

The 413 is ``{"error": ..., "field": "body"}`` and closes the connection (``connection: close``), so
the rest of a refused body is never read. Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``:
it must see each ``receive`` of the body, and it adds no task per request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from optimizer_service.dashboard.api import MAX_PLAN_BYTES, MAX_SMALL_BODY
from optimizer_service.dashboard.pages import MAX_LOGIN_FORM

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

KIB = 1024
DEFAULT_LIMIT = MAX_SMALL_BODY
#: (method, path pattern, limit in bytes); the first match wins, else DEFAULT_LIMIT.
ROUTE_LIMITS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("POST", re.compile(r"/api/jobs/[^/]+/plans/?"), MAX_PLAN_BYTES),
    ("POST", re.compile(r"/login/?"), MAX_LOGIN_FORM),
)


def limit_for(method: str, path: str) -> int:
    """The largest body (bytes) a request to ``method path`` may carry."""
    for route_method, pattern, limit in ROUTE_LIMITS:
        if method == route_method and pattern.fullmatch(path):
            return limit
    return DEFAULT_LIMIT


def _size(limit: int) -> str:
    return f"{limit // (1024 * KIB)} MiB" if limit % (1024 * KIB) == 0 else f"{limit // KIB} KiB"


class BodyTooLarge(Exception):
    """Raised into the application by ``receive`` when the body passes its limit."""


class BodyLimitMiddleware:
    """Refuses bodies over their route's limit with 413 before (or while) they are read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit, f"{declared} bytes announced")
            return
        received = 0
        passed = False          # the body passed the limit: the application's answer is replaced
        started = False         # a response has begun (then it cannot be replaced)

        async def counted_receive() -> Message:
            nonlocal received, passed
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    passed = True
                    raise BodyTooLarge(f"the request body passed {limit} bytes")
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if passed and not started:
                return          # the application's reaction to BodyTooLarge (a 400 or 500) is not sent
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception:
            if not passed:
                raise
        if passed and not started:
            await _refuse(send, limit, f"more than {limit} bytes sent")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            # h11 has already refused a Content-Length that is not a number
            return int(value) if value.strip().isdigit() else None
    return None


async def _refuse(send: Send, limit: int, what: str) -> None:
    body = json.dumps({"error": f"the request body is too large ({what}); this route takes at most "
                       f"{_size(limit)}", "field": "body"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
