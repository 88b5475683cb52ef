"""The optimizer service's durable state behind one interface, :class:`PlanStore`:
jobs, immutable versioned plans, each plan's two-phase-commit state, the
coordinator's decision log and epoch, and bounded telemetry summaries.

:func:`open_store` picks the backend from a URL (the ``P2_STORE`` setting):

* ``sqlite:///PATH`` — one SQLite file (WAL, ``synchronous=FULL``); the path is
  everything after the three slashes, so ``sqlite:///service.db`` is relative to
  the working directory and ``sqlite:////var/lib/p2/service.db`` is absolute.
  Without a URL: ``$XDG_STATE_HOME/p2/service.db`` or ``~/.local/state/p2/service.db``.
* ``redis://[:password@]host:port/db`` (``rediss://`` for TLS, ``?prefix=`` for
  the key prefix, ``p2:`` by default) — durable when the server runs with
  ``appendonly yes`` and ``appendfsync always``.

Modules: ``base`` (the interface, :class:`StoredPlan`, the errors),
``validation`` (limits, job ids, documents), ``sqlite_store``, ``redis_store``,
``url`` (parsing, redaction, the default path, :func:`open_store`).

May import: ``errors`` (and the ``redis`` client); never gRPC or FastAPI.
"""

from optimizer_service.service.store.base import (
    PlanStore,
    StoreConflictError,
    StoredPlan,
    StoreError,
    StoreFencedError,
    StoreInputError,
    StoreUnavailableError,
    StoreUrlError,
)
from optimizer_service.service.store.redis_store import DEFAULT_PREFIX, RedisPlanStore
from optimizer_service.service.store.sqlite_store import SqlitePlanStore
from optimizer_service.service.store.url import default_store_path, open_store, parse_store_url, redact_url
from optimizer_service.service.store.validation import JOB_ID_PATTERN, MAX_DOCUMENT_BYTES, MAX_PLAN_BYTES

__all__ = [
    "DEFAULT_PREFIX", "JOB_ID_PATTERN", "MAX_DOCUMENT_BYTES", "MAX_PLAN_BYTES", "PlanStore", "RedisPlanStore",
    "SqlitePlanStore", "StoreConflictError", "StoreError", "StoreFencedError", "StoreInputError", "StoreUnavailableError",
    "StoreUrlError", "StoredPlan", "default_store_path", "open_store", "parse_store_url", "redact_url",
]
