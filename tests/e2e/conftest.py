"""A real cluster (2 gateways, 2 shards, 1 jobs worker) shared by a test module."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster

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
