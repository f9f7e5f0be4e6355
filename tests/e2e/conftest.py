"""A real cluster (2 gateways, 2 shards, 1 jobs worker) shared by a test module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    """A running cluster for the module's tests."""
    with running_cluster(tmp_path_factory.mktemp("cluster"), redis_url) as running:
        yield running


@pytest.fixture
def conversation() -> str:
    """A conversation name of this test's own."""
    return f"c-{uuid.uuid4().hex[:10]}"
