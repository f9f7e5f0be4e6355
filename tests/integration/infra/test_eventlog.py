"""The event log on a real Redis: batched ordered writes, state snapshots, multiplexed reads."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from durachat_infra.eventlog import (
    Kind,
    LogEntry,
    LogFencedError,
    LogReader,
    LogWriter,
    entry_id_key,
)
from durachat_infra.keys import ConversationKeys
from support.waiting import eventually


async def test_appends_are_ordered_and_batched(redis: Redis, key_prefix: str) -> None:
    keys = ConversationKeys(key_prefix, "conv1")
    writer = LogWriter(redis)
    for i in range(500):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r1")
    await writer.flush()
    rows = await redis.xrange(keys.log)
    assert [row[1]["f"] for row in rows] == [f'{{"n":{i}}}' for i in range(500)]
    assert all(row[1]["r"] == "r1" for row in rows)


async def test_state_changes_are_atomic_with_their_entry(redis: Redis, key_prefix: str) -> None:
    keys = ConversationKeys(key_prefix, "conv2")
    writer = LogWriter(redis)
    blocking = Redis.from_url(_url(redis), decode_responses=True)
    reader = LogReader(redis, blocking, f"{key_prefix}:wake")
    writer.append(keys, Kind.CHUNK, '{"before":1}', request="r0")
    start = writer.append_waitable(
        keys,
        Kind.CONTROL,
        '{"op":"start"}',
        request="r1",
        state={"status": "streaming", "req": "r1", "start": "$id", "cont": "0"},
    )
    start_id = await start
    states, last = await reader.snapshot(keys)
    state = states["main"]
    assert state.status == "streaming"
    assert state.request == "r1"
    assert state.start == start_id
    assert last == start_id
    await blocking.aclose()


def _url(redis: Redis) -> str:
    kwargs = redis.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


async def test_reader_follows_many_logs_and_picks_up_new_ones(
    redis: Redis, key_prefix: str
) -> None:
    blocking = Redis.from_url(_url(redis), decode_responses=True)
    reader = LogReader(redis, blocking, f"{key_prefix}:wake", block_ms=10_000)
    await reader.start()
    writer = LogWriter(redis)
    seen: dict[str, list[LogEntry]] = {"a": [], "b": []}
    a = ConversationKeys(key_prefix, "a")
    b = ConversationKeys(key_prefix, "b")
    try:
        reader.follow(a, "0-0", seen["a"].extend)
        writer.append(a, Kind.FRAME, '{"x":1}')
        await eventually(lambda: _has(seen["a"], 1))
        # A log followed while the reader is blocked is picked up at once, not after block_ms.
        reader.follow(b, "0-0", seen["b"].extend)
        for i in range(3):
            writer.append(b, Kind.FRAME, f'{{"y":{i}}}')
        await eventually(lambda: _has(seen["b"], 3), timeout=5)
        ids = [entry_id_key(e.id) for e in seen["b"]]
        assert ids == sorted(ids)
        reader.unfollow(a)
        writer.append(a, Kind.FRAME, '{"x":2}')
        writer.append(b, Kind.FRAME, '{"y":3}')
        await eventually(lambda: _has(seen["b"], 4))
        assert len(seen["a"]) == 1
    finally:
        await reader.stop()
        await blocking.aclose()


async def _has(entries: list[LogEntry], n: int) -> bool:
    await asyncio.sleep(0)
    return len(entries) >= n


async def test_read_range_pages_through_long_logs(redis: Redis, key_prefix: str) -> None:
    keys = ConversationKeys(key_prefix, "long")
    writer = LogWriter(redis)
    for i in range(2500):
        writer.append(keys, Kind.CHUNK, f'{{"n":{i}}}', request="r")
    await writer.flush()
    blocking = Redis.from_url(_url(redis), decode_responses=True)
    reader = LogReader(redis, blocking, f"{key_prefix}:wake")
    first = (await redis.xrange(keys.log, count=1))[0][0]
    entries = await reader.read_range(keys, first, page=1000)
    assert [e.frame for e in entries] == [f'{{"n":{i}}}' for i in range(2500)]
    await blocking.aclose()


async def test_a_writer_without_the_lease_cannot_append(redis: Redis, key_prefix: str) -> None:
    keys = ConversationKeys(key_prefix, "fenced")
    lost: list[ConversationKeys] = []
    writer = LogWriter(redis, owner="old-owner", on_fenced=lost.append)
    await redis.set(keys.lease, "old-owner")
    first = writer.append_waitable(keys, Kind.CHUNK, '{"n":1}', request="r")
    assert await first
    await redis.set(keys.lease, "new-owner")
    second = writer.append_waitable(keys, Kind.CHUNK, '{"n":2}', request="r")
    with pytest.raises(LogFencedError):
        await second
    assert lost == [keys]
    assert [row[1]["f"] for row in await redis.xrange(keys.log)] == ['{"n":1}']
