"""The dashboard's login sessions and the rate limit on logging in.

Why sessions: the login form used to put the service's master token in the
browser's cookie (and the page copied it to ``sessionStorage``), so anything
that could read the browser's storage, a log of cookies, or a proxy's headers
had the token that also drives every rank's gRPC stream. Now a successful login
creates a **server-side session**: the cookie carries only a random id
(:func:`secrets.token_urlsafe`), which expires, is bounded in number, dies with
the process or at logout, and opens the dashboard only — never gRPC.

Why a CSRF token besides ``SameSite=Strict``: the cookie alone must never be
enough to change anything (an old browser, a same-site sub-domain, a link
followed from another tab). A mutation by session also needs the session's own
random ``csrf`` value in the ``X-P2-CSRF`` header, which only a page of this
dashboard can read (it is rendered into the page; CORS denies other origins).

Why a rate limit: the login form is an oracle for the token. Attempts are
limited per client address and globally (token buckets), and a refused attempt
says when to try again (429, ``Retry-After``).

Everything here is in memory, behind the clock the caller passes (tests inject
one): a restarted service logs everyone out, which is the safe direction.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "p2_session"
CSRF_HEADER = "x-p2-csrf"
IDLE_SECONDS = 8 * 3600.0           # a session nobody used for this long is gone (sliding)
LIFETIME_SECONDS = 24 * 3600.0      # and every session ends this long after its login (fixed)
MAX_SESSIONS = 256                  # the oldest-used session makes room for a new login beyond this


@dataclass
class Session:
    """One logged-in browser: its CSRF value (the id itself is only ever held hashed)."""

    csrf: str
    created: float
    last_used: float


def _digest(session_id: str) -> bytes:
    """Sessions are kept under the hash of their id, so a dump of this process's memory
    or a timing of the dictionary lookup tells nothing about a live cookie."""
    return hashlib.sha256(session_id.encode("utf-8", "replace")).digest()


class SessionStore:
    """Live sessions, bounded in number and time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, idle: float = IDLE_SECONDS,
                 lifetime: float = LIFETIME_SECONDS, capacity: int = MAX_SESSIONS) -> None:
        self.clock, self.idle, self.lifetime, self.capacity = clock, idle, lifetime, capacity
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()     # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> tuple[str, Session]:
        """A new session: ``(its id for the cookie, the session)``."""
        now = self.clock()
        self._expire(now)
        while len(self._sessions) >= self.capacity:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        session = Session(csrf=secrets.token_urlsafe(32), created=now, last_used=now)
        self._sessions[_digest(session_id)] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie's id (its idle time restarts), else None."""
        if not session_id or len(session_id) > 128:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self.clock()
        if self._expired(session, now):
            del self._sessions[key]
            return None
        session.last_used = now
        self._sessions.move_to_end(key)
        return session

    def end(self, session_id: str | None) -> bool:
        """Logout: forget the session (True if there was one)."""
        if not session_id or len(session_id) > 128:
            return False
        return self._sessions.pop(_digest(session_id), None) is not None

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.last_used > self.idle or now - session.created > self.lifetime

    def _expire(self, now: float) -> None:
        for key in [key for key, session in self._sessions.items() if self._expired(session, now)]:
            del self._sessions[key]


def csrf_matches(session: Session, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), session.csrf.encode())


@dataclass
class _Bucket:
    tokens: float
    at: float


class TokenBucket:
    """``capacity`` attempts at once, refilled at ``per_second``; a pure value over an injected clock."""

    def __init__(self, capacity: float, per_second: float, now: float) -> None:
        self.capacity, self.per_second = capacity, per_second
        self._state = _Bucket(capacity, now)

    def _refill(self, now: float) -> None:
        state = self._state
        state.tokens = min(self.capacity, state.tokens + max(0.0, now - state.at) * self.per_second)
        state.at = now

    def take(self, now: float) -> float:
        """0 when an attempt may go ahead (and is counted); else the seconds until one may."""
        self._refill(now)
        if self._state.tokens >= 1.0:
            self._state.tokens -= 1.0
            return 0.0
        return (1.0 - self._state.tokens) / self.per_second

    def full(self, now: float) -> bool:
        self._refill(now)
        return self._state.tokens >= self.capacity


@dataclass(frozen=True)
class LoginRate:
    """How many login attempts go ahead: a burst and a steady rate, per client address and in all."""

    per_client_burst: int = 5
    per_client_per_minute: float = 10.0
    global_burst: int = 30
    global_per_minute: float = 60.0
    clients: int = 4_096                # addresses remembered at once (the fullest buckets are forgotten first)


class LoginLimiter:
    """Login attempts limited per client address and globally; ``check`` answers how long to wait.

    Every attempt counts, right or wrong: the limit is on guesses, and a right token is
    one attempt in a long while. The global bucket is what stops a guesser that spreads
    over many addresses; its price is that such an attack also delays honest logins
    (API clients with ``Authorization: Bearer`` never go through this)."""

    def __init__(self, rate: LoginRate = LoginRate(), clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.clock = rate, clock
        self._global = TokenBucket(rate.global_burst, rate.global_per_minute / 60.0, clock())
        self._clients: OrderedDict[str, TokenBucket] = OrderedDict()

    def check(self, client: str) -> int:
        """0: the attempt may go ahead (counted); else whole seconds to wait (the ``Retry-After``)."""
        now = self.clock()
        bucket = self._clients.get(client)
        if bucket is None:
            self._forget(now)
            bucket = TokenBucket(self.rate.per_client_burst, self.rate.per_client_per_minute / 60.0, now)
            self._clients[client] = bucket
        self._clients.move_to_end(client)
        wait = bucket.take(now)
        if wait:
            return max(1, math.ceil(wait))
        wait = self._global.take(now)
        return max(1, math.ceil(wait)) if wait else 0

    def _forget(self, now: float) -> None:
        """Room for one more address: drop full buckets (they hold nothing), then the least recent."""
        if len(self._clients) < self.rate.clients:
            return
        for client in [c for c, b in self._clients.items() if b.full(now)]:
            del self._clients[client]
        while len(self._clients) >= self.rate.clients:
            self._clients.popitem(last=False)
