"""The core chat flows again, on a cluster whose shards and gateways use PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

# pytest's default import mode puts this directory on sys.path, so the sibling test module imports
# by its bare name; mypy names test modules from tests/ (as `e2e.test_chat_flows`) and cannot
# resolve it. Only this import is unchecked: the re-exported tests are checked in their module.
import test_chat_flows as flows  # type: ignore[import-not-found]

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.postgres import PostgresServer

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, postgres_server: PostgresServer
) -> Iterator[LocalCluster]:
    """A cluster on a fresh PostgreSQL database (overrides the session's SQLite cluster)."""
    name = asyncio.run(postgres_server.create_database(prefix="durachat_e2e"))
    try:
        with running_cluster(
            tmp_path_factory.mktemp("pg-cluster"),
            redis_url,
            database_url=postgres_server.url(name),
        ) as running:
            yield running
    finally:
        asyncio.run(postgres_server.drop_database(name))


test_send_streams_and_persists = flows.test_send_streams_and_persists
test_two_tabs_on_two_gateways_see_the_same_frames = (
    flows.test_two_tabs_on_two_gateways_see_the_same_frames
)
test_dropped_socket_resumes_exactly_once = flows.test_dropped_socket_resumes_exactly_once
test_cancel_persists_the_partial_reply = flows.test_cancel_persists_the_partial_reply
test_clear_empties_the_chat_and_tells_other_tabs = (
    flows.test_clear_empties_the_chat_and_tells_other_tabs
)
test_regenerate_leaves_no_stale_assistant = flows.test_regenerate_leaves_no_stale_assistant
test_identical_replies_never_merge = flows.test_identical_replies_never_merge
test_overlapping_sends_are_queued = flows.test_overlapping_sends_are_queued
