"""Subscribers of the event feed for end-to-end tests: an SSE subscriber (the Python client)
collecting what it receives in the background."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from durachat.client import EventsClient
from durachat.observability.feed import FeedEvent
from support.waiting import eventually


class Collector:
    """Follows the feed in a task; every event received is kept in `events`."""

    def __init__(self, client: EventsClient, task: asyncio.Task[None]) -> None:
        self.client = client
        self.events: list[FeedEvent] = []
        self._task = task

    @classmethod
    async def start(
        cls,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        types: Sequence[str] | None = None,
        name: str | None = None,
        agent: str | None = None,
        tenant: str | None = None,
        last_event_id: str | None = None,
    ) -> Collector:
        """Subscribe and return once the gateway has opened the subscription (it reported
        where it starts)."""
        client = EventsClient(base_url, headers=headers, reconnect_delay=0.05)
        collector: Collector

        async def follow() -> None:
            async for event in client.events(
                types=types, name=name, agent=agent, tenant=tenant, last_event_id=last_event_id
            ):
                collector.events.append(event)

        collector = cls(client, asyncio.create_task(follow()))
        if last_event_id is None:

            async def opened() -> bool:
                if collector._task.done():
                    collector._task.result()
                return collector.client.last_event_id is not None

            await eventually(opened, timeout=10)
        return collector

    async def wait_for(
        self, found: Callable[[list[FeedEvent]], bool], *, timeout: float = 20.0
    ) -> list[FeedEvent]:
        """Wait until `found(events)` holds; returns the events."""

        async def probe() -> bool:
            if self._task.done():
                self._task.result()
            return found(self.events)

        await eventually(probe, timeout=timeout)
        return self.events

    def of(self, *types: str) -> list[FeedEvent]:
        """The events received of these types, in order."""
        return [e for e in self.events if e.type in types]

    async def stop(self) -> None:
        """Unsubscribe."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
