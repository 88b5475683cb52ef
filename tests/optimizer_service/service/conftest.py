"""Fixtures the service's tests share."""

from __future__ import annotations

import pytest

from tests.support.redis_server import MISSING, redis_server_path, start_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real ``redis-server`` for the module (skipped where it is not installed)."""
    if redis_server_path() is None:
        pytest.skip(MISSING)
    with start_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server
