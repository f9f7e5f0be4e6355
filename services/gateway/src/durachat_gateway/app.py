"""The gateway's HTTP and WebSocket surface."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Query, Request, WebSocket
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from redis.exceptions import RedisError
from starlette.types import ASGIApp
from starlette.websockets import WebSocketDisconnect

from durachat import limits
from durachat.protocol import MessageType
from durachat.protocol.schema import InvalidInputError, check_client_frame
from durachat.protocol.server_frames import (
    identity_frame,
    invalid_request_frames,
    mcp_servers_frame,
    rejected_request_frame,
)
from durachat_gateway.admin_api import admin_router
from durachat_gateway.aisdk import aisdk_router
from durachat_gateway.api_docs import add_docs
from durachat_gateway.auth.directory import AuthDirectory
from durachat_gateway.auth.middleware import Authenticate
from durachat_gateway.auth.principal import Principal, principal_of, tenant_of
from durachat_gateway.branch_frames import BRANCH_FRAMES, branch_frame, resolve_branch
from durachat_gateway.branch_writes import branch_write_router
from durachat_gateway.branches_api import (
    BRANCH_QUERY_DESCRIPTION,
    GET_MESSAGES_RESPONSES,
    branch_messages,
    branch_router,
)
from durachat_gateway.channels import Channel, Channels
from durachat_gateway.connection import ClientConnection, ForwardQueueFullError
from durachat_gateway.direct_sockets import DirectSocketApp
from durachat_gateway.edges import EdgeChecks, origin_allowed, parse_origins
from durachat_gateway.events_api import connection_event, events_router, gateway_publisher
from durachat_gateway.forwarder import FORWARDED, Forwarder, ForwardError
from durachat_gateway.http_errors import install_error_handlers
from durachat_gateway.mistakes import client_mistake
from durachat_gateway.playground import mount_playground
from durachat_gateway.quota_gate import TENANT_CONNECTIONS
from durachat_gateway.readiness import readiness_router
from durachat_gateway.telemetry import receive_span
from durachat_gateway.tenancy import UNAVAILABLE, Tenancy, quota_response_body, refused_turn
from durachat_gateway.tenant_api import tenant_router
from durachat_gateway.webhooks_api import webhooks_router
from durachat_infra.cluster import ClusterView
from durachat_infra.eventlog import LogReader
from durachat_infra.keys import ClusterKeys, conversation_tag
from durachat_infra.redis_client import RedisClient, connect_redis
from durachat_infra.settings import GatewaySettings
from durachat_infra.store import (
    ConversationKey,
    DatabaseUnavailableError,
    Store,
)

log = logging.getLogger(__name__)

TRY_AGAIN_LATER = 1013
"""WebSocket close code for a connection refused while a dependency is away."""

CONNECTIONS = Gauge("durachat_gateway_connections", "Open client WebSocket connections")
CHANNELS = Gauge("durachat_gateway_channels", "Conversations followed by this gateway")
FRAMES_IN = Counter("durachat_gateway_frames_in_total", "Client frames received", ["type"])


@dataclass(slots=True)
class Runtime:
    """What the gateway's handlers share."""

    settings: GatewaySettings
    redis: RedisClient
    view: ClusterView
    reader: LogReader
    channels: Channels
    forwarder: Forwarder
    store: Store
    tenancy: Tenancy | None = None
    """Credentials and quotas; None in open mode (no `DURACHAT_ADMIN_KEY`)."""

    def agents(self) -> set[str]:
        """Agent names served by the live shards."""
        return {name for shard in self.view.shards.values() for name in shard.agents}


def build_app(settings: GatewaySettings) -> FastAPI:
    """The gateway application."""
    runtime: Runtime | None = None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        nonlocal runtime
        redis = connect_redis(settings.redis_url, settings.redis_cluster_nodes)
        blocking = connect_redis(
            settings.redis_url, settings.redis_cluster_nodes, single_connection_client=True
        )
        cluster = ClusterKeys(settings.key_prefix)
        view = ClusterView(redis, cluster, refresh=settings.heartbeat_interval)
        await view.start()
        reader = LogReader(
            redis,
            blocking,
            functools.partial(cluster.gateway_wake, settings.gateway_id),
            read_bytes=settings.log_read_bytes,
        )
        await reader.start()
        runtime = Runtime(
            settings=settings,
            redis=redis,
            view=view,
            reader=reader,
            channels=Channels(reader, settings.key_prefix),
            forwarder=Forwarder(
                view, timeout=settings.forward_timeout, cluster_secret=settings.cluster_secret
            ),
            store=Store.from_url(settings.database_url),
        )
        if settings.admin_key:
            runtime.tenancy = await Tenancy.start(settings, runtime.store, redis, reader)
        publisher = gateway_publisher(redis, settings)
        publisher.start()
        # Read at each scrape, on whichever listener serves it.
        CHANNELS.set_function(lambda: len(runtime.channels) if runtime is not None else 0)
        try:
            yield
        finally:
            await publisher.stop()
            if runtime.tenancy is not None:
                await runtime.tenancy.stop()
            await reader.stop()
            await view.stop()
            await runtime.forwarder.aclose()
            await runtime.store.close()
            await blocking.aclose()
            await redis.aclose()

    app = DirectSocketApp(
        title="durachat gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # FastAPI's own spans would wrap every WebSocket message: durachat's spans are per
        # request and per turn (docs/observability.md#traces).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )

    def rt() -> Runtime:
        assert runtime is not None
        return runtime

    def tenancy() -> Tenancy:
        found = rt().tenancy
        assert found is not None
        return found

    def directory() -> AuthDirectory | None:
        found = None if runtime is None else runtime.tenancy
        return None if found is None else found.directory

    # Every route is behind it (docs/security.md).
    app.add_middleware(
        Authenticate,
        directory=directory,
        open_tenant=settings.tenant,
        required=bool(settings.admin_key),
    )
    # Outside authentication: a bad name or an oversized body is refused before anything else.
    app.add_middleware(EdgeChecks, max_body_bytes=settings.max_body_bytes)

    def guarded(endpoint: ASGIApp) -> ASGIApp:
        """The middleware above, in its order, for a direct route."""
        checked = Authenticate(
            endpoint,
            directory=directory,
            open_tenant=settings.tenant,
            required=bool(settings.admin_key),
        )
        return EdgeChecks(checked, max_body_bytes=settings.max_body_bytes)

    add_docs(app)
    install_error_handlers(app)
    default_origins = parse_origins(settings.allowed_origins)

    async def branch_guard(
        request: Request, key: ConversationKey, op: dict[str, Any]
    ) -> Response | None:
        if rt().tenancy is None:
            return None
        stopped = await tenancy().check_branch_write(principal_of(request), key, op)
        if stopped is None:
            return None
        status, body, headers = stopped
        return JSONResponse(body, status, headers=headers)

    # The branch read API (before the `/agents/{path}` catch-all below).
    app.include_router(branch_router(rt))
    app.include_router(branch_write_router(rt, branch_guard))
    app.include_router(admin_router(tenancy))
    app.include_router(tenant_router(tenancy, max_ttl=settings.token_max_ttl))
    app.include_router(events_router(lambda: rt().redis, settings))
    app.include_router(webhooks_router(lambda: rt().store, lambda: rt().redis, settings.key_prefix))
    # The AI SDK's HTTP chat transport (useChat).
    app.include_router(
        aisdk_router(
            rt,
            send_queue_limit=settings.send_queue_limit,
            send_buffer_bytes=settings.send_buffer_bytes,
        )
    )
    mount_playground(app)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "gateway": settings.gateway_id}

    app.include_router(readiness_router(rt))

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/cluster")
    async def cluster() -> dict[str, Any]:
        shards = await rt().view.refresh()
        return {
            "shards": [
                {
                    "id": s.id,
                    "pid": s.pid,
                    "address": s.address,
                    "agents": list(s.agents),
                    "active_conversations": s.active_conversations,
                    "draining": s.draining,
                }
                for s in sorted(shards.values(), key=lambda s: s.id)
            ]
        }

    @app.get("/v1/cluster/owner")
    async def owner(
        agent: str = Query(...), name: str = Query(...), tenant: str | None = None
    ) -> JSONResponse:
        r = rt()
        await r.view.refresh()
        tag = conversation_tag(tenant or settings.tenant, agent, name)
        shard = r.view.owner(tag)
        if shard is None:
            return JSONResponse({"code": "no_shards", "message": "no live shard"}, 503)
        return JSONResponse({"shard": shard.id, "pid": shard.pid, "address": shard.address})

    @app.api_route(
        "/agents/{agent}/{name}/get-messages",
        methods=["GET", "POST", "HEAD"],
        responses=GET_MESSAGES_RESPONSES,
        summary="The transcript of a conversation (of one branch with `?branch=`)",
    )
    async def get_messages(
        request: Request,
        agent: str,
        name: str,
        branch: str | None = Query(None, description=BRANCH_QUERY_DESCRIPTION),
    ) -> Response:
        r = rt()
        if agent not in r.agents():
            return PlainTextResponse("Invalid request", 400)
        key = ConversationKey(tenant_of(request), agent, name)
        if branch:
            return await branch_messages(r.store, key, branch)
        try:
            messages = await r.store.transcript(key)
        except DatabaseUnavailableError:
            return JSONResponse(
                {"code": "database_unavailable", "message": "the transcript store is unavailable"},
                503,
            )
        return JSONResponse(messages)

    @app.api_route("/agents/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def other(path: str, request: Request) -> Response:
        parts = [p for p in path.split("/") if p]
        if len(parts) < 2:
            return PlainTextResponse("Not found", 404)
        if parts[0] not in rt().agents():
            return PlainTextResponse("Invalid request", 400)
        return PlainTextResponse("Not implemented", 404)

    async def chat_socket(websocket: WebSocket) -> None:
        agent, name = websocket.path_params["agent"], websocket.path_params["name"]
        r = rt()
        if agent not in r.agents():
            await _deny(websocket, 400, "Invalid request")
            return
        principal = principal_of(websocket)
        key = ConversationKey(tenant_of(websocket), agent, name)
        origin = websocket.headers.get("origin")
        if origin is not None:
            allowed = default_origins
            if r.tenancy is not None:
                record = r.tenancy.directory.tenant(key.tenant)
                own = None if record is None else record.settings.get("allowed_origins")
                if own is not None:
                    allowed = parse_origins(own)
            if not origin_allowed(origin, allowed):
                client_mistake("origin_not_allowed", origin)
                await _deny_with(
                    websocket,
                    JSONResponse(
                        {"code": "origin_not_allowed", "message": f"origin {origin!r} refused"},
                        403,
                    ),
                )
                return
        place: str | None = None
        if r.tenancy is not None:
            try:
                place, refusal = await r.tenancy.admit_socket(principal, key)
            except UNAVAILABLE as exc:
                log.warning("could not check the quotas of a socket: %s", exc)
                await _deny(websocket, 503, "Unavailable, retry")
                return
            if refusal is not None:
                retry = str(max(1, refusal.retry_after))
                body = PlainTextResponse(
                    quota_response_body(refusal).decode(),
                    429,
                    headers={"Retry-After": retry},
                    media_type="application/json",
                )
                await _deny_with(websocket, body)
                return
        try:
            await websocket.accept()
        except BaseException:
            if r.tenancy is not None and place is not None:
                await r.tenancy.gate.close_connection(key.tenant, place)
            raise
        # Server state is keyed by an id the server makes, never by the client's `_pk`: a
        # second socket sending another client's `_pk` gets none of that client's frames
        # (docs/protocol.md#connection).
        conn = ClientConnection(
            websocket,
            uuid.uuid4().hex,
            limit=settings.send_queue_limit,
            limit_bytes=settings.send_buffer_bytes,
            forward_bytes=settings.forward_queue_bytes,
        )
        conn.client_id = websocket.query_params.get("_pk") or conn.id
        conn.start()
        if r.tenancy is not None:
            r.tenancy.sockets[conn] = principal
        tag = conversation_tag(key.tenant, key.agent, key.name)
        CONNECTIONS.inc()
        connection_event(key, conn.id, opened=True)
        # Auth mode counts a tenant's sockets in its quota gate; open mode has one tenant.
        open_tenant = TENANT_CONNECTIONS.labels(key.tenant) if r.tenancy is None else None
        if open_tenant is not None:
            open_tenant.inc()
        channel: Channel | None = None
        unavailable = False
        cursor = websocket.query_params.get("cursor")
        conn.cursors = cursor is not None
        try:
            wanted = websocket.query_params.get("branch")
            if wanted:
                viewed = await resolve_branch(r.store, key, wanted)
                if viewed is None:
                    conn.send_error("unknown_branch", f"the conversation has no branch {wanted!r}")
                else:
                    conn.branch = viewed
            channel = await r.channels.join(tag, conn)
            if not cursor:
                channel.greet(conn)
            elif not await channel.resume_from(conn, cursor):
                conn.send_error(
                    "cursor_expired",
                    "the event log no longer reaches back to this cursor: reload the transcript "
                    "(get-messages) and reconnect without one",
                )
                channel.greet(conn)
            conn.send_json(identity_frame(name, agent))
            conn.send_json(mcp_servers_frame())
            await _serve(
                r, websocket, conn=conn, channel=channel, key=key, tag=tag, principal=principal
            )
        except WebSocketDisconnect:
            pass
        except RedisError as exc:
            # Redis is away: the conversation's log cannot be followed. Say so and close with
            # "try again later" (docs/operations.md#failure-modes).
            log.warning("could not open %s/%s: %s", agent, name, exc)
            conn.send_error(
                "unavailable", "The conversation is unavailable right now. Please retry."
            )
            unavailable = True
        finally:
            CONNECTIONS.dec()
            connection_event(key, conn.id, opened=False)
            if open_tenant is not None:
                open_tenant.dec()
            if channel is not None:
                r.channels.leave(tag, conn)
            await conn.aclose()
            if r.tenancy is not None and place is not None:
                await r.tenancy.release_socket(key.tenant, place, conn)
            if unavailable:
                with contextlib.suppress(RuntimeError):
                    await websocket.close(TRY_AGAIN_LATER)

    # Not through FastAPI's layers: each would stay suspended for the socket's whole life
    # (docs/benchmarks.md#idle-sockets).
    app.add_direct_websocket("/agents/{agent}/{name}", chat_socket, guarded)
    return app


async def _deny(websocket: WebSocket, status: int, text: str) -> None:
    await _deny_with(websocket, PlainTextResponse(text, status))


async def _deny_with(websocket: WebSocket, response: Response) -> None:
    try:
        await websocket.send_denial_response(response)
    except RuntimeError:
        await websocket.close(1008)


async def _serve(
    r: Runtime,
    websocket: WebSocket,
    *,
    conn: ClientConnection,
    channel: Channel,
    key: ConversationKey,
    tag: str,
    principal: Principal,
) -> None:
    limit = r.settings.max_frame_bytes
    tenancy = r.tenancy
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            _refuse(conn, None, "binary_frame", "frames must be JSON text")
            continue
        # Measured in characters first: only a frame that might be too large is encoded.
        if len(text) * 4 > limit and len(text.encode()) > limit:
            _refuse(conn, None, "frame_too_large", f"frames are limited to {limit} bytes")
            continue
        try:
            # Bounded before it is parsed (docs/security.md#bad-input).
            frame = limits.loads(text, max_bytes=max(limit, limits.MAX_JSON_BYTES))
        except limits.JSONLimitError as exc:
            _refuse(conn, None, "too_deep", f"the frame's {exc}")
            continue
        except json.JSONDecodeError as exc:
            _refuse(conn, None, "invalid_json", f"frame is not valid JSON: {exc.msg}")
            continue
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            _refuse(conn, None, "invalid_frame", "a frame is a JSON object with a string `type`")
            continue
        try:
            check_client_frame(frame)
        except InvalidInputError as exc:
            _refuse(conn, frame, exc.code, exc.message)
            continue
        kind: str = frame["type"]
        if kind in FORWARDED or kind in BRANCH_FRAMES or conn.forwarding:
            try:
                # Back-pressure: while this connection's frames wait for their shard, its
                # socket is not read (docs/operations.md#buffers).
                await conn.forward_room(len(text), r.settings.forward_timeout)
            except ForwardQueueFullError:
                _refuse(conn, frame, "overloaded", "too many frames are waiting; retry later")
                continue
        FRAMES_IN.labels(kind if kind.startswith("cf_agent_") else "other").inc()
        if tenancy is not None and not await tenancy.permit(conn, principal, key, frame):
            continue
        if kind in (MessageType.STREAM_RESUME_REQUEST.value, MessageType.STREAM_RESUME_ACK.value):
            if conn.forwarding:
                # Answer after the frames sent before it have reached the shard, so a probe
                # right after a request sees that request.
                resume = functools.partial(_resume, channel, conn, frame, catch_up=True)
                conn.forward(resume, len(text))
            else:
                await _resume(channel, conn, frame)
        elif kind in BRANCH_FRAMES:
            # In order with the frames forwarded before it (a switch right after a request).
            conn.forward(functools.partial(branch_frame, r, channel, conn, key, frame), len(text))
        elif kind in FORWARDED:
            _forward(r, conn, key, tag, frame, size=len(text))
        else:
            conn.send_error("unknown_frame", f"frame type {kind!r} is not supported")


def _refuse(conn: ClientConnection, frame: dict[str, Any] | None, code: str, message: str) -> None:
    """Answer a frame the gateway refuses: a chat request with an id also gets its error
    frame and its terminal frame, so its client settles (docs/protocol.md#errors)."""
    client_mistake(code, message)
    if frame is not None and frame.get("type") == MessageType.USE_CHAT_REQUEST.value:
        request_id = frame.get("id")
        if isinstance(request_id, str) and request_id:
            for answer in invalid_request_frames(request_id, message):
                conn.send_json(answer)
    conn.send_error(code, message)


async def _resume(
    channel: Channel, conn: ClientConnection, frame: dict[str, Any], *, catch_up: bool = False
) -> None:
    """The resume handshake, answered by the gateway from the event log (after catching up
    with it when the client's earlier frames may have just changed it)."""
    if catch_up:
        await channel.catch_up()
    if frame["type"] == MessageType.STREAM_RESUME_REQUEST.value:
        probe = frame.get("probeId")
        channel.resume_request(conn, probe if isinstance(probe, str) else None)
        return
    request_id = frame.get("id")
    if isinstance(request_id, str):
        await channel.resume_ack(conn, request_id)
    else:
        conn.send_error("invalid_frame", "a resume ack needs the request `id`")


def _forward(
    r: Runtime,
    conn: ClientConnection,
    key: ConversationKey,
    tag: str,
    frame: dict[str, Any],
    *,
    size: int,
) -> None:
    payload = {
        "tenant": key.tenant,
        "agent": key.agent,
        "name": key.name,
        "connection": conn.id,
        "branch": conn.branch,
        "frame": frame,
    }

    tenancy = r.tenancy
    request_id = frame.get("id")
    admit = (
        tenancy is not None
        and frame.get("type") == MessageType.USE_CHAT_REQUEST.value
        and isinstance(request_id, str)
    )

    async def deliver() -> None:
        with receive_span(frame, key.tenant, key.agent):
            await _deliver()

    async def _deliver() -> None:
        try:
            if admit:
                assert tenancy is not None and isinstance(request_id, str)
                refusal = await tenancy.admit_request(key, request_id, frame, size)
                if refusal is not None:
                    for answer in refused_turn(request_id, refusal):
                        conn.send_json(answer)
                    return
            await r.forwarder.forward(tag, payload)
        except ForwardError as exc:
            if admit:
                assert tenancy is not None and isinstance(request_id, str)
                await tenancy.gate.release(key, request_id)
            log.warning("could not forward %s: %s", frame.get("type"), exc.message)
            if frame.get("type") == MessageType.USE_CHAT_REQUEST.value and isinstance(
                frame.get("id"), str
            ):
                conn.send_json(
                    rejected_request_frame(
                        frame["id"], "The conversation is unavailable right now. Please retry."
                    )
                )
            conn.send_error(exc.code, exc.message)

    conn.forward(deliver, size)
