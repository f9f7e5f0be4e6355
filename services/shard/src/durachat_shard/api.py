"""The shard's internal HTTP API, called by gateways and the jobs worker.

With a cluster secret, every call under `/internal/` except the health check must be signed
with it (docs/security.md#inside-the-cluster): the tenant a call names is trusted because a
gateway that authenticated the client signed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ValidationError

from durachat import limits
from durachat.protocol import MAIN_BRANCH, MessageType
from durachat_infra.cluster import RECOVER_PATH, RequireClusterSignature
from durachat_infra.eventlog import LogWriter
from durachat_infra.store import (
    ConversationKey,
    DatabaseUnavailableError,
    UnknownBranchError,
    UnknownTenantError,
)
from durachat_shard import metrics
from durachat_shard.branch_ops import BranchOpIn, apply_branch_op
from durachat_shard.hosting import Conversations, NotOwnerError, UnknownAgentError
from durachat_shard.overload import Overload
from durachat_shard.tracing import incoming_context

log = logging.getLogger(__name__)


class ConversationIn(BaseModel):
    """A conversation, by its identity."""

    tenant: str
    agent: str
    name: str


class FrameIn(BaseModel):
    """A client frame forwarded by a gateway."""

    tenant: str
    agent: str
    name: str
    connection: str
    frame: dict[str, Any]
    branch: str = MAIN_BRANCH
    """The branch the connection views (`main` or a branch id)."""
    deadline: float | None = None
    """When the gateway gives up on the frame (seconds since the epoch): a frame that reaches
    its conversation later is not run, since the client was told it failed."""


MAX_CALL_BYTES = 2 * limits.MAX_JSON_BYTES
"""Largest forwarded call: a frame within the gateway's bounds, with what the gateway wraps it
in (a chat request's body is a JSON string inside the frame, so its quotes are escaped)."""

HANDLE_WAIT = 5.0
"""Seconds the internal API waits for a frame to be handled before it answers anyway."""

ANSWER_MARGIN = 0.5
"""Seconds before the gateway's deadline by which a frame's answer is sent."""


ACTIVATION_ERRORS = (
    NotOwnerError,
    UnknownAgentError,
    UnknownBranchError,
    UnknownTenantError,
    DatabaseUnavailableError,
)
"""Why a conversation cannot be activated here; `refusal` turns each into an answer."""


def refusal(exc: Exception, shard_id: str) -> JSONResponse:
    """The answer for an activation error: gateways follow a 409 to the owner it names, retry
    a 503, and relay a 404's code to the client."""
    if isinstance(exc, NotOwnerError):
        return JSONResponse(
            {"code": "not_owner", "owner": exc.owner, "shard": shard_id}, status_code=409
        )
    if isinstance(exc, UnknownAgentError):
        return JSONResponse({"code": "unknown_agent"}, status_code=404)
    if isinstance(exc, UnknownBranchError):
        return JSONResponse(
            {"code": "unknown_branch", "message": f"no branch {exc.branch!r}"}, status_code=404
        )
    if isinstance(exc, UnknownTenantError):
        # The tenant was deleted while the call was on its way.
        return JSONResponse({"code": "unknown_tenant"}, status_code=404)
    log.warning("database unavailable: %s", exc)
    return JSONResponse({"code": "database_unavailable"}, status_code=503)


OVERLOADED = "The server is too busy to start a reply now; retry shortly."


def _admission_limit(item: FrameIn) -> float:
    """How long a chat request may wait for a shard that is behind, as far as its gateway is
    concerned: until its answer is due before the gateway's deadline."""
    if item.deadline is None:
        return math.inf
    return item.deadline - time.time() - ANSWER_MARGIN


HEALTH_PATH = "/internal/v1/health"
# Unsigned: orchestrators' probes and Prometheus' scrapes cannot sign a call, and none of these
# reveal or change a conversation.
OPEN_PATHS = frozenset({HEALTH_PATH, "/healthz", "/readyz", "/metrics"})


def build_api(
    conversations: Conversations,
    shard_id: str,
    writer: LogWriter,
    *,
    cluster_secret: str | None = None,
    load: Overload | None = None,
) -> FastAPI:
    """The internal API of one shard; with `cluster_secret`, only signed calls get through.
    With `load`, a chat request that arrives while the shard is behind waits for it to catch
    up, and is refused (`503 overloaded`) if it does not in time (`overload`)."""
    app = FastAPI(
        title="durachat shard (internal)",
        docs_url=None,
        redoc_url=None,
        # The chat request's own spans cover this call (docs/observability.md#traces).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    if cluster_secret:
        app.add_middleware(RequireClusterSignature, secret=cluster_secret, open_paths=OPEN_PATHS)

    @app.post("/internal/v1/frames")
    async def frames(request: Request) -> JSONResponse:
        # Bounded before it is parsed, as the gateway parses the client's frame
        # (docs/security.md#bad-input): the frame sits one level below the call.
        raw = await request.body()
        try:
            limits.check_text(raw, max_depth=limits.MAX_JSON_DEPTH + 1, max_bytes=MAX_CALL_BYTES)
            item = FrameIn.model_validate_json(raw)
        except (limits.JSONLimitError, ValidationError) as exc:
            log.warning("refused a forwarded frame: %s", str(exc).splitlines()[0])
            return JSONResponse({"code": "invalid_call", "message": str(exc)}, status_code=422)
        starts_turn = item.frame.get("type") == MessageType.USE_CHAT_REQUEST.value
        if starts_turn and load is not None and not await load.admit(_admission_limit(item)):
            # Before activation, which is work too; turns already running go on.
            metrics.TURNS_REFUSED.labels("overloaded").inc()
            return JSONResponse(
                {"code": "overloaded", "shard": shard_id, "message": OVERLOADED},
                status_code=503,
            )
        key = ConversationKey(item.tenant, item.agent, item.name)
        try:
            actor = await conversations.get(key, item.branch)
        except ACTIVATION_ERRORS as exc:
            return refusal(exc, shard_id)
        wait = HANDLE_WAIT
        if item.deadline is not None:
            left = item.deadline - time.time()
            if left <= 0:
                return JSONResponse({"code": "expired", "shard": shard_id}, status_code=504)
            # Answer before the gateway gives up, or it would report a frame that does run.
            wait = max(0.0, min(HANDLE_WAIT, left - ANSWER_MARGIN))
        # The gateway's span of the frame, when it traces (docs/observability.md#traces).
        handled = actor.submit(
            item.connection, item.frame, trace_context=incoming_context(request.headers)
        )
        # Answer once the frame is handled and what it sent is in the event log: a client's
        # next frame (a resume probe, say) then sees its effect.
        started = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(handled), wait)
        if starts_turn:
            # And once the accepted turn is stored: a shard that dies before that has not
            # answered, so the gateway retries on the next owner instead of the request being
            # lost with this shard's memory (docs/operations.md#when-a-shard-stops-or-dies).
            left = wait - (time.monotonic() - started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(actor.settled_writes()), max(0.0, left))
        await writer.flush()
        return JSONResponse({"ok": True, "shard": shard_id})

    @app.post(RECOVER_PATH)
    async def recover(item: ConversationIn) -> JSONResponse:
        # Activating the conversation recovers whatever its former owner left unfinished.
        key = ConversationKey(item.tenant, item.agent, item.name)
        try:
            await conversations.recover(key)
        except ACTIVATION_ERRORS as exc:
            return refusal(exc, shard_id)
        await writer.flush()
        return JSONResponse({"ok": True, "shard": shard_id})

    @app.post("/internal/v1/branches")
    async def branches(item: BranchOpIn) -> JSONResponse:
        key = ConversationKey(item.tenant, item.agent, item.name)
        try:
            actor = await conversations.get(key)
            status, body = await apply_branch_op(
                actor, item, lambda branch: conversations.stop_branch(key, branch)
            )
        except ACTIVATION_ERRORS as exc:
            return refusal(exc, shard_id)
        # What it sent is in the event log before the gateway relays the answer.
        await writer.flush()
        # The outcome of the operation travels in the body: the gateway relays it as is.
        return JSONResponse({"status": status, "body": body})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get(HEALTH_PATH)
    async def health() -> dict[str, Any]:
        return {"ok": True, "shard": shard_id, "conversations": len(conversations)}

    return app
