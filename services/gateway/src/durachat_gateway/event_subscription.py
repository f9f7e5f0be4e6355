"""One subscriber of the event feed on this gateway: a reader task following a stream from
a cursor, and a buffer bounded in bytes between it and the subscriber's connection.

A subscriber that reads slower than events come fills its buffer; the reader then stops taking
events from Redis, and if the subscriber makes no room within `grace` seconds it is cut off
(`cut_off`). It reconnects with the id of the last event it received, losing nothing the
stream still holds (docs/observability.md#subscribing-to-events). One event always fits in an
empty buffer, however large, so a large event cannot cut every reconnect off again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final

from prometheus_client import Counter, Gauge
from redis.exceptions import RedisError

from durachat_infra.events import EventFilter, FeedEvent, read_feed
from durachat_infra.redis_client import RedisClient

log = logging.getLogger(__name__)

SUBSCRIBERS = Gauge("durachat_gateway_event_subscribers", "Open SSE and WebSocket event feeds")
CUT_OFF = Counter(
    "durachat_gateway_event_subscribers_cut_off_total",
    "Event feed subscribers disconnected because they read too slowly",
)

BLOCK_MS: Final = 5_000
"""How long one read waits for new entries, in milliseconds."""
GRACE: Final = 5.0
"""Seconds a subscriber with a full buffer has to make room before it is cut off."""


class Subscription:
    """Follows `stream` after `cursor` and hands out the events `where` selects."""

    def __init__(
        self,
        redis: RedisClient,
        stream: str,
        cursor: str,
        where: EventFilter,
        *,
        limit_bytes: int,
        grace: float = GRACE,
    ) -> None:
        self._redis = redis
        self._stream = stream
        self.cursor = cursor
        self._where = where
        self._limit = limit_bytes
        self._grace = grace
        self._taken = asyncio.Event()
        self._queue: asyncio.Queue[tuple[FeedEvent, str] | None] = asyncio.Queue()
        self._bytes = 0
        self.cut_off = False
        self.failed = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start reading (in the running loop)."""
        SUBSCRIBERS.inc()
        self._task = asyncio.create_task(self._read(), name="event-subscription")

    async def stop(self) -> None:
        """Stop reading."""
        if self._task is None:
            return
        SUBSCRIBERS.dec()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def next(self, timeout: float) -> tuple[FeedEvent, str] | None:
        """The next event with its JSON, or None when none came within `timeout` seconds or
        the subscription ended (`cut_off`, `failed`)."""
        if self._queue.empty():
            try:
                async with asyncio.timeout(timeout):
                    item = await self._queue.get()
            except TimeoutError:
                return None
        else:
            item = self._queue.get_nowait()
        if item is None:
            self._queue.put_nowait(None)  # stays ended for the next call
            return None
        self._bytes -= len(item[1])
        self._taken.set()
        return item

    def ready(self) -> list[tuple[FeedEvent, str]]:
        """The events already buffered, without waiting (so they go out together)."""
        taken: list[tuple[FeedEvent, str]] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                self._queue.put_nowait(None)
                break
            self._bytes -= len(item[1])
            taken.append(item)
        self._taken.set()
        return taken

    @property
    def ended(self) -> bool:
        """Whether no more events will come (cut off, or the feed failed)."""
        return self.cut_off or self.failed

    async def _read(self) -> None:
        try:
            while True:
                cursor, events = await read_feed(
                    self._redis, self._stream, self.cursor, block_ms=BLOCK_MS
                )
                self.cursor = cursor
                for event in events:
                    if not self._where.matches(event):
                        continue
                    body = event.to_json()
                    if not await self._room_for(len(body)):
                        CUT_OFF.inc()
                        self.cut_off = True
                        self._queue.put_nowait(None)
                        return
                    self._bytes += len(body)
                    self._queue.put_nowait((event, body))
        except (RedisError, OSError) as exc:
            log.warning("event feed %s unavailable: %s", self._stream, exc)
            self.failed = True
            self._queue.put_nowait(None)

    async def _room_for(self, size: int) -> bool:
        """Wait until `size` more bytes fit (or the buffer is empty); False if the subscriber
        made no room for `grace` seconds."""
        try:
            async with asyncio.timeout(self._grace):
                while self._bytes and self._bytes + size > self._limit:
                    self._taken.clear()
                    await self._taken.wait()
        except TimeoutError:
            return False
        return True
