"""Activating a conversation takes its lease first and then reads and writes the database; a
database slower than the lease's life must not leave the conversation running on a lapsed
lease. The lease of an activation in progress is renewed with the held ones, so a slow one
keeps it and its epoch; an activation that outlasted a renewal interval confirms its lease and,
when it was lost anyway, takes it again under a new epoch (docs/recovery.md#what-is-guaranteed);
a quick one keeps the epoch it was granted."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as redis

from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.faults import sql_rows, sqlite_path, sqlite_write_lock
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"
LEASE_TTL = 0.6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("slow-activation"),
        redis_url,
        gateways=1,
        shards=1,
        env={"DURACHAT_LEASE_TTL": str(LEASE_TTL)},
    ) as running:
        yield running


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url, decode_responses=True)
    yield connection
    await connection.aclose()


def _keys(cluster: LocalCluster, name: str) -> ConversationKeys:
    return ConversationKeys(
        cluster.env["DURACHAT_KEY_PREFIX"], conversation_tag("default", AGENT, name)
    )


async def _stored_epoch(cluster: LocalCluster, name: str) -> int:
    assert cluster.database_url is not None
    rows = await sql_rows(
        cluster.database_url,
        "SELECT epoch FROM conversations WHERE tenant_id = 'default' AND agent = :agent "
        "AND name = :name",
        agent=AGENT,
        name=name,
    )
    assert len(rows) == 1, rows
    return int(rows[0].epoch)


@contextlib.asynccontextmanager
async def _activation_waiting_for_sql(
    cluster: LocalCluster, client: redis.Redis, name: str
) -> AsyncIterator[ConversationKeys]:
    """A new conversation's first chat request, whose activation holds its lease and waits for
    SQLite's write lock while the block runs; once the lock is let go, its reply must end
    without an error."""
    assert cluster.database_url is not None
    keys = _keys(cluster, name)
    chat = await WsClient.connect(cluster.urls[0], AGENT, name)
    try:
        request = chat_request([user_message("hello")])
        async with sqlite_write_lock(sqlite_path(cluster.database_url)):
            await chat.send(request)

            async def leased() -> bool:
                return bool(await client.exists(keys.lease))

            await eventually(leased)
            yield keys
        done = await chat.wait_done(request["id"])
        assert "outcome" not in done, done
    finally:
        await chat.close()


async def _lease_stays(client: redis.Redis, keys: ConversationKeys, *, held: bool) -> None:
    """Watch the lease for a lease's life and more: it must stay held (or stay gone)."""
    until = time.monotonic() + 3 * LEASE_TTL
    while time.monotonic() < until:
        assert bool(await client.exists(keys.lease)) is held
        await asyncio.sleep(LEASE_TTL / 10)


async def test_an_activation_slower_than_its_lease_keeps_it_and_its_epoch(
    cluster: LocalCluster, client: redis.Redis
) -> None:
    name = f"slow-{time.time_ns()}"
    async with _activation_waiting_for_sql(cluster, client, name) as keys:
        await _lease_stays(client, keys, held=True)
    assert await client.get(keys.epoch) == "1"
    assert await _stored_epoch(cluster, name) == 1


async def test_an_activation_whose_lease_was_lost_takes_it_again_under_a_new_epoch(
    cluster: LocalCluster, client: redis.Redis
) -> None:
    name = f"lost-{time.time_ns()}"
    async with _activation_waiting_for_sql(cluster, client, name) as keys:
        # Lost while the activation waits (as when Redis loses its data): the renewal passes
        # meanwhile do not bring it back.
        await client.delete(keys.lease)
        await _lease_stays(client, keys, held=False)
    assert await client.get(keys.epoch) == "2"
    assert await _stored_epoch(cluster, name) == 2
    assert await client.get(keys.lease) is not None


async def test_a_quick_activation_keeps_the_epoch_it_was_granted(
    cluster: LocalCluster, client: redis.Redis
) -> None:
    name = f"quick-{time.time_ns()}"
    keys = _keys(cluster, name)
    chat = await WsClient.connect(cluster.urls[0], AGENT, name)
    try:
        request = chat_request([user_message("hello")])
        await chat.send(request)
        done = await chat.wait_done(request["id"])
        assert "outcome" not in done, done
        assert await client.get(keys.epoch) == "1"
        assert await _stored_epoch(cluster, name) == 1
    finally:
        await chat.close()
