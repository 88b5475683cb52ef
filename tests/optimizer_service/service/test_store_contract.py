"""The plan store's contract (optimizer_service.service.store), one suite run on
both backends: SQLite on a fresh file per test and a real ``redis-server``
(append-only, fsync always) with a fresh key prefix per test. "Reopen" means a
new store on the same file or server. Crash tests SIGKILL a SQLite writer and a
Redis server."""

from __future__ import annotations

import ast
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from optimizer_service.errors import InvalidInputError
from optimizer_service.service.store import (
    MAX_DOCUMENT_BYTES,
    MAX_PLAN_BYTES,
    StoreConflictError,
    StoredPlan,
    StoreFencedError,
    StoreInputError,
    StoreUnavailableError,
    StoreUrlError,
    default_store_path,
    open_store,
    parse_store_url,
    redact_url,
)
from tests.support.redis_server import MISSING, redis_server_path, start_redis

ROOT = Path(__file__).resolve().parents[3]
STORE_PACKAGE = ROOT / "optimizer_service" / "service" / "store"


@pytest.fixture(params=["sqlite", "redis"])
def reopen(request, tmp_path):
    """Opens a new store on this test's data on every call (all closed at the end)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'service.db'}"
    else:
        url = f"{request.getfixturevalue('redis_server').url}?prefix=t-{uuid.uuid4().hex[:12]}:"
    opened = []

    def open_again():
        opened.append(open_store(url))
        return opened[-1]

    open_again.url = url
    yield open_again
    for store in opened:
        store.close()


@pytest.fixture
def store(reopen):
    return reopen()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def assert_one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert message and "\n" not in message
    return message


# --- jobs -------------------------------------------------------------------------------------------------------


def test_jobs_are_upserted_and_listed_by_id(store):
    store.put_job("job-b", {"name": "b"})
    store.put_job("job-a", {"name": "a", "ranks": 4})
    store.put_job("job-a", {"name": "a", "ranks": 8})
    assert store.get_job("job-a") == {"name": "a", "ranks": 8}
    assert store.get_job("job-c") is None
    assert store.list_jobs() == [{"name": "a", "ranks": 8}, {"name": "b"}]


def test_documents_round_trip_as_json(store):
    document = {"text": "é😀\x00\r\n\"'", "float": 0.1, "big": 2**62, "none": None, "flag": True,
                "nested": {"list": [1, [2, {"x": -1.5e-300}]]}, "tuple": (1, 2)}
    store.put_job("job", document)
    assert store.get_job("job") == dict(document, tuple=[1, 2])


def test_job_ids_that_share_a_prefix_keep_separate_data(store):
    for job in ("a", "a:log", "a:1"):
        store.put_job(job, {"job": job})
        store.add_plan(job, 1, f"plan of {job}", 1.0)
        store.append_log(job, {"job": job})
        store.add_telemetry(job, {"job": job})
        store.add_event(job, {"job": job})
    for job in ("a", "a:log", "a:1"):
        assert store.get_job(job) == {"job": job}
        assert [plan.plan_json for plan in store.list_plans(job)] == [f"plan of {job}"]
        assert store.read_log(job) == [{"job": job}]
        assert store.recent_telemetry(job) == [{"job": job}]
        assert store.recent_events(job) == [{"job": job}]


def _fill_job(store, job: str) -> None:
    store.put_job(job, {"job": job})
    store.add_plan(job, store.next_version(job), f"plan of {job}", 1.0)
    store.put_plan_state(job, 1, {"state": job})
    store.append_log(job, {"job": job})
    store.add_telemetry(job, {"job": job})
    store.add_event(job, {"job": job})


def _holds(store, job: str) -> list[str]:
    """Which of the job's parts the store still has."""
    parts = {"document": store.get_job(job) is not None, "plans": bool(store.list_plans(job)),
             "plan state": store.get_plan_state(job, 1) is not None, "log": bool(store.read_log(job)),
             "telemetry": bool(store.recent_telemetry(job)), "events": bool(store.recent_events(job))}
    return [name for name, held in parts.items() if held]


def test_a_deleted_job_leaves_nothing_but_its_version_counter(reopen):
    store = reopen()
    for job in ("a", "a:log", "a:1"):           # ids that share a prefix: only the one named goes
        _fill_job(store, job)
    assert store.delete_job("a") is True
    again = reopen()
    assert _holds(again, "a") == []
    for job in ("a:log", "a:1"):
        assert len(_holds(again, job)) == 6, job
    assert [document["job"] for document in again.list_jobs()] == ["a:1", "a:log"]
    assert again.next_version("a") == 2          # a version number is never given twice, across a delete too
    assert again.delete_job("a") is False        # nothing left: no error, says so
    assert again.delete_job("never") is False


def test_a_replaced_coordinator_deletes_nothing(reopen):
    old = reopen()
    ours = old.next_epoch()
    _fill_job(old, "job")
    assert old.delete_job("other", epoch=ours) is False     # its own epoch: allowed
    taken = reopen().next_epoch()
    with pytest.raises(StoreFencedError, match=f"epoch {taken} > this one's {ours}"):
        old.delete_job("job", epoch=ours)
    assert len(_holds(reopen(), "job")) == 6
    with pytest.raises(StoreInputError, match="epoch"):
        old.delete_job("job", epoch=0)


# --- plans ------------------------------------------------------------------------------------------------------


def test_versions_are_unique_and_increase_across_reopen(reopen):
    store = reopen()
    assert [store.next_version("job") for _ in range(3)] == [1, 2, 3]
    store.add_plan("job", 7, "{}", 1.0)                     # stored without a reservation: still counted
    assert store.next_version("job") == 8
    assert store.next_version("other") == 1
    store.add_plan("job", 5, "{}", 1.0)                     # an older version does not move the counter back
    assert reopen().next_version("job") == 9


def test_plans_are_immutable_and_keep_their_text_exactly(store):
    text = '{"plan": "é😀\\u0000"}\r\n\t \x00 trailing  '
    store.add_plan("job", 2, text, 1716400000.123456789)
    store.add_plan("job", 1, "first", 1.5)
    with pytest.raises(StoreConflictError) as error:
        store.add_plan("job", 2, "replacement", 2.0)
    assert "job v2" in assert_one_line(error)
    assert store.get_plan("job", 2) == StoredPlan("job", 2, text, 1716400000.123456789)
    assert store.get_plan("job", 3) is None
    assert store.get_plan("other", 1) is None
    assert store.list_plans("job") == [StoredPlan("job", 1, "first", 1.5), StoredPlan("job", 2, text, 1716400000.123456789)]
    assert store.list_plans("other") == []


def test_the_largest_plan_round_trips(store):
    text = "é" * (MAX_PLAN_BYTES // 2)                     # exactly MAX_PLAN_BYTES in UTF-8
    store.add_plan("job", 1, text, 1.0)
    assert store.get_plan("job", 1).plan_json == text


def test_plan_state_is_upserted_per_version(store):
    store.put_plan_state("job", 1, {"phase": "prepared", "votes": {"0": "yes"}})
    store.put_plan_state("job", 1, {"phase": "committed"})
    store.put_plan_state("job", 2, {"phase": "aborted"})
    assert store.get_plan_state("job", 1) == {"phase": "committed"}
    assert store.get_plan_state("job", 2) == {"phase": "aborted"}
    assert store.get_plan_state("job", 3) is None


# --- the decision log and the epoch -----------------------------------------------------------------------------


def test_the_log_keeps_append_order_and_numbers_across_reopen(reopen):
    store = reopen()
    assert [store.append_log("job", {"i": i}) for i in range(1, 6)] == [1, 2, 3, 4, 5]
    assert store.append_log("other", {"i": 0}) == 1
    again = reopen()
    assert again.read_log("job") == [{"i": i} for i in range(1, 6)]
    assert again.append_log("job", {"i": 6}) == 6
    assert store.read_log("job")[-1] == {"i": 6}
    assert again.read_log("nobody") == []


def test_epochs_increase_across_reopen(reopen):
    store = reopen()
    assert [store.next_epoch(), store.next_epoch()] == [1, 2]
    assert reopen().next_epoch() == 3


def test_a_replaced_coordinator_is_fenced_out_of_the_log(reopen):
    old = reopen()
    ours = old.next_epoch()
    assert old.append_log("job", {"i": 1}, epoch=ours) == 1
    newer = reopen()
    taken = newer.next_epoch()                       # a restarted service takes the store over
    with pytest.raises(StoreFencedError, match=f"epoch {taken} > this one's {ours}") as refused:
        old.append_log("job", {"i": 2}, epoch=ours)
    assert (refused.value.ours, refused.value.current) == (ours, taken)
    assert newer.read_log("job") == [{"i": 1}]       # nothing written
    assert newer.append_log("job", {"i": 3}, epoch=taken) == 2
    assert old.append_log("job", {"i": 4}) == 3      # unfenced appends (tools, tests) still work
    with pytest.raises(StoreInputError, match="epoch"):
        newer.append_log("job", {}, epoch=0)


def test_fenced_appends_race_a_takeover_without_a_late_write(reopen):
    """Appends from the old epoch in one thread while another takes a new
    epoch: every append the store accepted came before the takeover."""
    old, newer = reopen(), reopen()
    ours = old.next_epoch()
    accepted, stop = [], threading.Event()

    def append() -> None:
        deadline = time.monotonic() + 60        # a count could run out before the takeover gets the lock
        i = 0
        while time.monotonic() < deadline:
            i += 1
            try:
                accepted.append(old.append_log("job", {"i": i}, epoch=ours))
            except StoreFencedError:
                stop.set()
                return

    writer = threading.Thread(target=append)
    writer.start()
    while not accepted:
        time.sleep(0.001)
    newer.next_epoch()
    marker = newer.append_log("job", {"takeover": True})
    writer.join(90)
    assert stop.is_set()
    assert all(seq < marker for seq in accepted), "an append of the old epoch landed after the takeover"


# --- telemetry --------------------------------------------------------------------------------------------------


def test_telemetry_keeps_the_most_recent_in_order(store):
    for i in range(10):
        store.add_telemetry("job", {"iteration": i}, keep=4)
    store.add_telemetry("other", {"iteration": 0})
    assert store.recent_telemetry("job") == [{"iteration": i} for i in range(6, 10)]
    assert store.recent_telemetry("job", limit=2) == [{"iteration": 8}, {"iteration": 9}]
    assert store.recent_telemetry("job", limit=0) == []
    assert store.recent_telemetry("other") == [{"iteration": 0}]


def test_events_keep_the_most_recent_in_order_apart_from_telemetry(reopen):
    store = reopen()
    for i in range(10):
        store.add_event("job", {"kind": "replan", "reason": f"number {i}"}, keep=4)
    store.add_telemetry("job", {"iteration": 0})
    assert [event["reason"] for event in store.recent_events("job")] == [f"number {i}" for i in range(6, 10)]
    assert store.recent_events("job", limit=1) == [{"kind": "replan", "reason": "number 9"}]
    assert reopen().recent_events("job", limit=0) == []
    assert reopen().recent_telemetry("job") == [{"iteration": 0}]
    assert store.recent_events("other") == []


# --- refusals ---------------------------------------------------------------------------------------------------

def deeply_nested(depth: int) -> list:
    nested: list = []
    for _ in range(depth):
        nested = [nested]
    return nested


BAD_JOB_IDS = ["", "a b", "../etc", "-job", ".job", "a" * 129, "job\n", "job{x}", "jöb", "job*", None, 7]
ALL_CALLS = {
    "put_job": lambda store, job: store.put_job(job, {}),
    "get_job": lambda store, job: store.get_job(job),
    "next_version": lambda store, job: store.next_version(job),
    "add_plan": lambda store, job: store.add_plan(job, 1, "{}", 1.0),
    "get_plan": lambda store, job: store.get_plan(job, 1),
    "list_plans": lambda store, job: store.list_plans(job),
    "put_plan_state": lambda store, job: store.put_plan_state(job, 1, {}),
    "get_plan_state": lambda store, job: store.get_plan_state(job, 1),
    "append_log": lambda store, job: store.append_log(job, {}),
    "read_log": lambda store, job: store.read_log(job),
    "add_telemetry": lambda store, job: store.add_telemetry(job, {}),
    "recent_telemetry": lambda store, job: store.recent_telemetry(job),
    "add_event": lambda store, job: store.add_event(job, {}),
    "recent_events": lambda store, job: store.recent_events(job),
    "delete_job": lambda store, job: store.delete_job(job),
}
BAD_VALUES = {
    "plan one byte too large": lambda s: s.add_plan("job", 1, "x" * (MAX_PLAN_BYTES + 1), 1.0),
    "plan too large in UTF-8": lambda s: s.add_plan("job", 1, "é" * (MAX_PLAN_BYTES // 2 + 1), 1.0),
    "plan not text": lambda s: s.add_plan("job", 1, b"{}", 1.0),
    "plan with a lone surrogate": lambda s: s.add_plan("job", 1, "{\ud800}", 1.0),
    "version 0": lambda s: s.add_plan("job", 0, "{}", 1.0),
    "version True": lambda s: s.put_plan_state("job", True, {}),
    "version 1.0": lambda s: s.add_plan("job", 1.0, "{}", 1.0),
    "version 2**53": lambda s: s.add_plan("job", 2**53, "{}", 1.0),
    "submitted NaN": lambda s: s.add_plan("job", 1, "{}", math.nan),
    "document too large": lambda s: s.put_job("job", {"x": "y" * MAX_DOCUMENT_BYTES}),
    "document not a dict": lambda s: s.put_job("job", ["x"]),
    "document with NaN": lambda s: s.append_log("job", {"x": [1, math.inf]}),
    "document with a set": lambda s: s.put_plan_state("job", 1, {"x": {1}}),
    "document with an int key": lambda s: s.add_telemetry("job", {"x": {1: 2}}),
    "document too deep": lambda s: s.put_job("job", {"x": deeply_nested(70)}),
    "document with a surrogate": lambda s: s.put_job("job", {"x": "\udc80"}),
    "keep 0": lambda s: s.add_telemetry("job", {}, keep=0),
    "limit -1": lambda s: s.recent_telemetry("job", limit=-1),
}


def assert_nothing_written(store):
    assert store.list_jobs() == []
    assert store.list_plans("job") == []
    assert store.get_plan_state("job", 1) is None
    assert store.read_log("job") == []
    assert store.recent_telemetry("job") == []
    assert store.next_version("job") == 1                  # no version was reserved either


def test_bad_job_ids_are_refused_by_every_call_before_any_write(store):
    for name, call in ALL_CALLS.items():
        for job_id in BAD_JOB_IDS:
            with pytest.raises(StoreInputError) as error:
                call(store, job_id)
            assert isinstance(error.value, InvalidInputError), name
            assert "job id" in assert_one_line(error), name
    assert_nothing_written(store)


def test_bad_and_oversized_values_are_refused_before_any_write(store):
    messages = {}
    for name, call in BAD_VALUES.items():
        with pytest.raises(StoreInputError) as error:
            call(store)
        messages[name] = assert_one_line(error)
    assert_nothing_written(store)
    assert "exceeds 67108864 bytes" in messages["plan too large in UTF-8"]
    assert messages["document with NaN"] == "log record['x'][1] is inf, which JSON cannot hold"
    assert messages["document with an int key"] == "telemetry summary['x'] has the key 1, which is not a str"


# --- concurrency ------------------------------------------------------------------------------------------------


RESERVER = """
import sys
import time
from optimizer_service.service.store import open_store
store = open_store(sys.argv[1])
store.ping()
print("ready", flush=True)
sys.stdin.readline()
versions = []
for _ in range(200):
    versions.append(store.next_version("job"))
    time.sleep(0.0005)                                  # let the other process in between reservations
print(" ".join(map(str, versions)), flush=True)
"""


def reserve_in_processes(url: str, count: int) -> list[list[int]]:
    """Versions reserved by ``count`` processes started together on ``url``, in each one's order."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    processes = [subprocess.Popen([sys.executable, "-c", RESERVER, url], cwd=ROOT, env=env, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(count)]
    for process in processes:
        assert process.stdout.readline() == "ready\n"
    for process in processes:                               # go: all race from here
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [[int(word) for word in process.communicate(timeout=60)[0].split()] for process in processes]
    assert [process.returncode for process in processes] == [0] * count
    return results


@pytest.mark.parametrize("sharing", ["one store", "two stores", "two processes"])
def test_concurrent_next_version_never_collides(reopen, sharing):
    first = reopen()
    first.next_version("job")                              # the schema exists before they race
    if sharing == "two processes":
        results = reserve_in_processes(reopen.url, 2)
    else:
        stores = [first, first] if sharing == "one store" else [first, reopen()]
        results = [[], []]
        errors = []

        def reserve(index):
            try:
                results[index].extend(stores[index].next_version("job") for _ in range(200))
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=reserve, args=(index,)) for index in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
    assert all(result == sorted(result) for result in results)
    assert sorted(results[0] + results[1]) == list(range(2, 402))


# --- unavailability and URLs ------------------------------------------------------------------------------------


def test_an_unreachable_redis_is_one_line_with_the_password_redacted():
    port = closed_port()
    store = open_store(f"redis://:s3cret@127.0.0.1:{port}/0")
    for call in (store.ping, lambda: store.put_job("job", {}), lambda: store.append_log("job", {})):
        with pytest.raises(StoreUnavailableError) as error:
            call()
        message = assert_one_line(error)
        assert message.startswith(f"store redis://:***@127.0.0.1:{port}/0 is unavailable: ")
        assert "s3cret" not in message
    assert "s3cret" not in str(store) + repr(store) + store.url
    store.close()


def test_a_wrong_redis_password_is_unavailable_and_redacted(tmp_path):
    if redis_server_path() is None:
        pytest.skip(MISSING)
    with start_redis(tmp_path, password="right") as server:
        assert open_store(server.url).next_epoch() == 1
        store = open_store(f"redis://:wrong-one@127.0.0.1:{server.port}/0")
        with pytest.raises(StoreUnavailableError) as error:
            store.ping()
        message = assert_one_line(error)
        assert "wrong-one" not in message and ":***@" in message


def test_an_sqlite_file_that_cannot_be_written_is_unavailable(tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(StoreUnavailableError) as error:
        open_store(f"sqlite:///{tmp_path}/a-file/service.db")
    assert assert_one_line(error) == (f"store sqlite:///{tmp_path}/a-file/service.db is unavailable: "
                                      f"folder {tmp_path}/a-file does not exist")
    (tmp_path / "not-a-db.db").write_text("this is not an SQLite file" * 100)
    with pytest.raises(StoreUnavailableError) as error:
        open_store(f"sqlite:///{tmp_path}/not-a-db.db")
    assert assert_one_line(error).endswith("is unavailable: file is not a database")


@pytest.mark.parametrize("url,message", [
    ("mysql://x", "P2_STORE='mysql://x': unsupported scheme 'mysql'; "
                  "use sqlite:///PATH or redis://[:password@]host:port/db"),
    ("just words", "P2_STORE='just words': not a URL; use sqlite:///PATH or redis://[:password@]host:port/db"),
    ("sqlite://host/x.db", "P2_STORE='sqlite://host/x.db': a sqlite URL has no host; "
                           "use sqlite:///relative.db or sqlite:////absolute/path.db"),
    ("sqlite:///", "P2_STORE='sqlite:///': no file path; use sqlite:///relative.db or sqlite:////absolute/path.db"),
    ("sqlite:///x.db?mode=ro", "P2_STORE='sqlite:///x.db?mode=ro': sqlite URLs take no options ('?' or '#')"),
    ("sqlite:///:memory:", "P2_STORE='sqlite:///:memory:': an in-memory database keeps nothing; name a file"),
    ("redis://", "P2_STORE='redis://': no host; use redis://[:password@]host:port/db"),
    ("redis://:hunter2@h:port/0", "P2_STORE='redis://:***@h:port/0': the port must be a number from 1 to 65535"),
    ("redis://h:70000/0", "P2_STORE='redis://h:70000/0': the port must be a number from 1 to 65535"),
    ("redis://h:0/0", "P2_STORE='redis://h:0/0': the port must be a number from 1 to 65535"),
    ("redis://h/one", "P2_STORE='redis://h/one': the database must be a number (redis://host:port/0), not 'one'"),
    ("redis://h/0?db=1", "P2_STORE='redis://h/0?db=1': unknown option 'db'; the only option is prefix (?prefix=p2:)"),
    ("redis://h/0?prefix=a%20b", "P2_STORE='redis://h/0?prefix=a%20b': key prefix 'a b' is invalid: "
                                 "use 1-64 characters of A-Z a-z 0-9 . _ : -"),
    ("redis://secret@h/0", "P2_STORE='redis://***@h/0': a user without a password; "
                           "write redis://[user]:password@host:port/db"),
])
def test_bad_urls_are_one_line_url_errors(url, message):
    with pytest.raises(StoreUrlError) as error:
        open_store(url)
    assert isinstance(error.value, InvalidInputError)
    assert assert_one_line(error) == message


def test_urls_parse_to_their_targets():
    redis_target = parse_store_url("rediss://ops:p%40ss@cache.example:6380/2?prefix=prod:p2:")
    assert (redis_target.host, redis_target.port, redis_target.db, redis_target.tls) == ("cache.example", 6380, 2, True)
    assert (redis_target.username, redis_target.password, redis_target.prefix) == ("ops", "p@ss", "prod:p2:")
    assert redis_target.url == "rediss://ops:***@cache.example:6380/2?prefix=prod:p2:"
    assert "p@ss" not in repr(redis_target)
    defaults = parse_store_url("redis://localhost")
    assert (defaults.port, defaults.db, defaults.prefix, defaults.tls, defaults.password) == (6379, 0, "p2:", False, None)
    assert parse_store_url("sqlite:///state/service.db").path == Path("state/service.db")
    assert parse_store_url("SQLite:////var/lib/p2/service.db").path == Path("/var/lib/p2/service.db")


def test_a_relative_sqlite_path_is_taken_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///relative.db") as store:
        store.put_job("job", {})
        assert store.url == f"sqlite:///{tmp_path}/relative.db"
    assert (tmp_path / "relative.db").is_file()


def test_the_default_store_lives_in_the_state_folder(tmp_path):
    home = Path("/home/someone")
    assert default_store_path({}, home) == home / ".local/state/p2/service.db"
    assert default_store_path({"XDG_STATE_HOME": "/state"}, home) == Path("/state/p2/service.db")
    assert default_store_path({"XDG_STATE_HOME": "relative"}, home) == home / ".local/state/p2/service.db"
    path = default_store_path({"XDG_STATE_HOME": str(tmp_path / "xdg")}, home)
    for url in (None, "", "  "):
        with open_store(url, default_path=path) as store:
            assert store.url == f"sqlite:///{path}"
            store.next_epoch()
    with open_store(None, default_path=path) as store:
        assert store.next_epoch() == 4


@pytest.mark.parametrize("url,redacted", [
    ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
    ("redis://user:pw@h:1/0", "redis://user:***@h:1/0"),
    ("rediss://user:p:w@h", "rediss://user:***@h"),
    ("redis://pw@h", "redis://***@h"),
    ("redis://h:1/0", "redis://h:1/0"),
    ("sqlite:////a@b/c.db", "sqlite:////a@b/c.db"),
    ("redis://:pw@[bad", "redis://:***@[bad"),
])
def test_redact_url(url, redacted):
    assert redact_url(url) == redacted


def test_the_store_package_imports_no_transport():
    allowed = ("optimizer_service.errors", "optimizer_service.service.store", "redis")
    for path in sorted(STORE_PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                ours = name.split(".")[0] in ("optimizer_service", "redis", "grpc", "fastapi", "starlette", "proto")
                assert not ours or name.startswith(allowed), f"{path.name} imports {name}"


# --- crashes ----------------------------------------------------------------------------------------------------

WRITER = """
import sys
from pathlib import Path
from optimizer_service.service.store import SqlitePlanStore
store = SqlitePlanStore.open(Path(sys.argv[1]))
i = len(store.read_log("job"))
while True:
    i += 1
    assert store.append_log("job", {"i": i, "pad": str(i) * (i % 97) * 50}) == i
    print(i, flush=True)
"""


def write_until_killed(path: Path, acknowledged_at_least: int) -> int:
    """Run WRITER on ``path``, SIGKILL it once it has acknowledged that many more
    appends (mid-write: it never pauses); the last index it acknowledged."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        first = last = int(writer.stdout.readline())
        while last < first + acknowledged_at_least:
            last = int(writer.stdout.readline())
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    return last


def test_a_sigkilled_sqlite_writer_leaves_a_prefix_of_its_log(tmp_path):
    path = tmp_path / "service.db"
    for _ in range(2):                  # kill, reopen, write on, kill again
        acknowledged = write_until_killed(path, acknowledged_at_least=40)
        with open_store(f"sqlite:///{path}") as store:
            log = store.read_log("job")
        assert len(log) >= acknowledged                     # durable when append_log returned
        assert log == [{"i": i, "pad": str(i) * (i % 97) * 50} for i in range(1, len(log) + 1)]


def test_redis_keeps_returned_writes_through_a_server_crash(tmp_path):
    if redis_server_path() is None:
        pytest.skip(MISSING)
    server = start_redis(tmp_path)
    store = open_store(server.url)
    try:
        for i in range(1, 21):
            store.append_log("job", {"i": i})
        store.add_plan("job", store.next_version("job"), "plan text", 1.0)
        epoch = store.next_epoch()
        server.kill()
        with pytest.raises(StoreUnavailableError):
            store.ping()
        server = start_redis(tmp_path, port=server.port)
        assert store.read_log("job") == [{"i": i} for i in range(1, 21)]    # the same store reconnects
        assert store.get_plan("job", 1) == StoredPlan("job", 1, "plan text", 1.0)
        assert (store.next_version("job"), store.next_epoch()) == (2, epoch + 1)
    finally:
        store.close()
        server.stop()
