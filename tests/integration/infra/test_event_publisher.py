"""The event feed's publisher and reads on the session's Redis: every emitted event lands in
its tenant's stream and the stream of all, in order, with its envelope; the buffer is bounded
in bytes; a Redis that is away costs dropped (counted) events, never a blocked `emit`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from durachat.observability import emit
from durachat_infra.events import EventFilter, EventPublisher, FeedEvent, feed_tail, read_feed
from durachat_infra.events.publisher import DROPPED
from durachat_infra.events.reading import FeedCursorError, check_cursor
from durachat_infra.keys import EventKeys
from durachat_infra.local.ports import free_port
from durachat_infra.settings import EventFeedSettings


@pytest.fixture
async def publisher(redis: Redis, key_prefix: str) -> AsyncIterator[EventPublisher]:
    events = EventPublisher(
        redis,
        EventKeys(key_prefix),
        process="test:1",
        default_tenant="default",
        settings=EventFeedSettings(maxlen=1000),
    )
    events.start()
    yield events
    await events.stop()


async def _all(redis: Redis, stream: str) -> list[FeedEvent]:
    _, events = await read_feed(redis, stream, "0-0", block_ms=1)
    return events


async def test_events_reach_the_tenant_stream_and_the_stream_of_all(
    redis: Redis, key_prefix: str, publisher: EventPublisher
) -> None:
    keys = EventKeys(key_prefix)
    before = int(time.time() * 1000)
    for i in range(5):
        emit("chat:turn:started", agent="a", name=f"n{i}", tenant="acme", payload={"i": i})
    emit("chat:turn:started", agent="a", name="x", tenant="other", payload={})
    emit("chat:turn:started", agent="a", name="y", payload={})  # no tenant: the default one
    await publisher.flush()

    acme = await _all(redis, keys.tenant("acme"))
    assert [e.data["i"] for e in acme] == [0, 1, 2, 3, 4]
    first = acme[0]
    assert (first.type, first.tenant, first.agent, first.name, first.process) == (
        "chat:turn:started",
        "acme",
        "a",
        "n0",
        "test:1",
    )
    assert first.time >= before and first.id is not None
    assert [e.name for e in await _all(redis, keys.tenant("other"))] == ["x"]
    assert [e.name for e in await _all(redis, keys.tenant("default"))] == ["y"]
    assert [e.tenant for e in await _all(redis, keys.all)] == ["acme"] * 5 + ["other", "default"]


async def test_reading_after_a_cursor_and_from_the_tail(
    redis: Redis, key_prefix: str, publisher: EventPublisher
) -> None:
    stream = EventKeys(key_prefix).tenant("acme")
    assert await feed_tail(redis, stream) == "0-0"
    for i in range(3):
        emit("tool:call", agent="a", name="n", tenant="acme", payload={"i": i})
    await publisher.flush()
    events = await _all(redis, stream)
    cursor, after_first = await read_feed(redis, stream, str(events[0].id), block_ms=1)
    assert [e.data["i"] for e in after_first] == [1, 2]
    assert cursor == events[-1].id == await feed_tail(redis, stream)
    assert await read_feed(redis, stream, cursor, block_ms=1) == (cursor, [])


def test_cursors() -> None:
    assert check_cursor("1700000000000-3") == "1700000000000-3"
    assert check_cursor("1700000000000") == "1700000000000-0"
    for bad in ("", "abc", "1-2-3", "$", "+"):
        with pytest.raises(FeedCursorError):
            check_cursor(bad)


def test_filters() -> None:
    event = FeedEvent("chat:recovery:detected", "acme", "a", "conv-1", 1, {}, "p")
    assert EventFilter().matches(event)
    assert EventFilter(("chat:recovery:*",)).matches(event)
    assert EventFilter(("chat:turn:*", "chat:recovery:detected")).matches(event)
    assert not EventFilter(("chat:turn:*",)).matches(event)
    assert EventFilter(("*",), agent="a", name="conv-1").matches(event)
    assert not EventFilter(agent="b").matches(event)
    assert EventFilter(prefix="conv-").matches(event)
    assert not EventFilter(prefix="other-").matches(event)
    assert not EventFilter(tenant="beta").matches(event)
    assert EventFilter.parse_types(" a:* , ,b ") == ("a:*", "b")


async def test_a_redis_that_is_away_drops_events_and_never_blocks(key_prefix: str) -> None:
    unreachable = Redis.from_url(
        f"redis://127.0.0.1:{free_port()}/0", decode_responses=True, socket_connect_timeout=0.2
    )
    events = EventPublisher(
        unreachable,
        EventKeys(key_prefix),
        process="test:2",
        default_tenant="default",
        settings=EventFeedSettings(buffer_bytes=4096),
    )
    events.start()
    dropped = DROPPED.labels("redis_unavailable")._value.get()
    full = DROPPED.labels("buffer_full")._value.get()
    try:
        started = time.monotonic()
        for i in range(1000):
            emit("chat:turn:started", agent="a", name="n", tenant="t", payload={"i": i})
        # 1000 emits while Redis is away take no time: nothing waits for it.
        assert time.monotonic() - started < 1.0
        assert events.buffered_bytes <= 4096
        assert DROPPED.labels("buffer_full")._value.get() > full
        await events.flush()
        assert DROPPED.labels("redis_unavailable")._value.get() > dropped
    finally:
        await events.stop(flush_timeout=0.1)
        await unreachable.aclose()
