"""Who may read and who may change things through the dashboard.

* **Mutations** (submit a plan, replan now, pause replanning, delete a job) need
  either the service's token in an ``Authorization: Bearer`` header (API
  clients), or a login session (:mod:`.sessions`: the ``p2_session`` cookie)
  *and* that session's CSRF value in the ``X-P2-CSRF`` header (the page's
  script sends it; a page of another site cannot read it). A browser's
  ``Origin``, when it sends one, must name a host on the allowlist
  (:mod:`.hosts`). A service without a token refuses every mutation (start
  ``p2 serve`` with ``--token-file``). These checks run before the request's
  body is read (:mod:`.api` reads bodies itself, after them).
* **Reads** are public by default (``P2_DASHBOARD_PUBLIC=1``); otherwise they
  need the token in the header or a login session. ``/healthz`` is always public.

The browser never holds the token: the login form sends it once and gets a
session id back; the page's controls use the session.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from fastapi import Request

from optimizer_service.dashboard.hosts import HostAllowlist
from optimizer_service.dashboard.sessions import COOKIE, CSRF_HEADER, Session, SessionStore, csrf_matches
from optimizer_service.service.token_source import TokenSource

__all__ = ["COOKIE", "CSRF_HEADER", "Access", "AuthError", "bearer"]


class AuthError(Exception):
    """A request without the right to do what it asks; ``status`` is 401, 403 or 421."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field


@dataclass(frozen=True)
class Access:
    token: str | None = None
    public: bool = True
    hosts: HostAllowlist = field(default_factory=lambda: HostAllowlist(("*",)))
    sessions: SessionStore = field(default_factory=SessionStore)
    tokens: TokenSource | None = None       # the token as rotated from its file (its previous one in grace)

    def matches(self, given: str | None) -> bool:
        """``given`` is the service's token (compared in constant time; never true without a token)."""
        if self.token is None or given is None:
            return False
        if self.tokens is not None:
            return self.tokens.accepts(given)
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.token.encode())

    def session(self, request: Request) -> Session | None:
        """The request's login session (none without a token: there is nothing to log in with)."""
        return self.sessions.get(request.cookies.get(COOKIE)) if self.token is not None else None

    def can_read(self, request: Request) -> bool:
        return (self.public or self.token is None or self.matches(bearer(request))
                or self.session(request) is not None)

    def check_read(self, request: Request) -> None:
        if not self.can_read(request):
            raise AuthError(401, "this dashboard needs the service's token to read: log in at /login, or send "
                                 "'Authorization: Bearer TOKEN'")

    def check_write(self, request: Request) -> None:
        if self.token is None:
            raise AuthError(403, "this service has no token, so the dashboard changes nothing: start 'p2 serve' "
                                 "with --token-file to allow submitting plans and controlling replanning")
        self.check_origin(request)
        given = bearer(request)
        if given is not None:
            if not self.matches(given):
                raise AuthError(401, "wrong token", "Authorization")
            return
        session = self.session(request)
        if session is None:
            raise AuthError(401, "this action needs the service's token: log in at /login (the page then acts "
                                 "for you), or send 'Authorization: Bearer TOKEN'")
        if not csrf_matches(session, request.headers.get(CSRF_HEADER)):
            raise AuthError(403, "this action needs the page's X-P2-CSRF header (reload the page and try again)",
                            CSRF_HEADER)

    def check_origin(self, request: Request) -> None:
        """A browser's cross-site request is refused: its ``Origin`` must be on the host allowlist."""
        origin = request.headers.get("origin")
        if origin is not None and not self.hosts.allows_origin(origin):
            raise AuthError(403, f"cross-site request refused (Origin {origin[:100]!r} is not one of this "
                                 f"dashboard's hosts: {self.hosts.describe()}; P2_DASHBOARD_HOSTS adds more)",
                            "Origin")


def bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None
