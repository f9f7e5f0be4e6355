"""The shard's internal HTTP API, called by gateways."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from durachat_infra.store import ConversationKey, DatabaseUnavailableError
from durachat_shard import metrics
from durachat_shard.hosting import Conversations, NotOwnerError, UnknownAgentError

log = logging.getLogger(__name__)


class FrameIn(BaseModel):
    """A client frame forwarded by a gateway."""

    tenant: str
    agent: str
    name: str
    connection: str
    frame: dict[str, Any]


def build_api(conversations: Conversations, shard_id: str) -> FastAPI:
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
        actor.submit(item.connection, item.frame)
        return JSONResponse({"ok": True, "shard": shard_id})

    @app.get("/metrics")
    async def prometheus() -> Response:
        metrics.ACTIVE_CONVERSATIONS.set(len(conversations))
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/internal/v1/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "shard": shard_id, "conversations": len(conversations)}

    return app
