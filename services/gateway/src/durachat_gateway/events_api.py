"""The event feed on the gateway: `GET /v1/events` (Server-Sent Events) and the WebSocket
`/v1/events/ws`, and the gateway's own part of the feed (its publisher, connection events).

Who sees what (docs/security.md#credentials): a tenant's API key its tenant's events; a client
token with the `events` scope the events of the conversations it covers; the admin key every
tenant's (`?tenant=` narrows it to one); an open gateway its tenant's. Each event carries the
id of its stream entry, so a subscriber that reconnects with the last one it received
(`Last-Event-ID`, or `?last_event_id=`) misses nothing the stream still holds
(docs/observability.md#subscribing-to-events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import APIRouter, Query, Request, WebSocket
from fastapi.responses import JSONResponse, Response, StreamingResponse
from redis.exceptions import RedisError
from starlette.websockets import WebSocketDisconnect

from durachat.observability import EventType, emit
from durachat_gateway.auth.principal import Principal, principal_of
from durachat_gateway.event_subscription import Subscription
from durachat_infra.events import (
    DEFAULT_TENANT,
    EventFilter,
    EventPublisher,
    FeedCursorError,
    feed_tail,
)
from durachat_infra.events.reading import check_cursor
from durachat_infra.keys import EventKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.settings import GatewaySettings
from durachat_infra.store import ConversationKey

TRY_AGAIN_LATER = 1013
"""WebSocket close code of a subscriber cut off or a feed that became unavailable."""


def gateway_publisher(redis: RedisClient, settings: GatewaySettings) -> EventPublisher:
    """The publisher of this gateway's events (start it in the running loop)."""
    return EventPublisher(
        redis,
        EventKeys(settings.key_prefix),
        process=f"gateway:{settings.gateway_id}",
        default_tenant=settings.tenant or DEFAULT_TENANT,
        settings=settings.events,
    )


def connection_event(key: ConversationKey, connection: str, *, opened: bool) -> None:
    """Tell the feed a client WebSocket of a conversation opened or closed."""
    emit(
        EventType.CONNECTION_OPENED if opened else EventType.CONNECTION_CLOSED,
        agent=key.agent,
        name=key.name,
        tenant=key.tenant,
        payload={"connection": connection},
    )


class FeedRefusedError(Exception):
    """A subscription the credential may not have (answered `status` with `code`)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class FeedScope:
    """The stream a subscriber reads and what it sees of it."""

    stream: str
    where: EventFilter


def feed_scope(
    principal: Principal,
    keys: EventKeys,
    *,
    types: str | None,
    agent: str | None,
    name: str | None,
    tenant: str | None,
) -> FeedScope:
    """What `principal` reads for the query's filters.

    Raises:
        FeedRefusedError: a token without the `events` scope (403), or asking for an agent or a
            conversation it does not cover (404, as if it did not exist).
    """
    patterns = EventFilter.parse_types(types)
    agent = agent or None
    name = name or None
    if principal.kind == "admin":
        if tenant:
            return FeedScope(keys.tenant(tenant), EventFilter(patterns, agent, name))
        return FeedScope(keys.all, EventFilter(patterns, agent, name))
    assert principal.tenant is not None
    stream = keys.tenant(principal.tenant)
    if principal.kind != "token":
        return FeedScope(stream, EventFilter(patterns, agent, name, tenant=principal.tenant))
    if not principal.allows("events"):
        raise FeedRefusedError(403, "insufficient_scope", "the token lacks the 'events' scope")
    if agent is not None and agent != principal.agent:
        raise FeedRefusedError(404, "not_found", "no such conversation")
    if name is not None and not principal.covers(principal.agent or "", name):
        raise FeedRefusedError(404, "not_found", "no such conversation")
    return FeedScope(
        stream,
        EventFilter(
            patterns,
            principal.agent,
            name if name is not None else principal.name,
            prefix=principal.prefix if principal.name is None else None,
            tenant=principal.tenant,
        ),
    )


def events_router(redis: Callable[[], RedisClient], settings: GatewaySettings) -> APIRouter:
    """The routes of the event feed."""
    router = APIRouter()
    keys = EventKeys(settings.key_prefix)
    feed = settings.events

    async def open_subscription(
        principal: Principal, cursor: str | None, query: dict[str, str | None]
    ) -> Subscription:
        scope = feed_scope(
            principal,
            keys,
            types=query.get("types"),
            agent=query.get("agent"),
            name=query.get("name"),
            tenant=query.get("tenant"),
        )
        client = redis()
        if cursor:
            try:
                start = check_cursor(cursor)
            except FeedCursorError as exc:
                raise FeedRefusedError(400, "invalid_cursor", str(exc)) from exc
        else:
            start = await feed_tail(client, scope.stream)
        subscription = Subscription(
            client, scope.stream, start, scope.where, limit_bytes=feed.subscriber_buffer_bytes
        )
        subscription.start()
        return subscription

    # Not in the OpenAPI document: an endless stream that generated clients (and schema
    # fuzzers) cannot read to its end; docs/observability.md describes it.
    @router.get("/v1/events", include_in_schema=False)
    async def events(
        request: Request,
        *,
        types: str | None = Query(None, description="comma-separated types; `prefix:*` globs"),
        agent: str | None = Query(None),
        name: str | None = Query(None, description="a conversation name"),
        tenant: str | None = Query(None, description="admin key only: one tenant"),
        last_event_id: str | None = Query(None, description="resume after this event id"),
    ) -> Response:
        cursor = request.headers.get("last-event-id") or last_event_id
        try:
            query = {"types": types, "agent": agent, "name": name, "tenant": tenant}
            subscription = await open_subscription(principal_of(request), cursor, query)
        except FeedRefusedError as exc:
            return JSONResponse({"code": exc.code, "message": exc.message}, exc.status)
        except RedisError:
            return JSONResponse({"code": "unavailable", "message": "retry"}, 503)
        return StreamingResponse(
            _sse(subscription, feed.heartbeat),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @router.websocket("/v1/events/ws")
    async def events_socket(websocket: WebSocket) -> None:
        params = websocket.query_params
        try:
            query = {k: params.get(k) for k in ("types", "agent", "name", "tenant")}
            subscription = await open_subscription(
                principal_of(websocket), params.get("last_event_id"), query
            )
        except FeedRefusedError as exc:
            body = JSONResponse({"code": exc.code, "message": exc.message}, exc.status)
            await _deny(websocket, body)
            return
        except RedisError:
            await _deny(websocket, JSONResponse({"code": "unavailable"}, 503))
            return
        try:
            await websocket.accept()
            await _pump_socket(websocket, subscription, feed.heartbeat)
        except WebSocketDisconnect:
            pass
        finally:
            await subscription.stop()

    return router


async def _sse(subscription: Subscription, heartbeat: float) -> AsyncIterator[str]:
    """The SSE body: each event with its stream id, a comment every `heartbeat` seconds
    without one."""
    try:
        # The starting cursor as an id without data: EventSource (and the Python client) keep
        # it as the last event id, so a reconnect before the first event still loses nothing.
        yield f"retry: 1000\nid: {subscription.cursor}\n\n"
        while True:
            item = await subscription.next(heartbeat)
            if item is None:
                if subscription.ended:
                    reason = "too slow" if subscription.cut_off else "feed unavailable"
                    yield f": closed ({reason}): reconnect with Last-Event-ID\n\n"
                    return
                yield ": heartbeat\n\n"
                continue
            # Whatever else is buffered goes out in the same write.
            yield "".join(
                f"id: {e.id}\ndata: {body}\n\n" for e, body in (item, *subscription.ready())
            )
    finally:
        await subscription.stop()


async def _pump_socket(websocket: WebSocket, subscription: Subscription, heartbeat: float) -> None:
    """Send each event as a JSON text frame until the client leaves or the feed ends."""

    async def watch() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return

    async def send() -> None:
        while True:
            item = await subscription.next(heartbeat)
            if item is None:
                if subscription.ended:
                    with contextlib.suppress(RuntimeError):
                        await websocket.close(TRY_AGAIN_LATER)
                    return
                continue
            await websocket.send_text(item[1])
            for _, body in subscription.ready():
                await websocket.send_text(body)

    # Whichever ends first (the client left, or the feed) ends the other at once.
    tasks = [asyncio.create_task(watch()), asyncio.create_task(send())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                task.result()  # a client gone mid-send is no error
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await task


async def _deny(websocket: WebSocket, response: Response) -> None:
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:
        await websocket.close(1008)
