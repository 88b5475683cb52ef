"""Who may read and who may change things through the dashboard.

* **Mutations** (submit a plan, replan now, pause replanning) need the
  service's token in an ``Authorization: Bearer`` header — never a cookie, so a
  page on another site cannot make a browser send it (a cross-origin request
  with that header needs a CORS preflight, which this app never grants) — and
  a same-origin ``Origin`` header when the browser sends one. A service
  without a token refuses every mutation (start ``p2 serve`` with
  ``--token-file``).
* **Reads** are public by default (``P2_DASHBOARD_PUBLIC=1``); otherwise they
  need the token too: in the header, or in the ``p2_token`` cookie the login
  form sets (``HttpOnly``, ``SameSite=Strict``). ``/healthz`` is always public.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Request

COOKIE = "p2_token"


class AuthError(Exception):
    """A request without the right to do what it asks; ``status`` is 401 or 403."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Access:
    token: str | None = None
    public: bool = True

    def matches(self, given: str | None) -> bool:
        """``given`` is the service's token (compared in constant time; never true without a token)."""
        return self.token is not None and given is not None and hmac.compare_digest(given.encode(),
                                                                                    self.token.encode())

    def can_read(self, request: Request) -> bool:
        return (self.public or self.token is None or self.matches(bearer(request))
                or self.matches(request.cookies.get(COOKIE)))

    def check_read(self, request: Request) -> None:
        if not self.can_read(request):
            raise AuthError(401, "this dashboard needs the service's token to read: log in at /login, or send "
                                 "'Authorization: Bearer TOKEN'")

    def check_write(self, request: Request) -> None:
        if self.token is None:
            raise AuthError(403, "this service has no token, so the dashboard changes nothing: start 'p2 serve' "
                                 "with --token-file to allow submitting plans and controlling replanning")
        origin = request.headers.get("origin")
        if origin is not None and origin != own_origin(request):
            raise AuthError(403, f"cross-site request refused (Origin {origin} is not this dashboard's)")
        given = bearer(request)
        if given is None:
            raise AuthError(401, "this action needs the service's token: send 'Authorization: Bearer TOKEN' "
                                 "(the page's token field does)")
        if not self.matches(given):
            raise AuthError(401, "wrong token")


def bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"
