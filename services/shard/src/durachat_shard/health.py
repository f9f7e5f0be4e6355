"""The shard's liveness and readiness endpoints on its internal port (docs/deployment.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from durachat_infra.health import database_check, redis_check, registration_check, run_checks
from durachat_infra.keys import ClusterKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import Store


def health_router(redis: RedisClient, store: Store, keys: ClusterKeys, shard_id: str) -> APIRouter:
    """`GET /healthz` (alive) and `GET /readyz`: RedisClient and the database answer, and the shard
    is registered and not draining (a draining shard takes no conversation on)."""
    router = APIRouter()

    @router.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "shard": shard_id}

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        status, body = await run_checks(
            [
                lambda: redis_check(redis),
                lambda: database_check(store.engine),
                lambda: registration_check(redis, keys, shard_id),
            ]
        )
        return JSONResponse(body, status)

    return router
