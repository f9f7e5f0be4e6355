"""Fixtures of the infrastructure tests.

* `log_backend` (parametrized `memory` / `redis`): the event log backend the conformance suite
  of the event log port (`test_eventlog*.py`) runs on (`support.log_backends.LogBackend`), under
  the test's own key prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from support.log_backends import LogBackend, MemoryLogBackend, RedisLogBackend


@pytest.fixture(params=["memory", "redis"])
def log_redis(request: pytest.FixtureRequest) -> tuple[Redis, str] | None:
    """For the `redis` backend, a client of the session's Redis and its URL (fetched here: an
    async fixture cannot fetch another async fixture by name)."""
    if request.param == "memory":
        return None
    client: Redis = request.getfixturevalue("redis")
    url: str = request.getfixturevalue("redis_url")
    return client, url


@pytest.fixture
async def log_backend(
    log_redis: tuple[Redis, str] | None, key_prefix: str
) -> AsyncIterator[LogBackend]:
    backend: LogBackend
    if log_redis is None:
        backend = MemoryLogBackend(key_prefix)
    else:
        backend = RedisLogBackend(*log_redis, key_prefix)
    try:
        yield backend
    finally:
        await backend.close()
