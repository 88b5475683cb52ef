"""Fixtures the service's tests share."""

from __future__ import annotations

import uuid

import pytest

from tests.support.redis_server import MISSING, redis_server_path, start_redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real ``redis-server`` for the module (skipped where it is not installed)."""
    if redis_server_path() is None:
        pytest.skip(MISSING)
    with start_redis(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request, tmp_path) -> str:
    """Each store in turn; a Redis prefix of its own per test."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'service.db'}"
    return f"{request.getfixturevalue('redis_server').url}?prefix=t-{uuid.uuid4().hex[:12]}:"
