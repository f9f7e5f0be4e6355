"""Real clusters shared by the end-to-end tests: the open one of the session (`cluster`, in the
root conftest) and one that requires credentials (`auth_cluster`)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.tenancy import AUTH_ENV

pytestmark = pytest.mark.e2e


@pytest.fixture
def conversation() -> str:
    """A conversation name of this test's own."""
    return f"c-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def http(cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the shared cluster's first gateway."""
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=20) as client:
        yield client


@pytest.fixture(scope="session")
def auth_cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[LocalCluster]:
    """A running cluster (2 gateways, 2 shards, 1 jobs worker) with `DURACHAT_ADMIN_KEY` set:
    every route needs a credential (docs/security.md). Tests make tenants of their own."""
    with running_cluster(tmp_path_factory.mktemp("auth"), redis_url, env=AUTH_ENV) as running:
        yield running


@pytest.fixture
async def auth_http(auth_cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the auth cluster's first gateway (no credential of its own)."""
    async with httpx.AsyncClient(base_url=auth_cluster.urls[0], timeout=20) as client:
        yield client
