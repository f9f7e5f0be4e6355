"""Fixtures of the infrastructure tests.

* `log_backend` (parametrized `memory` / `redis` / `redis-cluster`): the event log backend the
  conformance suite
  of the event log port (`test_eventlog*.py`) runs on (`support.log_backends.LogBackend`), under
  the test's own key prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from durachat_infra.local.redis_cluster import RedisClusterServers
from durachat_infra.redis_client import RedisClient
from support.log_backends import LogBackend, MemoryLogBackend, RedisLogBackend


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def log_redis(request: pytest.FixtureRequest) -> tuple[RedisClient, str, str | None] | None:
    """For the Redis backends, a client of the session's Redis (or Redis Cluster), its URL and
    the cluster's nodes (fetched here: an async fixture cannot fetch another async fixture by
    name)."""
    if request.param == "memory":
        return None
    if request.param == "redis-cluster":
        servers: RedisClusterServers = request.getfixturevalue("redis_cluster_servers")
        cluster: RedisClient = request.getfixturevalue("redis_cluster")
        return cluster, servers.url, servers.nodes
    client: Redis = request.getfixturevalue("redis")
    url: str = request.getfixturevalue("redis_url")
    # The session's Redis: a Redis Cluster too under DURACHAT_TEST_REDIS=cluster.
    nodes: str | None = request.getfixturevalue("redis_cluster_nodes")
    return client, url, nodes


@pytest.fixture
async def log_backend(
    log_redis: tuple[RedisClient, str, str | None] | None, key_prefix: str
) -> AsyncIterator[LogBackend]:
    backend: LogBackend
    if log_redis is None:
        backend = MemoryLogBackend(key_prefix)
    else:
        client, url, nodes = log_redis
        backend = RedisLogBackend(client, url, key_prefix, nodes)
    try:
        yield backend
    finally:
        await backend.close()
