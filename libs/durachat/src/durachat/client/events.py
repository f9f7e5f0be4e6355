"""Subscribing to a gateway's event feed (docs/observability.md#subscribing-to-events).

    client = EventsClient("http://127.0.0.1:8080", headers={"Authorization": "Bearer dck_…"})
    async for event in client.events(types=["chat:recovery:*", "chat:turn:*"]):
        print(event.type, event.name, event.data)

The feed is read as Server-Sent Events (`GET /v1/events`). When the connection drops, the
client reconnects with the id of the last event it received (`Last-Event-ID`), so it misses
nothing the feed still holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import httpx

from durachat.client.errors import ClientError
from durachat.observability.feed import FeedEvent

RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
"""Answers after which the client tries again (anything else non-2xx is an error)."""


class EventsClient:
    """A subscriber of the event feed of one gateway (or a load balancer in front of several).

    Attributes:
        last_event_id: the id of the last event received (or the feed position the server
            reported), which a reconnect resumes after.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        reconnect_delay: float = 0.25,
        max_reconnect_delay: float = 10.0,
    ) -> None:
        """Create the client.

        Args:
            base_url: The gateway's base URL (`http(s)://host[:port][/prefix]`).
            headers: Extra request headers, typically `Authorization: Bearer …` (an API key,
                a client token with the `events` scope, or the admin key).
            reconnect_delay: Seconds before the first reconnect after a dropped connection;
                doubled after each failed one, up to `max_reconnect_delay`.
            max_reconnect_delay: The longest wait between reconnects.
        """
        self._url = events_url(base_url)
        self._headers = dict(headers or {})
        self._delay = reconnect_delay
        self._max_delay = max_reconnect_delay
        self.last_event_id: str | None = None

    async def events(
        self,
        *,
        types: Sequence[str] | None = None,
        agent: str | None = None,
        name: str | None = None,
        tenant: str | None = None,
        last_event_id: str | None = None,
        reconnect: bool = True,
    ) -> AsyncGenerator[FeedEvent, None]:
        """The events of the feed, from now (or after `last_event_id`), as they come.

        Args:
            types: Event types to receive; `prefix:*` matches every type starting with
                `prefix:`. None: every type.
            agent: Only the conversations of this agent.
            name: Only this conversation.
            tenant: With the admin key, only this tenant's events.
            last_event_id: Resume after this event id (`"0"`: everything the feed holds).
            reconnect: Reconnect when the connection drops (with the last event id);
                otherwise the iteration ends with the connection.

        Raises:
            ClientError: `http_error` when the gateway refuses the subscription (a missing
                or insufficient credential, a bad cursor).
        """
        params: dict[str, str] = {}
        if types:
            params["types"] = ",".join(types)
        for key, value in (("agent", agent), ("name", name), ("tenant", tenant)):
            if value:
                params[key] = value
        if last_event_id is not None:
            self.last_event_id = last_event_id
        delay = self._delay
        timeout = httpx.Timeout(10.0, read=60.0)
        async with httpx.AsyncClient(timeout=timeout, headers=self._headers) as http:
            while True:
                try:
                    async for event in self._stream(http, params):
                        delay = self._delay
                        yield event
                except (httpx.TransportError, _RetryableError):
                    pass
                if not reconnect:
                    return
                await asyncio.sleep(delay)
                delay = min(self._max_delay, delay * 2)

    async def _stream(
        self, http: httpx.AsyncClient, params: dict[str, str]
    ) -> AsyncIterator[FeedEvent]:
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        async with http.stream("GET", self._url, params=params, headers=headers) as response:
            if response.status_code in RETRY_STATUSES:
                raise _RetryableError
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")
                raise ClientError(
                    "http_error",
                    f"the event feed answered {response.status_code}: {body[:300]}",
                    status=response.status_code,
                )
            async for event in self._parse(response.aiter_lines()):
                yield event

    async def _parse(self, lines: AsyncIterator[str]) -> AsyncIterator[FeedEvent]:
        """Server-Sent Events: fields up to a blank line make one event; comments (`:`) are
        heartbeats."""
        data: list[str] = []
        event_id: str | None = None
        async for line in lines:
            if not line:
                if event_id is not None:
                    self.last_event_id = event_id
                if data and event_id is not None:
                    event = _decode(event_id, "\n".join(data))
                    if event is not None:
                        yield event
                data, event_id = [], None
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                data.append(value)
            elif field == "id":
                event_id = value


class _RetryableError(Exception):
    """The gateway asked to come back later."""


def _decode(event_id: str, data: str) -> FeedEvent | None:
    try:
        return FeedEvent.from_entry(event_id, data)
    except ValueError:
        return None


def events_url(base_url: str) -> str:
    """`http(s)://host/v1/events` of a gateway's base URL (`ws(s)://` becomes `http(s)://`)."""
    parts = urlsplit(base_url if "://" in base_url else f"http://{base_url}")
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"not an http(s) or ws(s) URL: {base_url!r}")
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/v1/events", "", ""))
