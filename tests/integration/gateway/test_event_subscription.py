"""A gateway's event subscriber on the session's Redis: it hands out the events its filter
selects, in order; one that reads too slowly is cut off once its buffer is full, and a new
subscription after its last event id brings the rest, none lost and none twice."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from durachat.observability import emit
from durachat_gateway.event_subscription import Subscription
from durachat_infra.events import EventFilter, EventPublisher, FeedEvent
from durachat_infra.keys import EventKeys
from durachat_infra.settings import EventFeedSettings
from support.waiting import eventually


@pytest.fixture
async def publisher(redis: Redis, key_prefix: str) -> AsyncIterator[EventPublisher]:
    events = EventPublisher(
        redis,
        EventKeys(key_prefix),
        process="test",
        default_tenant="default",
        settings=EventFeedSettings(),
    )
    events.start()
    yield events
    await events.stop()


async def _drain(subscription: Subscription) -> list[FeedEvent]:
    got: list[FeedEvent] = []
    while (item := await subscription.next(0.5)) is not None:
        got.append(item[0])
    return got


async def test_a_subscription_filters_in_order(
    redis: Redis, key_prefix: str, publisher: EventPublisher
) -> None:
    stream = EventKeys(key_prefix).tenant("acme")
    where = EventFilter(("chat:turn:*",), name="mine")
    subscription = Subscription(redis, stream, "0-0", where, limit_bytes=1 << 20)
    subscription.start()
    try:
        for i in range(20):
            kind = "chat:turn:started" if i % 2 else "tool:call"
            emit(
                kind, agent="a", name="mine" if i % 3 else "other", tenant="acme", payload={"i": i}
            )
        await publisher.flush()
        got = await _drain(subscription)
        expected = [i for i in range(20) if i % 2 and i % 3]
        assert [e.data["i"] for e in got] == expected
        assert not subscription.ended
    finally:
        await subscription.stop()


async def test_a_slow_subscriber_is_cut_off_and_resumes_without_loss(
    redis: Redis, key_prefix: str, publisher: EventPublisher
) -> None:
    stream = EventKeys(key_prefix).tenant("acme")
    slow = Subscription(redis, stream, "0-0", EventFilter(), limit_bytes=2048, grace=0.3)
    slow.start()
    try:
        for i in range(200):
            emit("chat:turn:started", agent="a", name="n", tenant="acme", payload={"i": i})
        await publisher.flush()
        # It reads nothing meanwhile: its buffer fills and it is cut off.
        await eventually(lambda: _ended(slow), timeout=10)
        assert slow.cut_off
        first = await _drain(slow)
        assert 0 < len(first) < 200
        assert sum(len(e.to_json()) for e in first) <= 2048
    finally:
        await slow.stop()
    again = Subscription(redis, stream, str(first[-1].id), EventFilter(), limit_bytes=1 << 20)
    again.start()
    try:
        rest = await _drain(again)
    finally:
        await again.stop()
    assert [e.data["i"] for e in first + rest] == list(range(200))


async def test_a_subscriber_that_keeps_reading_is_never_cut_off(
    redis: Redis, key_prefix: str, publisher: EventPublisher
) -> None:
    stream = EventKeys(key_prefix).tenant("acme")
    for i in range(200):
        emit("chat:turn:started", agent="a", name="n", tenant="acme", payload={"i": i})
    await publisher.flush()
    # The backlog is far larger than the buffer: the reader waits for room instead.
    reader = Subscription(redis, stream, "0-0", EventFilter(), limit_bytes=2048, grace=2.0)
    reader.start()
    try:
        got = await _drain(reader)
    finally:
        await reader.stop()
    assert [e.data["i"] for e in got] == list(range(200))
    assert not reader.cut_off


async def test_one_event_larger_than_the_buffer_still_goes_through(
    redis: Redis, key_prefix: str, publisher: EventPublisher
) -> None:
    stream = EventKeys(key_prefix).tenant("acme")
    emit("chat:recovery:exhausted", agent="a", name="n", tenant="acme", payload={"t": "x" * 5000})
    await publisher.flush()
    reader = Subscription(redis, stream, "0-0", EventFilter(), limit_bytes=2048, grace=0.3)
    reader.start()
    try:
        got = await _drain(reader)
    finally:
        await reader.stop()
    assert len(got) == 1 and len(got[0].data["t"]) == 5000


async def _ended(subscription: Subscription) -> bool:
    return subscription.ended
