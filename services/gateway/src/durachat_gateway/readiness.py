"""The gateway's readiness endpoint, `GET /readyz` (docs/deployment.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from durachat_infra.cluster import ClusterView
from durachat_infra.health import (
    Check,
    database_check,
    live_shards_check,
    redis_check,
    run_checks,
)
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import Store


class ReadinessDeps(Protocol):
    """What the readiness checks read from the gateway's runtime."""

    redis: RedisClient
    view: ClusterView
    store: Store


def readiness_router(runtime: Callable[[], ReadinessDeps]) -> APIRouter:
    """`GET /readyz`: RedisClient and the database answer, and at least one live shard is not
    draining. `/healthz` (alive) stays in the app."""
    router = APIRouter()

    @router.get("/readyz")
    async def readyz() -> JSONResponse:
        r = runtime()

        async def shards() -> Check:
            return live_shards_check(r.view.shards)

        status, body = await run_checks(
            [
                lambda: redis_check(r.redis),
                lambda: database_check(r.store.engine),
                shards,
            ]
        )
        return JSONResponse(body, status)

    return router
