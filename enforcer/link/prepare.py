"""Building the plans the optimizer service prepares, off the training thread.

Phase one of the two-phase commit (``optimizer_service/control/PROTOCOL.md``
§2): a rank votes yes only once the plan's channel backends are made. That is
collective among each backend's members, and slow (a gloo rendezvous), so it
runs on a *builder thread* per plan — never on the training thread — and the
runtimes it makes (:class:`~enforcer.runtime.plan_groups.PlanRuntimes`: the default
group's and every subgroup's the plan names) are kept, not started, until the
in-band check switches to them (:mod:`enforcer.link.switching`).

Two things make builds of one version meet on every rank:

* **Store keys named by the version.** Versions are unique within a job, so the
  backends' keys are ``p2svc/v{version}/ch{channel}/{members}/`` (a subgroup's
  under ``p2svc/v{version}/g{ranks}/``) however many plans each rank installed
  before (``install_plan`` counts installs instead).
* **A ready barrier first.** A rank whose validation fails votes no without
  building, and its peers would wait in the rendezvous for it. So before making
  any backend, each rank sets ``p2svc/v{version}/ready/{rank}`` and waits
  (polling ``store.check``) until every rank of the job has: at most
  ``P2_PREPARE_TIMEOUT`` seconds, and not after an Abort of the version
  (:meth:`PreparedPlans.discard`). Either way the build reports
  ``Built(version, False, reason)`` and the rank votes no.

Builds use their own connections to the store (``Store.clone``): a TCPStore
client serialises its calls, and the rendezvous' blocking waits must not hold up
the training thread's own store calls (``new_group``), nor another build's. The
connections are pooled — one per build running at once, reused by later builds —
because a fresh TCPStore connection per build made every fourth or fifth build
stall for 5 s on all ranks (measured with 8 ranks: 0.12 s builds, then 5.1 s;
none with reused connections).

Limit: a rank that fails *after* the barrier (e.g. a channel's interface is
missing on its host) leaves its peers in the rendezvous until the group's
timeout; they are on builder threads, so training goes on, and the service
aborts the version at its vote deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import torch.distributed as dist

from enforcer.link.default_group import DefaultGroup
from enforcer.runtime import plan_groups
from enforcer.runtime.plan_groups import PlanRuntimes
from optimizer_service.control.participant import Built
from optimizer_service.plan import Plan, PlanError

log = logging.getLogger("enforcer")

#: The ready barrier polls the store this often at first, then up to POLL_MAX.
POLL_FIRST = 0.005
POLL_MAX = 0.1


def store_prefix(version: int) -> str:
    """Where the ranks building ``version`` meet (unique per job: versions never repeat)."""
    return f"p2svc/v{version}/"


class PreparedPlans:
    """The runtimes of plans being built or built for the service, by version.

    :meth:`build` starts a builder thread that reports :class:`Built` through
    its ``report`` callback, after the runtime is in place for :meth:`take`;
    :meth:`discard` stops a build waiting at the barrier, or closes a built
    runtime (on a thread of its own: it may be called on the training thread).
    """

    def __init__(self, group: DefaultGroup, prepare_timeout: float) -> None:
        self.group = group
        self.prepare_timeout = prepare_timeout
        self._lock = threading.Lock()
        self._building: dict[int, threading.Event] = {}      # version -> its abort flag
        self._built: dict[int, PlanRuntimes] = {}
        self._closed = False
        self._connections: list[dist.Store] = []              # idle store connections for builds

    def build(self, version: int, plan: Plan, report: Callable[[Built], None]) -> None:
        """Build ``plan`` on a builder thread, then ``report`` the outcome."""
        abort = threading.Event()
        with self._lock:
            if self._closed:
                return
            self._building[version] = abort
        threading.Thread(target=self._build, args=(version, plan, abort, report), daemon=True,
                         name=f"p2enforcer-build-v{version}").start()

    def discard(self, version: int) -> None:
        """Stop building ``version`` (if it waits at the barrier) and free what was built."""
        with self._lock:
            abort = self._building.get(version)
            runtime = self._built.pop(version, None)
        if abort is not None:
            abort.set()
        if runtime is not None:
            threading.Thread(target=runtime.close, daemon=True, name=f"p2enforcer-discard-v{version}").start()

    def take(self, version: int) -> PlanRuntimes | None:
        """The built runtimes of ``version``, handed over (not started), or None."""
        with self._lock:
            return self._built.pop(version, None)

    def held(self) -> tuple[int, ...]:
        with self._lock:
            return tuple(sorted(self._built))

    def close(self) -> None:
        """Stop every build and free every runtime not yet taken (the link is closing)."""
        with self._lock:
            self._closed = True
            aborts = list(self._building.values())
            runtimes = list(self._built.values())
            self._built.clear()
        for abort in aborts:
            abort.set()
        for runtime in runtimes:
            runtime.close()

    # ------------------------------------------------------------ the builder
    def _build(self, version: int, plan: Plan, abort: threading.Event, report: Callable[[Built], None]) -> None:
        built, reason = None, ""
        started = time.perf_counter()
        with self._lock:
            connection = self._connections.pop() if self._connections else None
        try:
            if connection is None:
                connection = _own_connection(self.group.store)
            store = dist.PrefixStore(store_prefix(version), connection)
            reason = self._meet(store, version, abort)
            if not reason:
                built = plan_groups.build(self.group, plan, store)
        except PlanError as error:
            reason = str(error)
        except Exception as error:  # noqa: BLE001 — a failed build is a no vote, never a dead thread
            log.exception("p2enforcer: building plan v%d failed", version)
            reason = f"{type(error).__name__}: {error}".splitlines()[0]
        with self._lock:
            self._building.pop(version, None)
            if connection is not None:
                self._connections.append(connection)
            closed = self._closed
            if built is not None and not closed:
                self._built[version] = built
        if built is not None and closed:
            built.close()
            return
        if built is not None:
            log.info("p2enforcer: rank %d built plan v%d in %.2f s (%d ops on %d group(s), channels %s)",
                     self.group.rank(), version, time.perf_counter() - started, built.ops, len(built.runtimes),
                     built.channels)
        else:
            log.warning("p2enforcer: rank %d did not build plan v%d: %s", self.group.rank(), version, reason)
        report(Built(version, built is not None, reason))

    def _meet(self, store: dist.Store, version: int, abort: threading.Event) -> str:
        """The ready barrier: "" once every rank said it builds ``version``, else why not."""
        size = self.group.size()
        store.set(f"ready/{self.group.rank()}", "1")
        keys = [f"ready/{rank}" for rank in range(size)]
        deadline = time.monotonic() + self.prepare_timeout
        poll = POLL_FIRST
        while not store.check(keys):
            if abort.wait(poll):
                return f"plan v{version} was aborted while waiting for the other ranks to build it"
            if time.monotonic() > deadline:
                missing = [rank for rank in range(size) if not store.check([f"ready/{rank}"])]
                return (f"rank(s) {', '.join(map(str, missing))} did not start building plan v{version} within "
                        f"{self.prepare_timeout:g} s (P2_PREPARE_TIMEOUT)")
            poll = min(POLL_MAX, poll * 1.5)
        return ""


def _own_connection(store: dist.Store) -> dist.Store:
    """A store client of its own where the store can make one (TCPStore), else ``store``."""
    try:
        return store.clone()
    except Exception:  # noqa: BLE001 — stores without clone(): share the caller's
        return store
