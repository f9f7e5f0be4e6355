"""A real cluster (2 gateways, 2 shards, 1 jobs worker) shared by a test module."""

from __future__ import annotations

import uuid

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture
def conversation() -> str:
    """A conversation name of this test's own."""
    return f"c-{uuid.uuid4().hex[:10]}"
