"""The plan store in one SQLite file (``sqlite:///PATH``).

Durability: the file is in WAL mode with ``synchronous=FULL``, and every write
is one ``BEGIN IMMEDIATE`` transaction, so a method that returns has its write
on disk, and a process killed at any moment (SIGKILL included) leaves a file
that reopens with every returned write and no partial one. Several processes
may share the file: writers queue on SQLite's lock (``busy_timeout``). Values
only ever reach SQL as bound parameters.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from optimizer_service.service.store.base import (
    BOUNDED_LISTS,
    PlanStore,
    StoreConflictError,
    StoredPlan,
    StoreError,
    StoreUnavailableError,
    fenced,
)
from optimizer_service.service.store.validation import (
    MAX_EPOCH,
    MAX_TELEMETRY_KEEP,
    check_count,
    check_job_id,
    check_plan_json,
    check_submitted,
    check_version,
    decode_document,
    encode_document,
    one_line,
)

SCHEMA_VERSION = 1
BUSY_TIMEOUT_SECONDS = 30.0
_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, document TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plan_versions (
    job_id TEXT PRIMARY KEY, last_version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
    job_id TEXT NOT NULL, version INTEGER NOT NULL, plan_json TEXT NOT NULL, submitted_unix REAL NOT NULL,
    PRIMARY KEY (job_id, version));
CREATE TABLE IF NOT EXISTS plan_states (
    job_id TEXT NOT NULL, version INTEGER NOT NULL, document TEXT NOT NULL,
    PRIMARY KEY (job_id, version));
CREATE TABLE IF NOT EXISTS decision_log (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (job_id, seq));
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS telemetry (
    id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, summary TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS telemetry_by_job ON telemetry (job_id, id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, summary TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, id);
"""


#: A job's rows besides its document (``delete_job``); plan_versions stays, so versions are never reused.
_JOB_TABLES = ("plans", "plan_states", "decision_log", "telemetry", "events")


class SqlitePlanStore(PlanStore):
    """Build it with :meth:`open`; the constructor takes an open connection."""

    def __init__(self, connection: sqlite3.Connection, url: str):
        self._db = connection
        self._lock = threading.Lock()
        self.url = url

    @classmethod
    def open(cls, path: Path, *, url: str | None = None) -> SqlitePlanStore:
        """Open (creating if needed) the store in ``path``; its folder must exist."""
        url = url or f"sqlite:///{path}"
        if not Path(path).parent.is_dir():
            raise StoreUnavailableError(f"store {url} is unavailable: folder {Path(path).parent} does not exist")
        try:
            connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as error:
            raise _unavailable(url, error) from None
        store = cls(connection, url)
        try:
            store._prepare()
        except BaseException:
            connection.close()
            raise
        return store

    def _prepare(self) -> None:
        with self._guard():
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        with self._transaction() as db:
            found = db.execute("PRAGMA user_version").fetchone()[0]
            if found > SCHEMA_VERSION:
                raise StoreError(f"store {self.url} has schema {found}, newer than this version's "
                                 f"{SCHEMA_VERSION}; upgrade p2")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _guard(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as error:
                raise _unavailable(self.url, error) from None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._guard() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass        # the original error says more
                raise

    def put_job(self, job_id: str, document: dict) -> None:
        check_job_id(job_id)
        text = encode_document(document, "job document")
        with self._transaction() as db:
            db.execute("INSERT INTO jobs (job_id, document) VALUES (?, ?) "
                       "ON CONFLICT (job_id) DO UPDATE SET document = excluded.document", (job_id, text))

    def get_job(self, job_id: str) -> dict | None:
        check_job_id(job_id)
        with self._guard() as db:
            row = db.execute("SELECT document FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else decode_document(row[0], f"job {job_id}")

    def list_jobs(self) -> list[dict]:
        with self._guard() as db:
            rows = db.execute("SELECT job_id, document FROM jobs ORDER BY job_id").fetchall()
        return [decode_document(text, f"job {job_id}") for job_id, text in rows]

    def delete_job(self, job_id: str, epoch: int | None = None) -> bool:
        check_job_id(job_id)
        if epoch is not None:
            check_count("epoch", epoch, 1, MAX_EPOCH)
        with self._transaction() as db:         # one transaction: all of the job goes, or none of it
            if epoch is not None:
                row = db.execute("SELECT value FROM counters WHERE name = 'epoch'").fetchone()
                if row is not None and row[0] > epoch:
                    raise fenced(self.url, epoch, row[0])
            existed = db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,)).rowcount > 0
            for table in _JOB_TABLES:
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
        return existed

    def next_version(self, job_id: str) -> int:
        check_job_id(job_id)
        with self._transaction() as db:
            db.execute("INSERT INTO plan_versions (job_id, last_version) VALUES (?, 1) "
                       "ON CONFLICT (job_id) DO UPDATE SET last_version = last_version + 1", (job_id,))
            return db.execute("SELECT last_version FROM plan_versions WHERE job_id = ?", (job_id,)).fetchone()[0]

    def add_plan(self, job_id: str, version: int, plan_json: str, submitted_unix: float) -> None:
        check_job_id(job_id)
        check_version(version)
        check_plan_json(plan_json)
        submitted = check_submitted(submitted_unix)
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM plans WHERE job_id = ? AND version = ?", (job_id, version)).fetchone():
                raise StoreConflictError(f"plan {job_id} v{version} already exists; plans are immutable")
            db.execute("INSERT INTO plans (job_id, version, plan_json, submitted_unix) VALUES (?, ?, ?, ?)",
                       (job_id, version, plan_json, submitted))
            db.execute("INSERT INTO plan_versions (job_id, last_version) VALUES (?, ?) ON CONFLICT (job_id) "
                       "DO UPDATE SET last_version = MAX(last_version, excluded.last_version)", (job_id, version))

    def get_plan(self, job_id: str, version: int) -> StoredPlan | None:
        check_job_id(job_id)
        check_version(version)
        with self._guard() as db:
            row = db.execute("SELECT plan_json, submitted_unix FROM plans WHERE job_id = ? AND version = ?",
                             (job_id, version)).fetchone()
        return None if row is None else StoredPlan(job_id, version, row[0], row[1])

    def list_plans(self, job_id: str) -> list[StoredPlan]:
        check_job_id(job_id)
        with self._guard() as db:
            rows = db.execute("SELECT version, plan_json, submitted_unix FROM plans WHERE job_id = ? "
                              "ORDER BY version", (job_id,)).fetchall()
        return [StoredPlan(job_id, version, text, submitted) for version, text, submitted in rows]

    def put_plan_state(self, job_id: str, version: int, document: dict) -> None:
        check_job_id(job_id)
        check_version(version)
        text = encode_document(document, "plan state")
        with self._transaction() as db:
            db.execute("INSERT INTO plan_states (job_id, version, document) VALUES (?, ?, ?) "
                       "ON CONFLICT (job_id, version) DO UPDATE SET document = excluded.document",
                       (job_id, version, text))

    def get_plan_state(self, job_id: str, version: int) -> dict | None:
        check_job_id(job_id)
        check_version(version)
        with self._guard() as db:
            row = db.execute("SELECT document FROM plan_states WHERE job_id = ? AND version = ?",
                             (job_id, version)).fetchone()
        return None if row is None else decode_document(row[0], f"plan state {job_id} v{version}")

    def append_log(self, job_id: str, record: dict, epoch: int | None = None) -> int:
        check_job_id(job_id)
        if epoch is not None:
            check_count("epoch", epoch, 1, MAX_EPOCH)
        text = encode_document(record, "log record")
        with self._transaction() as db:          # BEGIN IMMEDIATE: the check and the insert are one write
            if epoch is not None:
                row = db.execute("SELECT value FROM counters WHERE name = 'epoch'").fetchone()
                if row is not None and row[0] > epoch:
                    raise fenced(self.url, epoch, row[0])
            seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM decision_log WHERE job_id = ?",
                             (job_id,)).fetchone()[0]
            db.execute("INSERT INTO decision_log (job_id, seq, record) VALUES (?, ?, ?)", (job_id, seq, text))
        return seq

    def read_log(self, job_id: str) -> list[dict]:
        check_job_id(job_id)
        with self._guard() as db:
            rows = db.execute("SELECT seq, record FROM decision_log WHERE job_id = ? ORDER BY seq",
                              (job_id,)).fetchall()
        return [decode_document(text, f"log record {job_id} #{seq}") for seq, text in rows]

    def next_epoch(self) -> int:
        with self._transaction() as db:
            db.execute("INSERT INTO counters (name, value) VALUES ('epoch', 1) "
                       "ON CONFLICT (name) DO UPDATE SET value = value + 1")
            return db.execute("SELECT value FROM counters WHERE name = 'epoch'").fetchone()[0]

    def _push(self, table: str, job_id: str, document: dict, keep: int) -> None:
        """Append to one of the bounded tables (a fixed name, never client text)."""
        check_job_id(job_id)
        check_count("keep", keep, 1, MAX_TELEMETRY_KEEP)
        text = encode_document(document, BOUNDED_LISTS[table])
        with self._transaction() as db:
            db.execute(f"INSERT INTO {table} (job_id, summary) VALUES (?, ?)", (job_id, text))
            db.execute(f"DELETE FROM {table} WHERE job_id = ? AND id <= (SELECT id FROM {table} "
                       "WHERE job_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)", (job_id, job_id, keep))

    def _recent(self, table: str, job_id: str, limit: int) -> list[dict]:
        check_job_id(job_id)
        check_count("limit", limit, 0, MAX_TELEMETRY_KEEP)
        with self._guard() as db:
            rows = db.execute(f"SELECT id, summary FROM (SELECT id, summary FROM {table} WHERE job_id = ? "
                              "ORDER BY id DESC LIMIT ?) ORDER BY id", (job_id, limit)).fetchall()
        return [decode_document(text, f"{BOUNDED_LISTS[table]} {job_id} #{row_id}") for row_id, text in rows]

    def ping(self) -> None:
        with self._guard() as db:
            db.execute("SELECT 1 FROM counters LIMIT 1").fetchall()

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _unavailable(url: str, error: sqlite3.Error) -> StoreUnavailableError:
    return StoreUnavailableError(f"store {url} is unavailable: {one_line(error)}")
