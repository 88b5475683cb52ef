"""Which ``p2 serve`` decides: the leader among several on one Redis store, or
the one service of an SQLite file (ARCHITECTURE.md, "High availability").

**Redis: a lease in the store** (``p2:lease``, :mod:`.store.redis_store`).

* *Take*: a service takes the lease when it is free (never taken, released, or
  expired) together with the store's next epoch, in one atomic script; so every
  leader decides with an epoch above every earlier leader's, and the fence the
  decision log already has (``append_log(..., epoch)``) refuses a stale leader's
  decision. A service whose advertised address holds the lease takes it back at
  once: it is a restart at the same address (the old process cannot be listening
  there any more), and it need not wait out the lease.
* *Renew*: the leader extends the lease every ``renew`` seconds (2 s). A renewal
  that fails (the store unreachable, too slow) is tried again; once no renewal
  has succeeded for ``give_up`` seconds (10 s, counted on the leader's monotonic
  clock from the *start* of its last successful renewal), the leader stops
  acting: the service exits, so its supervisor restarts it as a standby.
* *Take over*: the lease lives ``ttl`` seconds (15 s) from its last renewal, by
  the Redis server's clock; a standby tries to take it every ``renew`` seconds.
  As ``give_up < ttl``, a leader cut off from the store has stopped before a
  standby can hold the lease (this needs clocks that tick at the same rate, not
  synchronised ones); and should it not have (a process paused past both), the
  epoch still fences it.
* A standby answers health checks (NOT_SERVING but for ``liveness``) and refuses
  everything else with UNAVAILABLE naming the leader (:mod:`.leader_gate`);
  clients follow that name (:mod:`optimizer_service.wire.leader`).

The timings are Kubeflow Trainer's leader election's (15 s lease, 10 s renew
deadline, 2 s retry), as the issue asks.

**SQLite: one service per file.** An exclusive ``flock`` on a lock file beside
the database (``PATH.lock``), held for the life of the process and dropped by
the kernel when it dies, even by SIGKILL; a second ``p2 serve`` on the file is
refused with one line. (The lock is not on the database file itself: closing
any descriptor of that file would drop SQLite's own POSIX locks.)
"""

from __future__ import annotations

import abc
import asyncio
import fcntl
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from optimizer_service.errors import InvalidInputError
from optimizer_service.service.store.base import StoreError, StoreUnavailableError
from optimizer_service.service.store.redis_store import RedisPlanStore
from optimizer_service.service.store.url import SqliteTarget, open_store, parse_store_url, sqlite_default

log = logging.getLogger("p2.service")


class StoreInUseError(StoreError, InvalidInputError):
    """A second ``p2 serve`` on one SQLite file (exit 2: run one, or share a Redis store)."""


class LeadershipLostError(StoreError):
    """The leader could not renew its lease in time, or another service holds it now."""


@dataclass(frozen=True)
class LeaseTiming:
    """Seconds: how long a lease lives, how often it is renewed (and a standby tries to
    take it), and how long a leader goes on without a renewal before it stops acting."""

    ttl: float = 15.0
    renew: float = 2.0
    give_up: float = 10.0

    def __post_init__(self) -> None:
        if not 0 < self.renew < self.give_up < self.ttl:
            raise InvalidInputError(f"lease timings renew {self.renew:g} s, give-up {self.give_up:g} s, ttl "
                                    f"{self.ttl:g} s must satisfy 0 < renew < give-up < ttl "
                                    "(P2_LEASE_RENEW_SECONDS, P2_LEASE_GIVE_UP_SECONDS, P2_LEASE_SECONDS)")


class Leadership(abc.ABC):
    """This service's claim to decide. ``leader`` is the leader's address as last seen
    (this service's own once it leads); ``lost`` is set, with ``lost_by``, when it stops leading.
    ``on_standby`` is called once, when :meth:`acquire` first finds another service leading: the
    store answered, so the service runs (as a standby) and may say so; a start that fails says one line."""

    def __init__(self, holder: str) -> None:
        self.holder = holder
        self.leader: str | None = None
        self.leading = False
        self.lost = asyncio.Event()
        self.lost_by: LeadershipLostError | None = None
        self.on_standby: Callable[[], None] = lambda: None

    @abc.abstractmethod
    async def acquire(self) -> int | None:
        """Wait until this service leads; the epoch it leads with (None: take one from the store)."""

    async def keep(self) -> None:
        """Hold the leadership until it is lost (sets ``lost``) or this is cancelled."""

    async def release(self) -> None:
        """Give the leadership up (a clean stop)."""

    def _lose(self, reason: str) -> None:
        self.leading = False
        self.lost_by = LeadershipLostError(f"{self.holder} stopped leading: {reason}; it exits so that its "
                                           "supervisor restarts it as a standby")
        self.lost.set()


class FileLock(Leadership):
    """SQLite: the only service of its file (see the module docstring)."""

    def __init__(self, holder: str, path: Path, url: str) -> None:
        super().__init__(holder)
        self.path = Path(f"{path}.lock")
        self.url = url
        self._fd: int | None = None

    async def acquire(self) -> int | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise StoreUnavailableError(f"store {self.url} is unavailable: cannot open its lock file "
                                        f"{self.path}: {error.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreInUseError(f"store {self.url} is already served by another 'p2 serve' (it holds "
                                  f"{self.path}); stop that one, or run several services on one Redis store "
                                  "(--store redis://...)") from None
        self._fd = fd
        self.leader, self.leading = self.holder, True
        return None

    async def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)          # closing drops the flock
            self._fd = None
        self.leading = False


class RedisLease(Leadership):
    """Redis: the lease (see the module docstring). Its own connection, with commands
    bounded by the renewal period, on its own thread: a slow plan write on the
    store's thread never delays a renewal."""

    def __init__(self, holder: str, store: RedisPlanStore, timing: LeaseTiming,
                 clock=time.monotonic) -> None:
        super().__init__(holder)
        self.store = store
        self.timing = timing
        self.epoch = 0
        self._clock = clock
        self._renewed_at = 0.0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="p2-lease")

    async def _run(self, function, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, function, *args)

    async def acquire(self) -> int | None:
        """Take the lease, or wait as a standby until it can be taken. A store that does not
        answer the first attempt is an error (a wrong URL fails at start); later, a standby
        waits through outages."""
        first, outage = True, False
        while True:
            started = self._clock()
            try:
                epoch, holder = await self._run(self.store.take_lease, self.holder, self.timing.ttl)
            except StoreUnavailableError as error:
                if first:
                    raise
                if not outage:
                    log.warning("service: standby cannot reach the store (%s); trying again every %g s", error,
                                self.timing.renew)
                outage = True
                await asyncio.sleep(self.timing.renew)
                continue
            first, outage = False, False
            if epoch is not None:
                self.epoch, self.leader, self.leading, self._renewed_at = epoch, self.holder, True, started
                log.info("service: %s leads with epoch %d (lease %g s, renewed every %g s)", self.holder, epoch,
                         self.timing.ttl, self.timing.renew)
                return epoch
            if holder != self.leader:
                log.info("service: standby; the leader is %s", holder)
                first, self.leader = self.leader is None, holder
                if first:
                    self.on_standby()
            await asyncio.sleep(self.timing.renew)

    async def keep(self) -> None:
        """Renew every ``renew`` s; stop leading once no renewal succeeded for ``give_up`` s, or at once
        when the lease is someone else's."""
        timing = self.timing
        while self.leading:
            deadline = self._renewed_at + timing.give_up
            await asyncio.sleep(max(0.0, min(timing.renew, deadline - self._clock())))
            started = self._clock()
            if started >= deadline:
                self._lose(f"no renewal of its lease succeeded for {timing.give_up:g} s")
                break
            try:
                renewed = await asyncio.wait_for(self._run(self.store.renew_lease, self.holder, self.epoch,
                                                           timing.ttl), timeout=deadline - started)
            except TimeoutError:
                continue                # the deadline has passed: the next turn stops
            except StoreError as error:
                log.warning("service: renewing the lease failed (%s); stopping in %.0f s unless a renewal "
                            "succeeds", error, max(0.0, deadline - self._clock()))
                continue
            if not renewed:
                self._lose("its lease is held by another service now")
                break
            self._renewed_at = started
        if self.lost_by is not None:
            log.error("service: %s", self.lost_by)

    async def release(self) -> None:
        if self.leading:
            self.leading = False
            try:
                await asyncio.wait_for(self._run(self.store.release_lease, self.holder, self.epoch),
                                       timeout=self.timing.renew)
            except (TimeoutError, StoreError) as error:
                log.warning("service: could not release the lease (%s); a standby takes over when it expires",
                            error)
        self._pool.submit(self.store.close)
        self._pool.shutdown(wait=False)


def leadership_for(store_url: str | None, default_path: Path | None, holder: str, timing: LeaseTiming) -> Leadership:
    """The leadership for the store ``store_url`` names (as :func:`~.store.url.open_store` reads it)."""
    if store_url is not None and store_url.strip():
        target = parse_store_url(store_url.strip())
        if isinstance(target, SqliteTarget):
            path = target.path.absolute()
            return FileLock(holder, path, f"sqlite:///{path}")
        store = open_store(store_url, command_timeout=timing.renew)
        assert isinstance(store, RedisPlanStore)
        return RedisLease(holder, store, timing)
    path = sqlite_default(default_path)
    return FileLock(holder, path, f"sqlite:///{path}")
