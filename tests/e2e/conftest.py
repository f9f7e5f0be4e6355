"""Fixtures of the end-to-end tests, on the clusters of the root conftest: the open one
(`cluster`) and the one that requires credentials (`auth_cluster`)."""

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


@pytest.fixture
async def auth_http(auth_cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the auth cluster's first gateway (no credential of its own)."""
    async with httpx.AsyncClient(base_url=auth_cluster.urls[0], timeout=20) as client:
        yield client
