"""The plan store on a Redis server (``redis://[[user]:password@]host:port/db``,
``rediss://`` for TLS).

Durability is the server's: run it with ``appendonly yes`` and ``appendfsync
always``, so Redis writes each command to its append-only file and fsyncs it
before it replies; a write whose method returned then survives a crash of the
server or its machine. With the defaults (``appendfsync everysec`` or no AOF)
the last second of decisions can be lost.

Every key lies under a prefix (default ``p2:``); validated job ids (no spaces,
no braces, at most 128 characters) are the only client text in a key, so no
client value can name another key. A job's keys:

* ``p2:jobs`` (hash: job id → document), ``p2:versions`` (hash: job id → last
  reserved version), ``p2:epoch`` (integer), ``p2:lease`` (``"EPOCH HOLDER"``
  with a time to live: the leader of several services on this store, see
  :mod:`optimizer_service.service.leadership`);
* ``p2:plans:JOB`` / ``p2:plan_submitted:JOB`` / ``p2:plan_state:JOB`` (hashes by version);
* ``p2:log:JOB`` (list, append-only: the sequence number is the length after
  the append), ``p2:telemetry:JOB`` and ``p2:events:JOB`` (lists trimmed to the
  last ``keep``).

Deleting a job drops its field of ``p2:jobs`` and every ``...:JOB`` key in one
Lua script; its field of ``p2:versions`` stays, so no version is ever reused.

Writes that touch several keys run as one Lua script or MULTI/EXEC. Commands
are not retried: a retried append could be applied twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from optimizer_service.service.store.base import (
    BOUNDED_LISTS,
    PlanStore,
    StoreConflictError,
    StoredPlan,
    StoreError,
    StoreInputError,
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
    preview,
)

DEFAULT_PREFIX = "p2:"
PREFIX_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,64}")
CONNECT_TIMEOUT_SECONDS = 5.0
COMMAND_TIMEOUT_SECONDS = 60.0      # a 64 MiB plan, fsynced by the server before it answers

# KEYS: plans, submitted, versions; ARGV: version, plan text, submitted, job id.
_ADD_PLAN = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local last = tonumber(redis.call('HGET', KEYS[3], ARGV[4]) or '0')
if last < tonumber(ARGV[1]) then redis.call('HSET', KEYS[3], ARGV[4], ARGV[1]) end
return 1
"""

# KEYS: epoch, log; ARGV: the appender's epoch, record text. {0, current} when fenced.
_FENCED_APPEND = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current > tonumber(ARGV[1]) then return {0, current} end
return redis.call('RPUSH', KEYS[2], ARGV[2])
"""

# The leadership lease (KEYS: lease, epoch). Take: ARGV holder, ttl ms. Free, or held by this holder
# (the same address restarted: its old process cannot be listening there any more), the lease is taken
# with the next epoch, {1, epoch}; held by another, {0, "EPOCH HOLDER"}.
_TAKE_LEASE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, string.find(held, ' ') + 1) ~= ARGV[1] then return {0, held} end
local epoch = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], epoch .. ' ' .. ARGV[1], 'PX', ARGV[2])
return {1, epoch}
"""
# Renew: ARGV "EPOCH HOLDER", ttl ms; 1 when the lease was still exactly that (and the store's epoch
# still that epoch), else 0. Release: ARGV "EPOCH HOLDER"; dropped only while it is ours.
_RENEW_LEASE = """
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= string.sub(held, 1, string.find(held, ' ') - 1) then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


# KEYS: epoch, jobs, then the job's plans, plan_submitted, plan_state, log, telemetry, events;
# ARGV: the deleter's epoch ('' for none), job id. {0, current} when fenced, else {1, existed}.
_DELETE_JOB = """
if ARGV[1] ~= '' then
  local current = tonumber(redis.call('GET', KEYS[1]) or '0')
  if current > tonumber(ARGV[1]) then return {0, current} end
end
local existed = redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
return {1, existed}
"""
_JOB_KEYS = ("plans", "plan_submitted", "plan_state", "log", "telemetry", "events")


def _ttl_ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
        raise StoreInputError(f"key prefix {preview(prefix)} is invalid: use 1-64 characters of A-Z a-z 0-9 . _ : -")
    return prefix


class RedisPlanStore(PlanStore):
    """Build it with :meth:`connect` (which does no I/O until the first call) or
    from a ``redis.Redis`` client made with ``decode_responses=True``."""

    def __init__(self, client: redis.Redis, url: str, *, prefix: str = DEFAULT_PREFIX, secret: str | None = None):
        self._client = client
        self._prefix = check_prefix(prefix)
        self._secret = secret           # scrubbed from error messages, should a server ever echo it
        self._add_plan = client.register_script(_ADD_PLAN)
        self._delete_job = client.register_script(_DELETE_JOB)
        self.url = url

    @classmethod
    def connect(cls, host: str, port: int, db: int, *, url: str, username: str | None = None,
                password: str | None = None, tls: bool = False, prefix: str = DEFAULT_PREFIX,
                command_timeout: float = COMMAND_TIMEOUT_SECONDS) -> RedisPlanStore:
        client = redis.Redis(host=host, port=port, db=db, username=username, password=password, ssl=tls,
                             decode_responses=True,
                             socket_connect_timeout=min(CONNECT_TIMEOUT_SECONDS, command_timeout),
                             socket_timeout=command_timeout, retry=Retry(NoBackoff(), 0))
        return cls(client, url, prefix=prefix, secret=password)

    def _key(self, kind: str, job_id: str | None = None) -> str:
        return f"{self._prefix}{kind}" if job_id is None else f"{self._prefix}{kind}:{job_id}"

    @contextmanager
    def _guard(self) -> Iterator[redis.Redis]:
        try:
            yield self._client
        except redis.RedisError as error:
            reason = one_line(error)
            if self._secret:
                reason = reason.replace(self._secret, "***")
            raise StoreUnavailableError(f"store {self.url} is unavailable: {reason}") from None
        except UnicodeDecodeError:
            raise StoreError(f"store {self.url} holds a value that is not UTF-8 text under {self._prefix}") from None

    def put_job(self, job_id: str, document: dict) -> None:
        check_job_id(job_id)
        text = encode_document(document, "job document")
        with self._guard() as client:
            client.hset(self._key("jobs"), job_id, text)

    def get_job(self, job_id: str) -> dict | None:
        check_job_id(job_id)
        with self._guard() as client:
            text = client.hget(self._key("jobs"), job_id)
        return None if text is None else decode_document(text, f"job {job_id}")

    def list_jobs(self) -> list[dict]:
        with self._guard() as client:
            found = client.hgetall(self._key("jobs"))
        return [decode_document(found[job_id], f"job {job_id}") for job_id in sorted(found)]

    def delete_job(self, job_id: str, epoch: int | None = None) -> bool:
        check_job_id(job_id)
        if epoch is not None:
            check_count("epoch", epoch, 1, MAX_EPOCH)
        keys = [self._key("epoch"), self._key("jobs"), *(self._key(kind, job_id) for kind in _JOB_KEYS)]
        with self._guard():             # one Lua script: Redis runs it atomically, all of the job or none
            done, value = self._delete_job(keys=keys, args=["" if epoch is None else str(epoch), job_id])
        if not done:
            raise fenced(self.url, epoch, int(value))
        return bool(value)

    def next_version(self, job_id: str) -> int:
        check_job_id(job_id)
        with self._guard() as client:
            return int(client.hincrby(self._key("versions"), job_id, 1))

    def add_plan(self, job_id: str, version: int, plan_json: str, submitted_unix: float) -> None:
        check_job_id(job_id)
        check_version(version)
        check_plan_json(plan_json)
        submitted = check_submitted(submitted_unix)
        keys = [self._key("plans", job_id), self._key("plan_submitted", job_id), self._key("versions")]
        with self._guard():
            added = self._add_plan(keys=keys, args=[str(version), plan_json, repr(submitted), job_id])
        if not added:
            raise StoreConflictError(f"plan {job_id} v{version} already exists; plans are immutable")

    def get_plan(self, job_id: str, version: int) -> StoredPlan | None:
        check_job_id(job_id)
        check_version(version)
        with self._guard() as client:
            pipe = client.pipeline(transaction=True)
            pipe.hget(self._key("plans", job_id), str(version))
            pipe.hget(self._key("plan_submitted", job_id), str(version))
            text, submitted = pipe.execute()
        return None if text is None else StoredPlan(job_id, version, text, float(submitted))

    def list_plans(self, job_id: str) -> list[StoredPlan]:
        check_job_id(job_id)
        with self._guard() as client:
            pipe = client.pipeline(transaction=True)
            pipe.hgetall(self._key("plans", job_id))
            pipe.hgetall(self._key("plan_submitted", job_id))
            texts, submitted = pipe.execute()
        return [StoredPlan(job_id, int(version), texts[version], float(submitted[version]))
                for version in sorted(texts, key=int)]

    def put_plan_state(self, job_id: str, version: int, document: dict) -> None:
        check_job_id(job_id)
        check_version(version)
        text = encode_document(document, "plan state")
        with self._guard() as client:
            client.hset(self._key("plan_state", job_id), str(version), text)

    def get_plan_state(self, job_id: str, version: int) -> dict | None:
        check_job_id(job_id)
        check_version(version)
        with self._guard() as client:
            text = client.hget(self._key("plan_state", job_id), str(version))
        return None if text is None else decode_document(text, f"plan state {job_id} v{version}")

    def append_log(self, job_id: str, record: dict, epoch: int | None = None) -> int:
        check_job_id(job_id)
        if epoch is not None:
            check_count("epoch", epoch, 1, MAX_EPOCH)
        text = encode_document(record, "log record")
        with self._guard() as client:
            if epoch is None:
                return int(client.rpush(self._key("log", job_id), text))
            # One Lua script: Redis runs it atomically, so no newer epoch can slip
            # between the check and the append.
            answer = client.eval(_FENCED_APPEND, 2, self._key("epoch"), self._key("log", job_id), epoch, text)
        if isinstance(answer, list):
            raise fenced(self.url, epoch, int(answer[1]))
        return int(answer)

    def read_log(self, job_id: str) -> list[dict]:
        check_job_id(job_id)
        with self._guard() as client:
            texts = client.lrange(self._key("log", job_id), 0, -1)
        return [decode_document(text, f"log record {job_id} #{seq}") for seq, text in enumerate(texts, 1)]

    def next_epoch(self) -> int:
        with self._guard() as client:
            return int(client.incr(self._key("epoch")))

    # ------------------------------------------------------- the leadership lease
    def take_lease(self, holder: str, ttl_seconds: float) -> tuple[int | None, str]:
        """Take the lease for ``holder`` with the next epoch, atomically: ``(epoch, holder)``;
        ``(None, current holder)`` while another holds it."""
        with self._guard() as client:
            taken, value = client.eval(_TAKE_LEASE, 2, self._key("lease"), self._key("epoch"), holder,
                                       _ttl_ms(ttl_seconds))
        if taken:
            return int(value), holder
        return None, str(value).split(" ", 1)[-1]

    def renew_lease(self, holder: str, epoch: int, ttl_seconds: float) -> bool:
        """Extend the lease ``holder`` took at ``epoch``; False once it is not (only) theirs any more."""
        with self._guard() as client:
            return bool(client.eval(_RENEW_LEASE, 2, self._key("lease"), self._key("epoch"), f"{epoch} {holder}",
                                    _ttl_ms(ttl_seconds)))

    def release_lease(self, holder: str, epoch: int) -> bool:
        """Drop the lease if ``holder`` still holds it at ``epoch`` (a clean stop: a standby need not wait)."""
        with self._guard() as client:
            return bool(client.eval(_RELEASE_LEASE, 1, self._key("lease"), f"{epoch} {holder}"))

    def lease_holder(self) -> str | None:
        """Who holds the lease now (None: nobody)."""
        with self._guard() as client:
            held = client.get(self._key("lease"))
        return None if held is None else held.split(" ", 1)[-1]

    def _push(self, name: str, job_id: str, document: dict, keep: int) -> None:
        check_job_id(job_id)
        check_count("keep", keep, 1, MAX_TELEMETRY_KEEP)
        text = encode_document(document, BOUNDED_LISTS[name])
        key = self._key(name, job_id)
        with self._guard() as client:
            pipe = client.pipeline(transaction=True)
            pipe.rpush(key, text)
            pipe.ltrim(key, -keep, -1)
            pipe.execute()

    def _recent(self, name: str, job_id: str, limit: int) -> list[dict]:
        check_job_id(job_id)
        check_count("limit", limit, 0, MAX_TELEMETRY_KEEP)
        if limit == 0:
            return []
        with self._guard() as client:
            texts = client.lrange(self._key(name, job_id), -limit, -1)
        return [decode_document(text, f"{BOUNDED_LISTS[name]} of {job_id}") for text in texts]

    def ping(self) -> None:
        with self._guard() as client:
            client.ping()

    def close(self) -> None:
        self._client.close()
