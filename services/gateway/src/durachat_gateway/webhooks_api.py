"""A tenant's webhooks (docs/observability.md#webhooks): `POST/GET/DELETE /v1/webhooks`, with
the tenant's API key (in open mode, the open tenant's). Deliveries are made by the jobs worker;
the ones that failed their last try are read back at `GET /v1/webhooks/{id}/dead-letters`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError

from durachat_gateway.auth.principal import tenant_of
from durachat_infra.events.webhooks import (
    MAX_URL,
    MAX_WEBHOOKS,
    check_webhook_url,
    dead_letters,
    is_webhook_id,
    new_webhook_id,
    new_webhook_secret,
)
from durachat_infra.keys import EventKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import DatabaseUnavailableError, UnknownTenantError
from durachat_infra.store.port import StorePort

MAX_TYPES: Final = 64


class WebhookIn(BaseModel):
    """A webhook to register."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=MAX_URL, description="http:// or https://")
    types: list[str] = Field(
        default_factory=list,
        max_length=MAX_TYPES,
        description="event types (`prefix:*` globs); empty: every type",
    )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status)


def _unavailable() -> JSONResponse:
    return _error(503, "database_unavailable", "the store is unavailable, retry")


def _unknown() -> JSONResponse:
    return _error(404, "unknown_webhook", "no such webhook")


def webhooks_router(
    store: Callable[[], StorePort], redis: Callable[[], RedisClient], key_prefix: str
) -> APIRouter:
    """The webhook routes."""
    router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])
    keys = EventKeys(key_prefix)

    @router.post("", status_code=201, summary="Register a webhook (its secret is shown once)")
    async def create(request: Request, body: WebhookIn) -> JSONResponse:
        tenant = tenant_of(request)
        try:
            url = check_webhook_url(body.url)
        except ValueError as exc:
            return _error(422, "invalid_url", str(exc))
        types = [t.strip() for t in body.types if t.strip()]
        if any(len(t) > 256 for t in types):
            return _error(422, "invalid_types", "an event type is at most 256 characters")
        try:
            if len(await store().list_webhooks(tenant)) >= MAX_WEBHOOKS:
                return _error(409, "too_many_webhooks", f"a tenant has at most {MAX_WEBHOOKS}")
            secret = new_webhook_secret()
            made = await store().add_webhook(
                tenant, new_webhook_id(), url=url, types=types, secret=secret
            )
        except DatabaseUnavailableError:
            return _unavailable()
        except UnknownTenantError:
            return _error(404, "unknown_tenant", "the tenant is gone")
        return JSONResponse({**made.to_json(), "secret": secret}, 201)

    @router.get("", summary="The tenant's webhooks")
    async def listing(request: Request) -> JSONResponse:
        try:
            found = await store().list_webhooks(tenant_of(request))
        except DatabaseUnavailableError:
            return _unavailable()
        return JSONResponse({"webhooks": [w.to_json() for w in found]})

    @router.get("/{webhook_id}", summary="One webhook")
    async def show(request: Request, webhook_id: str) -> JSONResponse:
        if not is_webhook_id(webhook_id):
            return _unknown()
        try:
            found = await store().get_webhook(tenant_of(request), webhook_id)
        except DatabaseUnavailableError:
            return _unavailable()
        if found is None:
            return _unknown()
        return JSONResponse(found.to_json())

    @router.delete("/{webhook_id}", summary="Delete a webhook and its dead letters")
    async def remove(request: Request, webhook_id: str) -> JSONResponse:
        tenant = tenant_of(request)
        if not is_webhook_id(webhook_id):
            return _unknown()
        try:
            deleted = await store().delete_webhook(tenant, webhook_id)
        except DatabaseUnavailableError:
            return _unavailable()
        if not deleted:
            return _unknown()
        with contextlib.suppress(RedisError):
            # Left behind, the list is bounded and no route reaches it any more.
            await redis().delete(keys.dead_letters(tenant, webhook_id))
        return JSONResponse({"id": webhook_id, "deleted": True})

    @router.get("/{webhook_id}/dead-letters", summary="Deliveries that failed their last try")
    async def dead(request: Request, webhook_id: str, limit: int = 100) -> JSONResponse:
        tenant = tenant_of(request)
        if not is_webhook_id(webhook_id):
            return _unknown()
        try:
            found = await store().get_webhook(tenant, webhook_id)
        except DatabaseUnavailableError:
            return _unavailable()
        if found is None:
            return _unknown()
        try:
            letters: list[dict[str, Any]] = await dead_letters(
                redis(), keys, tenant, webhook_id, limit=max(1, min(limit, 1000))
            )
        except RedisError:
            return _error(503, "unavailable", "retry")
        return JSONResponse({"dead_letters": letters})

    return router
