"""Publishing a process's events to the tenants' feed: fire-and-forget, batched, bounded.

The publisher subscribes to every observability channel (`durachat.observability.subscribe`),
so whatever the process emits reaches the feed as well as in-process subscribers and
OpenTelemetry. `emit` only encodes the event and appends it to an in-process buffer bounded in
bytes; a background task sends what accumulated in one pipelined round trip (`XADD` to the
tenant's stream and to the stream of every tenant, each capped at about `maxlen` entries, and
now and then an `XTRIM MINID` for the age limit). When Redis is slow or away the buffer fills
and further events are dropped and counted, and a batch Redis refuses is dropped and counted:
a turn never waits for the feed (docs/observability.md#subscribing-to-events).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import Counter
from redis.exceptions import RedisError

from durachat.observability import Channel, Event, subscribe
from durachat_infra.events.record import FIELD, feed_event_of
from durachat_infra.keys import EventKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.settings import EventFeedSettings

log = logging.getLogger(__name__)

PUBLISHED = Counter("durachat_events_published_total", "Events written to the event feed")
DROPPED = Counter(
    "durachat_events_dropped_total",
    "Events not written to the event feed (buffer full, Redis unavailable, not encodable)",
    ["reason"],
)

DEFAULT_TENANT = "default"
"""The tenant of an event emitted without one (what an open cluster acts as)."""
TRIM_EVERY = 30.0
"""Seconds between two age trims of one stream by this process."""
SEND_TIMEOUT = 5.0
"""Seconds one batch may take before it counts as lost (Redis hung)."""
PAUSE_AFTER_FAILURE = 0.5
"""Seconds the sender waits after Redis refused a batch, so an outage costs no busy loop."""


class EventPublisher:
    """Sends the events of this process to the feed (one per process)."""

    def __init__(
        self,
        redis: RedisClient,
        keys: EventKeys,
        *,
        process: str,
        default_tenant: str,
        settings: EventFeedSettings,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._process = process
        self._default_tenant = default_tenant
        self._settings = settings
        self._buffer: deque[tuple[str, str]] = deque()
        self._bytes = 0
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._trimmed: dict[str, float] = {}

    def start(self) -> None:
        """Subscribe to every channel and start sending (in the running loop)."""
        if self._task is not None or not self._settings.enabled:
            return
        self._unsubscribe = subscribe(Channel.ALL, self.offer)
        self._task = asyncio.create_task(self._run(), name="event-publisher")

    async def stop(self, *, flush_timeout: float = 1.0) -> None:
        """Stop taking events, send what is buffered for at most `flush_timeout` seconds,
        then stop sending."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), flush_timeout)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def flush(self) -> None:
        """Wait until every event offered so far was sent (or dropped)."""
        await self._idle.wait()

    @property
    def buffered_bytes(self) -> int:
        """Bytes of events waiting to be sent."""
        return self._bytes

    def offer(self, event: Event) -> None:
        """Queue `event` for the feed; never blocks, never raises. Dropped (and counted) when
        the buffer is full."""
        try:
            body = feed_event_of(
                event, process=self._process, default_tenant=self._default_tenant
            ).to_json()
        except Exception:
            DROPPED.labels("unencodable").inc()
            log.exception("could not encode event %s for the feed", event.type)
            return
        size = len(body)
        if self._bytes + size > self._settings.buffer_bytes:
            DROPPED.labels("buffer_full").inc()
            return
        self._buffer.append((event.tenant or self._default_tenant, body))
        self._bytes += size
        self._idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._buffer:
                batch = self._take()
                try:
                    # A timeout scope, not `wait_for`: no task of its own, so a busy loop adds
                    # no extra turn before the batch leaves.
                    async with asyncio.timeout(SEND_TIMEOUT):
                        await self._send(batch)
                    PUBLISHED.inc(len(batch))
                except (RedisError, OSError, TimeoutError) as exc:
                    DROPPED.labels("redis_unavailable").inc(len(batch))
                    log.warning("dropped %d events: the feed is unavailable (%s)", len(batch), exc)
                    await asyncio.sleep(PAUSE_AFTER_FAILURE)
            self._idle.set()

    def _take(self) -> list[tuple[str, str]]:
        batch: list[tuple[str, str]] = []
        while self._buffer and len(batch) < self._settings.batch:
            tenant, body = self._buffer.popleft()
            self._bytes -= len(body)
            batch.append((tenant, body))
        return batch

    async def _send(self, batch: list[tuple[str, str]]) -> None:
        maxlen = self._settings.maxlen
        pipe = self._redis.pipeline(transaction=False)
        streams: set[str] = {self._keys.all}
        for tenant, body in batch:
            stream = self._keys.tenant(tenant)
            streams.add(stream)
            pipe.xadd(stream, {FIELD: body}, maxlen=maxlen, approximate=True)
            pipe.xadd(self._keys.all, {FIELD: body}, maxlen=maxlen, approximate=True)
        now = time.time()
        oldest = f"{int((now - self._settings.retention) * 1000)}-0"
        for stream in streams:
            if now - self._trimmed.get(stream, 0.0) >= TRIM_EVERY:
                self._trimmed[stream] = now
                pipe.xtrim(stream, minid=oldest, approximate=True)
        if len(self._trimmed) > 10_000:
            self._trimmed.clear()
        await pipe.execute()
