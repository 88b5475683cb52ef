"""Token rotation without a restart (optimizer_service/service/token_source.py):
the service re-reads its token file when it changes and accepts the previous
token for a grace period; a file that holds no valid token changes nothing.
The rules with a clock of the test's, then a real ``p2 serve`` and ``p2 jobs``."""

from __future__ import annotations

import time

from optimizer_service.service.auth import read_token
from optimizer_service.service.token_source import CHECK_EVERY_SECONDS, TokenSource
from tests.support.cli import p2
from tests.support.service_process import ServeProcess

OLD, NEW, NEWER = "old-token-0123456789abcdef", "new-token-0123456789abcdef", "newer-token-0123456789abcd"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _rewrite(path, text: str) -> None:
    """Replace the file as operators (and Kubernetes' Secret volumes) do: a new file renamed over it."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    fresh.replace(path)


def test_a_new_token_is_taken_and_the_previous_one_accepted_for_the_grace_period(tmp_path):
    path, clock = tmp_path / "token", Clock()
    path.write_text(OLD + "\n")
    tokens = TokenSource(OLD, path, read_token, grace=60, clock=clock)
    assert tokens.accepts(OLD) and not tokens.accepts(NEW) and not tokens.accepts(None)
    _rewrite(path, NEW + "\n")
    assert not tokens.accepts(NEW), "looked at again before a second passed"
    clock.now += CHECK_EVERY_SECONDS
    assert tokens.accepts(NEW) and tokens.accepts(OLD) and tokens.rotations == 1
    clock.now += 59
    assert tokens.accepts(OLD)
    clock.now += 1
    assert not tokens.accepts(OLD) and tokens.accepts(NEW)
    _rewrite(path, NEWER + "\n")
    clock.now += CHECK_EVERY_SECONDS
    assert tokens.accepts(NEWER) and tokens.accepts(NEW) and not tokens.accepts(OLD)


def test_a_token_file_without_a_valid_token_changes_nothing(tmp_path, caplog):
    path, clock = tmp_path / "token", Clock()
    path.write_text(OLD + "\n")
    tokens = TokenSource(OLD, path, read_token, grace=60, clock=clock)
    for bad in ("short\n", "two words-0123456789abcdef\n", ""):
        _rewrite(path, bad)
        clock.now += CHECK_EVERY_SECONDS
        assert tokens.accepts(OLD) and tokens.rotations == 0, bad
    path.unlink()
    clock.now += CHECK_EVERY_SECONDS
    assert tokens.accepts(OLD)
    warnings = [r.getMessage() for r in caplog.records if "token file changed" in r.getMessage()]
    assert len(warnings) == 3 and all(OLD not in w for w in warnings)
    fixed = TokenSource(OLD, None, read_token, clock=clock)           # a token given by value never changes
    clock.now += 10
    assert fixed.accepts(OLD) and not fixed.accepts(NEW)


def test_p2_serve_takes_a_rotated_token_file_without_a_restart(tmp_path):
    path = tmp_path / "token"
    path.write_text(OLD + "\n")
    serve = ServeProcess(tmp_path, "--token-file", str(path), env={"P2_TOKEN_GRACE_SECONDS": "2"})

    def listed(token: str) -> int:
        return p2("jobs", "list", "--service", serve.address, env={"P2_TOKEN": token}).returncode

    try:
        assert (listed(OLD), listed(NEW)) == (0, 2)
        _rewrite(path, NEW + "\n")
        deadline = time.monotonic() + 20
        while listed(NEW) != 0:
            assert time.monotonic() < deadline, "the new token was not taken"
            time.sleep(0.2)
        rotated = time.monotonic()
        old_ok, asked = listed(OLD), time.monotonic() - rotated
        assert old_ok == 0 or asked > 2, f"the previous token was refused {asked:.1f} s after the rotation"
        while time.monotonic() < rotated + 3:
            time.sleep(0.2)
        assert (listed(OLD), listed(NEW)) == (2, 0)
    finally:
        code, log = serve.stop()
    assert code == 0 and "new token from" in log and OLD not in log and NEW not in log
