"""The shard's internal HTTP API, called by gateways."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from durachat_infra.cluster import RECOVER_PATH
from durachat_infra.eventlog import LogWriter
from durachat_infra.store import ConversationKey, DatabaseUnavailableError
from durachat_shard import metrics
from durachat_shard.branch_ops import BranchOpIn, apply_branch_op
from durachat_shard.hosting import Conversations, NotOwnerError, UnknownAgentError

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


HANDLE_WAIT = 5.0
"""Seconds the internal API waits for a frame to be handled before it answers anyway."""


def build_api(conversations: Conversations, shard_id: str, writer: LogWriter) -> FastAPI:
    """The internal API of one shard."""
    app = FastAPI(title="durachat shard (internal)", docs_url=None, redoc_url=None)

    @app.post("/internal/v1/frames")
    async def frames(item: FrameIn) -> JSONResponse:
        key = ConversationKey(item.tenant, item.agent, item.name)
        try:
            actor = await conversations.get(key)
        except NotOwnerError as exc:
            return JSONResponse(
                {"code": "not_owner", "owner": exc.owner, "shard": shard_id}, status_code=409
            )
        except UnknownAgentError:
            return JSONResponse({"code": "unknown_agent"}, status_code=404)
        except DatabaseUnavailableError as exc:
            log.warning("database unavailable: %s", exc)
            return JSONResponse({"code": "database_unavailable"}, status_code=503)
        handled = actor.submit(item.connection, item.frame)
        # Answer once the frame is handled and what it sent is in the event log: a client's
        # next frame (a resume probe, say) then sees its effect.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(handled), HANDLE_WAIT)
        await writer.flush()
        return JSONResponse({"ok": True, "shard": shard_id})

    @app.post(RECOVER_PATH)
    async def recover(item: ConversationIn) -> JSONResponse:
        # Activating the conversation recovers whatever its former owner left unfinished.
        key = ConversationKey(item.tenant, item.agent, item.name)
        try:
            await conversations.get(key)
        except NotOwnerError as exc:
            return JSONResponse(
                {"code": "not_owner", "owner": exc.owner, "shard": shard_id}, status_code=409
            )
        except UnknownAgentError:
            return JSONResponse({"code": "unknown_agent"}, status_code=404)
        except DatabaseUnavailableError as exc:
            log.warning("database unavailable: %s", exc)
            return JSONResponse({"code": "database_unavailable"}, status_code=503)
        await writer.flush()
        return JSONResponse({"ok": True, "shard": shard_id})

    @app.post("/internal/v1/branches")
    async def branches(item: BranchOpIn) -> JSONResponse:
        key = ConversationKey(item.tenant, item.agent, item.name)
        try:
            actor = await conversations.get(key)
            status, body = await apply_branch_op(actor, item)
        except NotOwnerError as exc:
            return JSONResponse(
                {"code": "not_owner", "owner": exc.owner, "shard": shard_id}, status_code=409
            )
        except UnknownAgentError:
            return JSONResponse({"code": "unknown_agent"}, status_code=404)
        except DatabaseUnavailableError as exc:
            log.warning("database unavailable: %s", exc)
            status, body = (
                503,
                {
                    "code": "database_unavailable",
                    "message": "the transcript store is unavailable",
                },
            )
        # The outcome of the operation travels in the body: the gateway relays it as is.
        return JSONResponse({"status": status, "body": body})

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.ACTIVE_CONVERSATIONS.set(len(conversations))
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/internal/v1/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "shard": shard_id, "conversations": len(conversations)}

    return app
