"""A real cluster (2 gateways, 2 shards, 1 jobs worker) shared by a test module."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def conversation() -> str:
    """A conversation name of this test's own."""
    return f"c-{uuid.uuid4().hex[:10]}"
