"""Store URLs (the ``P2_STORE`` setting): parsing, redaction, the default path, and
:func:`open_store`.

* ``sqlite:///PATH`` — everything after the three slashes is the file's path, as
  in SQLAlchemy: ``sqlite:///service.db`` is relative to the working directory,
  ``sqlite:////var/lib/p2/service.db`` (four slashes) is absolute. The folder
  must exist; the file is created.
* ``redis://[[user]:password@]host[:port][/db][?prefix=p2:]`` (port 6379, db 0
  and prefix ``p2:`` by default); ``rediss://`` is the same over TLS. Percent-encode
  a password holding ``@ : /``.
* no URL: SQLite in ``<state dir>/p2/service.db`` (:func:`default_store_path`),
  its folder created if needed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from optimizer_service.service.store.base import PlanStore, StoreInputError, StoreUnavailableError, StoreUrlError
from optimizer_service.service.store.redis_store import DEFAULT_PREFIX, RedisPlanStore, check_prefix
from optimizer_service.service.store.sqlite_store import SqlitePlanStore

SETTING = "P2_STORE"
DEFAULT_REDIS_PORT = 6379
_HINT = "use sqlite:///PATH or redis://[:password@]host:port/db"
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^@/?#]*)@")


@dataclass(frozen=True)
class SqliteTarget:
    path: Path          # as written: relative paths are taken against the working directory when opened


@dataclass(frozen=True)
class RedisTarget:
    host: str
    port: int
    db: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool
    prefix: str
    url: str            # password redacted


def redact_url(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***``
    (``redis://:s3cret@h:6379/0`` → ``redis://:***@h:6379/0``); works on malformed URLs too."""
    match = _USERINFO.match(url)
    if not match:
        return url
    user, colon, _ = match.group(2).partition(":")
    return f"{match.group(1)}{user}:***@{url[match.end():]}" if colon else f"{match.group(1)}***@{url[match.end():]}"


def default_store_path(environ: Mapping[str, str], home: Path) -> Path:
    """``$XDG_STATE_HOME/p2/service.db``, or ``~/.local/state/p2/service.db`` where
    XDG_STATE_HOME is unset or not absolute (as the XDG spec asks)."""
    state = environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and Path(state).is_absolute() else home / ".local" / "state"
    return base / "p2" / "service.db"


def _fail(url: str, reason: str) -> StoreUrlError:
    return StoreUrlError(f"{SETTING}={redact_url(url)!r}: {reason}")


def parse_store_url(url: str) -> SqliteTarget | RedisTarget:
    """What ``url`` names, or a one-line :class:`StoreUrlError` (password redacted)."""
    if not isinstance(url, str):
        raise StoreUrlError(f"{SETTING} must be a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition(":")
    scheme = scheme.lower()
    if not sep or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise _fail(url, f"not a URL; {_HINT}")
    if scheme == "sqlite":
        return _parse_sqlite(url, rest)
    if scheme in ("redis", "rediss"):
        return _parse_redis(url, scheme == "rediss")
    raise _fail(url, f"unsupported scheme {scheme!r}; {_HINT}")


def _parse_sqlite(url: str, rest: str) -> SqliteTarget:
    if not rest.startswith("///"):
        raise _fail(url, "a sqlite URL has no host; use sqlite:///relative.db or sqlite:////absolute/path.db")
    path = rest[3:]
    if not path:
        raise _fail(url, "no file path; use sqlite:///relative.db or sqlite:////absolute/path.db")
    if "?" in path or "#" in path:
        raise _fail(url, "sqlite URLs take no options ('?' or '#')")
    if path == ":memory:":
        raise _fail(url, "an in-memory database keeps nothing; name a file")
    return SqliteTarget(Path(path))


def _parse_redis(url: str, tls: bool) -> RedisTarget:
    parts = urlsplit(url)
    if parts.fragment:
        raise _fail(url, "redis URLs take no '#' part")
    if not parts.hostname:
        raise _fail(url, "no host; use redis://[:password@]host:port/db")
    try:
        port = DEFAULT_REDIS_PORT if parts.port is None else parts.port
    except ValueError:
        raise _fail(url, "the port must be a number from 1 to 65535") from None
    if not 1 <= port <= 65535:
        raise _fail(url, "the port must be a number from 1 to 65535")
    database = parts.path.lstrip("/")
    if "/" in database or (database and not database.isdigit()):
        raise _fail(url, f"the database must be a number (redis://host:port/0), not {database!r}")
    if parts.username and parts.password is None:
        raise _fail(url, "a user without a password; write redis://[user]:password@host:port/db")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {"prefix"})
    if unknown:
        raise _fail(url, f"unknown option {unknown[0]!r}; the only option is prefix (?prefix=p2:)")
    prefix = options.get("prefix", DEFAULT_PREFIX)
    try:
        check_prefix(prefix)
    except StoreInputError as error:
        raise _fail(url, str(error)) from None
    return RedisTarget(host=parts.hostname, port=port, db=int(database or 0),
                       username=unquote(parts.username) if parts.username else None,
                       password=unquote(parts.password) if parts.password is not None else None,
                       tls=tls, prefix=prefix, url=redact_url(url))


def sqlite_default(default_path: Path | None) -> Path:
    """The SQLite file a store without a URL lives in: ``default_path``, else
    :func:`default_store_path` of this process's environment."""
    return (default_path or default_store_path(os.environ, Path.home())).absolute()


def open_store(url: str | None, *, default_path: Path | None = None,
               command_timeout: float | None = None) -> PlanStore:
    """Open the store ``url`` names; with no URL, SQLite at :func:`sqlite_default`, creating
    its folder. SQLite opens the file now; Redis connects on the first call (``ping`` checks),
    and ``command_timeout`` bounds each of its commands (default: a 64 MiB plan's write)."""
    if url is None or not url.strip():
        path = sqlite_default(default_path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreUnavailableError(f"store sqlite:///{path} is unavailable: cannot create its folder "
                                        f"{path.parent}: {error.strerror}") from None
        return SqlitePlanStore.open(path)
    target = parse_store_url(url.strip())
    if isinstance(target, SqliteTarget):
        path = target.path.absolute()
        return SqlitePlanStore.open(path, url=f"sqlite:///{path}")
    timeout = {} if command_timeout is None else {"command_timeout": command_timeout}
    return RedisPlanStore.connect(target.host, target.port, target.db, url=target.url, username=target.username,
                                  password=target.password, tls=target.tls, prefix=target.prefix, **timeout)
