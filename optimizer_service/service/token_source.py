"""The service's token, rotated without a restart.

``p2 serve --token-file FILE`` (or ``P2_TOKEN_FILE``) re-reads the file when it
changes (its inode, size or modification time; looked at no more than once a
second, on the calls that need the token). The new token is accepted at once;
the previous one still is for ``grace`` seconds (``P2_TOKEN_GRACE_SECONDS``,
default 300), long enough for every rank and client to pick up the new file
(ranks re-read theirs on every reconnect). A file that cannot be read, or that
holds no valid token, changes nothing: the current token stays, with one
warning per change. A token given by value (``P2_TOKEN``) never changes.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from optimizer_service.wire.credentials import AuthSetupError

log = logging.getLogger("p2.service")

DEFAULT_GRACE_SECONDS = 300.0
CHECK_EVERY_SECONDS = 1.0


class TokenSource:
    """What :meth:`accepts` compares a caller's token with: the current token and, for a grace
    period after a rotation, the previous one. ``read(path)`` reads and checks a token file."""

    def __init__(self, token: str, path: Path | None, read: Callable[[Path], str], *,
                 grace: float = DEFAULT_GRACE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.token = token
        self.path = path
        self.grace = grace
        self.rotations = 0
        self._read = read
        self._clock = clock
        self._previous: tuple[str, float] | None = None     # the old token and when its grace ends
        self._checked = clock()
        self._seen = self._signature()
        self._refused: tuple | None = None                  # a changed file that held no valid token

    def _signature(self) -> tuple | None:
        if self.path is None:
            return None
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def refresh(self) -> None:
        """Take the file's new token if it changed (at most one look a second)."""
        now = self._clock()
        if self.path is None or now - self._checked < CHECK_EVERY_SECONDS:
            return
        self._checked = now
        signature = self._signature()
        if signature is None or signature == self._seen or signature == self._refused:
            return
        try:
            token = self._read(self.path)
        except AuthSetupError as error:
            self._refused = signature
            log.warning("service: the token file changed but is not used (%s); the current token stays", error)
            return
        self._seen, self._refused = signature, None
        if token == self.token:
            return
        self._previous = (self.token, now + self.grace)
        self.token = token
        self.rotations += 1
        log.info("service: new token from %s; the previous one is accepted for %g s more", self.path, self.grace)

    def accepts(self, given: str | None) -> bool:
        """``given`` is the current token, or the previous one within its grace (constant-time compares)."""
        if given is None:
            return False
        self.refresh()
        encoded = given.encode("utf-8", "replace")
        ok = hmac.compare_digest(encoded, self.token.encode())
        previous = self._previous
        if previous is not None:
            if self._clock() < previous[1]:
                ok = hmac.compare_digest(encoded, previous[0].encode()) or ok
            else:
                self._previous = None
        return ok
