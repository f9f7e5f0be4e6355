"""The AI SDK's own chat transport over HTTP (docs/client.md#the-ai-sdks-usechat): what
`new DefaultChatTransport({api: "<base>/v1/agents/<agent>/chat"})` and
`useChat({id: "<conversation>", resume: true})` talk to.

* `POST /v1/agents/{agent}/chat` takes the body the transport sends (`{id, messages, trigger,
  messageId, …}`; `id` is the conversation's name) and streams the reply as the UI message
  stream over Server-Sent Events, ending with `[DONE]`. A request whose last message is an
  assistant message carrying tool outputs or approval answers (what `addToolOutput` and
  `addToolApprovalResponse` followed by `sendAutomaticallyWhen` send) answers those calls and
  streams the continuation instead.
* `GET /v1/agents/{agent}/chat/{id}/stream` replays the conversation's active stream from its
  start, then follows it live (204 when nothing streams).
* `POST /v1/agents/{agent}/chat/{id}/stop` cancels the active stream. Closing the response
  does not: the reply goes on and can be resumed, as on the WebSocket.

It is the same conversation as over the WebSocket: each HTTP request is a connection of its own
on the conversation's channel, and its frames go to the owner shard like a socket's, so
WebSocket tabs see the turn live, and branches (`?branch=`), tools, cancellation and recovery
behave the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Protocol, cast

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.websockets import WebSocket

from durachat import limits
from durachat.protocol import MessageType
from durachat_gateway.auth.principal import principal_of
from durachat_gateway.branch_frames import resolve_branch
from durachat_gateway.channels import Channel, Channels
from durachat_gateway.connection import DEFAULT_BUFFER_BYTES, ClientConnection
from durachat_gateway.edges import name_problem
from durachat_gateway.forwarder import RETRY_LATER, Forwarder, ForwardError
from durachat_gateway.telemetry import receive_span
from durachat_gateway.tenancy import UNAVAILABLE, Tenancy, quota_response_body
from durachat_infra.keys import conversation_tag
from durachat_infra.store import (
    MAIN_BRANCH,
    ConversationKey,
    DatabaseUnavailableError,
    Store,
    parse_branch_ref,
)

log = logging.getLogger(__name__)

UI_MESSAGE_STREAM_HEADERS: Final = {
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The headers of the AI SDK's UI message stream responses (`UI_MESSAGE_STREAM_HEADERS`)."""

CONTINUATION_WAIT: Final = 60.0
"""Seconds a request that answered tool calls waits for the continuation to start."""

_TRANSPORT_FIELDS: Final = frozenset({"id", "messages", "trigger", "messageId", "branch"})
"""Body fields the transport itself sends; the others are the application's (`body`)."""


class AiSdkRuntime(Protocol):
    """What the routes need from the gateway."""

    store: Store
    channels: Channels
    forwarder: Forwarder
    tenancy: Tenancy | None

    def agents(self) -> set[str]:
        """Agent names served by the live shards."""
        ...


class StreamConnection(ClientConnection):
    """An HTTP request as a connection of the conversation's channel: the frames meant for it
    are queued for the response instead of written to a socket."""

    def __init__(self, *, limit: int, limit_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        # No socket: `send` is the only way out, and it never touches one.
        super().__init__(
            cast(WebSocket, None), f"http-{uuid.uuid4().hex}", limit=limit, limit_bytes=limit_bytes
        )
        self.frames: asyncio.Queue[str | None] = asyncio.Queue()
        self._frame_limit = limit
        self._byte_limit = limit_bytes
        self._pending_bytes = 0

    def send(self, text: str) -> None:
        """Queue a frame for the response (ends it if it falls `limit` frames or `limit_bytes`
        behind)."""
        if self.closed:
            return
        size = len(text)
        if self.frames.qsize() and (
            self.frames.qsize() >= self._frame_limit
            or self._pending_bytes + size > self._byte_limit
        ):
            log.warning("HTTP stream %s is too slow; ending it", self.id)
            self.closed = True
            while not self.frames.empty():
                self.frames.get_nowait()
            self._pending_bytes = 0
            self.frames.put_nowait(None)
            return
        self._pending_bytes += size
        self.frames.put_nowait(text)

    async def next_frame(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next frame, None once the connection was ended (TimeoutError after
        `timeout`)."""
        text = await asyncio.wait_for(self.frames.get(), timeout)
        if text is None:
            return None
        self._pending_bytes = max(0, self._pending_bytes - len(text))
        return cast(dict[str, Any], json.loads(text))


def aisdk_router(
    runtime: Callable[[], AiSdkRuntime],
    *,
    send_queue_limit: int,
    send_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
) -> APIRouter:
    """The AI SDK routes, for conversations of the tenant each request's credential acts for
    (a token only for the conversations it covers, with the scope the route needs). A response
    that falls `send_queue_limit` frames behind is ended (the client resumes)."""
    router = APIRouter(tags=["ai-sdk"])

    def admit(request: Request, agent: str, name: str, scope: str) -> ConversationKey | Response:
        """The conversation a request may use, or its refusal (docs/security.md)."""
        principal = principal_of(request)
        problem = name_problem(name)
        if problem is not None:
            return _error(400, "invalid_name", problem)
        if principal.tenant is None:
            return _error(403, "tenant_credential_required", "the admin key acts for no tenant")
        if not principal.covers(agent, name):
            # As if it did not exist: a credential learns nothing of other conversations.
            return _error(404, "not_found", "no such conversation")
        if not principal.allows(scope):
            return _error(403, "insufficient_scope", f"the token lacks the {scope!r} scope")
        if agent not in runtime().agents():
            return _error(404, "unknown_agent", f"no live shard serves agent {agent!r}")
        try:
            return ConversationKey(principal.tenant, agent, name)
        except ValueError as exc:
            return _error(400, "invalid_name", str(exc))

    async def quotas(
        key: ConversationKey, request_id: str, frame: dict[str, Any], size: int
    ) -> Response | None:
        """The tenant's quotas on a new turn: a 429 naming the one it would exceed."""
        tenancy = runtime().tenancy
        if tenancy is None:
            return None
        try:
            refusal = await tenancy.gate.new_conversation(key)
            if refusal is None:
                refusal = await tenancy.admit_request(key, request_id, frame, size)
        except (ForwardError, *UNAVAILABLE):
            return _error(503, "unavailable", "the quota counters are unreachable; retry")
        if refusal is None:
            return None
        return Response(
            quota_response_body(refusal),
            429,
            headers={"Retry-After": str(max(1, refusal.retry_after))},
            media_type="application/json",
        )

    async def open_stream(
        key: ConversationKey, branch: str | None
    ) -> tuple[StreamConnection, Channel, str] | Response:
        """Join the conversation's channel as a new connection viewing `branch`."""
        r = runtime()
        viewed: str | None = MAIN_BRANCH
        if branch:
            try:
                viewed = await resolve_branch(r.store, key, branch)
            except DatabaseUnavailableError:
                return _error(503, "database_unavailable", "the transcript store is unavailable")
        if viewed is None:
            return _error(404, "unknown_branch", f"the conversation has no branch {branch!r}")
        conn = StreamConnection(limit=send_queue_limit, limit_bytes=send_buffer_bytes)
        conn.branch = viewed
        tag = conversation_tag(key.tenant, key.agent, key.name)
        channel = await r.channels.join(tag, conn)
        return conn, channel, tag

    async def forward(
        tag: str, key: ConversationKey, conn: ClientConnection, frame: dict[str, Any]
    ) -> None:
        payload = {
            "tenant": key.tenant,
            "agent": key.agent,
            "name": key.name,
            "connection": conn.id,
            "branch": conn.branch,
            "frame": frame,
        }
        # A chat request is a `chat.receive` span, as on a WebSocket (docs/observability.md).
        with receive_span(frame, key.tenant, key.agent):
            await runtime().forwarder.forward(tag, payload)

    def respond(conn: StreamConnection, tag: str, chunks: AsyncIterator[str]) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            try:
                async for chunk in chunks:
                    yield f"data: {chunk}\n\n"
                yield "data: [DONE]\n\n"
            finally:
                # A closed response leaves the turn running: only a stop cancels it.
                runtime().channels.leave(tag, conn)
                await conn.aclose()

        return StreamingResponse(
            events(), media_type="text/event-stream", headers=UI_MESSAGE_STREAM_HEADERS
        )

    @router.post("/v1/agents/{agent}/chat", summary="Chat, as the AI SDK's DefaultChatTransport")
    async def chat(agent: str, request: Request, branch: str | None = Query(None)) -> Response:
        try:
            body = limits.loads(await request.body())
        except limits.JSONLimitError as exc:
            return _error(400, "too_deep" if exc.kind == "depth" else "body_too_large", str(exc))
        except ValueError:
            return _error(400, "invalid_json", "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "invalid_request", "the body is a JSON object")
        name, messages = body.get("id"), body.get("messages")
        if not isinstance(name, str) or not name or not isinstance(messages, list):
            return _error(400, "invalid_request", "the body needs `id` and `messages`")
        key = admit(request, agent, name, "chat")
        if isinstance(key, Response):
            return key
        wanted = branch or body.get("branch")
        opened = await open_stream(key, str(wanted) if wanted else None)
        if isinstance(opened, Response):
            return opened
        conn, _channel, tag = opened
        counted, request_id = False, ""
        try:
            answers = await _tool_answers(runtime().store, key, conn.branch, messages)
            if answers:
                for frame in answers:
                    await forward(tag, key, conn, frame)
                if not _continues(messages):
                    return respond(conn, tag, _nothing())
                return respond(conn, tag, _relay(conn, None))
            request_id = uuid.uuid4().hex
            extra = {k: v for k, v in body.items() if k not in _TRANSPORT_FIELDS}
            inner = {
                "messages": messages,
                "trigger": body.get("trigger") or "submit-message",
                **extra,
            }
            encoded = json.dumps(inner)
            frame = {
                "type": MessageType.USE_CHAT_REQUEST.value,
                "id": request_id,
                "init": {"method": "POST", "body": encoded},
            }
            refused = await quotas(key, request_id, frame, len(encoded))
            if refused is not None:
                runtime().channels.leave(tag, conn)
                await conn.aclose()
                return refused
            counted = True
            await forward(tag, key, conn, frame)
        except ForwardError as exc:
            tenancy = runtime().tenancy
            if counted and tenancy is not None:
                await tenancy.gate.release(key, request_id)
            runtime().channels.leave(tag, conn)
            await conn.aclose()
            return _error(503 if exc.code in RETRY_LATER else 404, exc.code, exc.message)
        except BaseException:
            runtime().channels.leave(tag, conn)
            await conn.aclose()
            raise
        return respond(conn, tag, _relay(conn, request_id))

    @router.get(
        "/v1/agents/{agent}/chat/{name}/stream",
        summary="Resume the conversation's active stream from its start (204: none)",
    )
    async def resume(
        agent: str, name: str, request: Request, branch: str | None = Query(None)
    ) -> Response:
        key = admit(request, agent, name, "read")
        if isinstance(key, Response):
            return key
        opened = await open_stream(key, branch)
        if isinstance(opened, Response):
            return opened
        conn, channel, tag = opened
        state = channel.state_of(conn.branch)
        if state.status == "streaming" and state.request:
            await channel.resume_ack(conn, state.request)
            return respond(conn, tag, _relay(conn, state.request))
        if state.status == "pending" and state.request:
            # Streams once the turn starts: the channel offers it then (see `_relay`).
            conn.parked = state.request
            return respond(conn, tag, _relay(conn, state.request, channel=channel))
        runtime().channels.leave(tag, conn)
        await conn.aclose()
        return Response(status_code=204)

    @router.post(
        "/v1/agents/{agent}/chat/{name}/stop",
        summary="Stop the conversation's active stream (a closed response does not)",
    )
    async def stop(
        agent: str, name: str, request: Request, branch: str | None = Query(None)
    ) -> Response:
        key = admit(request, agent, name, "chat")
        if isinstance(key, Response):
            return key
        opened = await open_stream(key, branch)
        if isinstance(opened, Response):
            return opened
        conn, channel, tag = opened
        try:
            state = channel.state_of(conn.branch)
            active = state.request if state.status in ("pending", "streaming") else None
            if active:
                cancel = {"type": MessageType.CHAT_REQUEST_CANCEL.value, "id": active}
                await forward(tag, key, conn, cancel)
        except ForwardError as exc:
            return _error(503, exc.code, exc.message)
        finally:
            runtime().channels.leave(tag, conn)
            await conn.aclose()
        return JSONResponse({"stopped": active or None})

    return router


async def _relay(
    conn: StreamConnection, request_id: str | None, *, channel: Channel | None = None
) -> AsyncIterator[str]:
    """The UI message chunks of one request, as the frames for `conn` bring them, until its
    end. `request_id` None: the first continuation that streams (the one the request's tool
    answers start). With `channel`, a stream offered once it starts is taken up (ACKed)."""
    waiting = request_id is None
    while True:
        try:
            frame = await conn.next_frame(CONTINUATION_WAIT if waiting else None)
        except TimeoutError:
            return
        if frame is None:
            return
        kind = frame.get("type")
        if kind == MessageType.STREAM_RESUMING.value and channel is not None:
            await channel.resume_ack(conn, str(frame.get("id")))
            continue
        if kind == MessageType.STREAM_RESUME_NONE.value and channel is not None:
            return
        if kind != MessageType.USE_CHAT_RESPONSE.value:
            continue
        if request_id is None:
            if not frame.get("continuation"):
                continue
            request_id = str(frame.get("id"))
            waiting = False
        if frame.get("id") != request_id:
            continue
        body = frame.get("body")
        if frame.get("done"):
            if frame.get("error") and isinstance(body, str) and body:
                yield json.dumps({"type": "error", "errorText": body})
            elif frame.get("outcome") == "aborted":
                yield json.dumps({"type": "abort"})
            return
        if frame.get("error"):
            yield json.dumps({"type": "error", "errorText": str(body or "An error occurred.")})
        elif isinstance(body, str) and body:
            yield body


async def _nothing() -> AsyncIterator[str]:
    """No chunks: tool answers after which nothing continues (calls still wait)."""
    nothing: tuple[str, ...] = ()
    for chunk in nothing:
        yield chunk


def _tool_parts(message: Any) -> list[dict[str, Any]]:
    parts = message.get("parts") if isinstance(message, dict) else None
    return [
        p
        for p in (parts if isinstance(parts, list) else [])
        if isinstance(p, dict)
        and isinstance(p.get("toolCallId"), str)
        and (str(p.get("type", "")).startswith("tool-") or p.get("type") == "dynamic-tool")
    ]


def _tool_name(part: dict[str, Any]) -> str:
    if part.get("type") == "dynamic-tool":
        return str(part.get("toolName", ""))
    return str(part.get("type", "")).removeprefix("tool-")


async def _tool_answers(
    store: Store, key: ConversationKey, branch: str, messages: list[Any]
) -> list[dict[str, Any]]:
    """The tool result and approval frames a request's last message carries: its tool parts
    that the client answered (`output-available`, `output-error`, `approval-responded`) while
    the stored transcript still waits for them."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return []
    answered = [
        p
        for p in _tool_parts(last)
        if p.get("state") in ("output-available", "output-error", "approval-responded")
    ]
    if not answered:
        return []
    conversation = await store.find_conversation(key)
    if conversation is None:
        return []
    ref = MAIN_BRANCH if branch == MAIN_BRANCH else parse_branch_ref(branch)
    path = await store.branch_path(conversation.id, ref) or []
    waiting = {
        p["toolCallId"]: p.get("state")
        for stored in path[-4:]
        for p in _tool_parts(stored.message)
        if p.get("state") in ("input-available", "approval-requested")
    }
    frames: list[dict[str, Any]] = []
    for part in answered:
        call, state = part["toolCallId"], part.get("state")
        if state == "approval-responded" and waiting.get(call) == "approval-requested":
            approval = part.get("approval")
            approved = isinstance(approval, dict) and approval.get("approved") is True
            frames.append(
                {
                    "type": MessageType.TOOL_APPROVAL.value,
                    "toolCallId": call,
                    "approved": approved,
                    "autoContinue": True,
                }
            )
        elif state in ("output-available", "output-error") and waiting.get(call) == (
            "input-available"
        ):
            frame: dict[str, Any] = {
                "type": MessageType.TOOL_RESULT.value,
                "toolCallId": call,
                "toolName": _tool_name(part),
                "output": part.get("output"),
                "autoContinue": state == "output-available",
            }
            if state == "output-error":
                frame["state"] = "output-error"
                frame["errorText"] = str(part.get("errorText", ""))
            frames.append(frame)
    return frames


def _continues(messages: list[Any]) -> bool:
    """Whether the server continues after the answers in the last message: every call of it
    has an answer, and not only errors (the server never continues after an error)."""
    parts = _tool_parts(messages[-1])
    settled = ("output-available", "output-error", "output-denied", "approval-responded")
    if any(p.get("state") not in settled for p in parts):
        return False
    return any(p.get("state") != "output-error" for p in parts)


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status)
