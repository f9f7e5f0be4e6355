"""The admin API (docs/security.md#the-admin-api): tenants, their API keys and their token
signing keys, for the holder of the admin key (`Authorization: Bearer <DURACHAT_ADMIN_KEY>`;
the authentication middleware checks it).

Errors are JSON `{"code", "message"}`: 404 `unknown_tenant` / `unknown_key`, 409
`tenant_exists` / `protected_tenant`, 422 for a body or id that does not validate, 503
`database_unavailable`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Final, Protocol

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from durachat_gateway.auth.directory import AuthDirectory
from durachat_gateway.tenant_admin import TenantAdmin
from durachat_infra.quotas import QuotaCounters, Quotas
from durachat_infra.store import (
    MAX_TENANT_ID,
    DatabaseUnavailableError,
    TenantExistsError,
    TenantRecord,
    UnknownTenantError,
)
from durachat_infra.store.port import TenantStorePort

TENANT_ID_PATTERN: Final = rf"^[a-z0-9][a-z0-9-]{{0,{MAX_TENANT_ID - 1}}}$"
PROTECTED_TENANT: Final = "default"
"""The tenant the first migration made, which open mode acts as: it is never deleted."""

MAX_SETTINGS: Final = 50


class ErrorOut(BaseModel):
    """An error."""

    code: str
    message: str


class QuotasIn(BaseModel):
    """Quota values of a tenant (0: no limit). In a PATCH, `null` removes an override: the
    quota falls back to its default."""

    model_config = ConfigDict(extra="forbid")

    connections: int | None = Field(None, ge=0, le=10**9)
    concurrent_turns: int | None = Field(None, ge=0, le=10**9)
    turns_per_minute: int | None = Field(None, ge=0, le=10**9)
    conversations: int | None = Field(None, ge=0, le=10**12)
    tokens_per_day: int | None = Field(None, ge=0, le=10**15)
    max_message_bytes: int | None = Field(None, ge=0, le=10**9)
    max_messages_per_request: int | None = Field(None, ge=0, le=10**9)


class TenantIn(BaseModel):
    """A new tenant."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        pattern=TENANT_ID_PATTERN,
        description=f"lowercase letters, digits and '-', at most {MAX_TENANT_ID} characters",
    )
    name: str | None = Field(None, min_length=1, max_length=200)
    quotas: QuotasIn | None = None
    settings: dict[str, Any] | None = Field(None, max_length=MAX_SETTINGS)


class TenantPatch(BaseModel):
    """Changes to a tenant: `quotas` and `settings` are merged into its own (`null` removes
    an entry)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, min_length=1, max_length=200)
    quotas: QuotasIn | None = None
    settings: dict[str, Any] | None = Field(None, max_length=MAX_SETTINGS)


class TenantOut(BaseModel):
    """A tenant."""

    id: str
    name: str
    quotas: dict[str, int] = Field(description="the quotas in force (defaults + overrides)")
    overrides: dict[str, int] = Field(description="the quotas this tenant sets itself")
    settings: dict[str, Any]
    created_at: datetime


class TenantCreated(TenantOut):
    """A new tenant and its first API key, shown this once."""

    api_key: str
    key_id: str


class KeyIn(BaseModel):
    """A new API key."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(None, max_length=200)


class SigningKeyIn(BaseModel):
    """A rotation of the tenant's token signing key."""

    model_config = ConfigDict(extra="forbid")

    overlap_s: float | None = Field(
        None,
        ge=0,
        le=30 * 86_400,
        description="seconds the previous keys keep verifying tokens (default: the longest "
        "token lifetime)",
    )


class AdminRuntime(Protocol):
    """What the admin routes need from the gateway."""

    @property
    def admin(self) -> TenantAdmin:
        """Tenant changes."""
        ...

    @property
    def directory(self) -> AuthDirectory:
        """Tenants in memory."""
        ...

    @property
    def counters(self) -> QuotaCounters:
        """Quota counters."""
        ...

    @property
    def tenant_store(self) -> TenantStorePort:
        """Tenants in the store."""
        ...


_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": ErrorOut, "description": "unknown tenant or key"},
    503: {"model": ErrorOut, "description": "the database is unavailable (retry)"},
}


def _check_settings(settings: dict[str, Any] | None) -> JSONResponse | None:
    """422 for a tenant setting the gateway reads and cannot use: `allowed_origins` is a list
    of origins (docs/security.md#origins), or null to remove it."""
    origins = (settings or {}).get("allowed_origins")
    if origins is None:
        return None
    if not isinstance(origins, list) or not all(
        isinstance(o, str) and o.strip() and len(o) <= 2048 for o in origins
    ):
        return _error(422, "invalid_settings", "`allowed_origins` is a list of origins, or null")
    return None


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status)


def tenant_json(record: TenantRecord, quotas: Quotas) -> dict[str, Any]:
    """A tenant as the admin API shows it."""
    return {
        "id": record.id,
        "name": record.name,
        "quotas": quotas.to_json(),
        "overrides": record.quotas,
        "settings": record.settings,
        "created_at": record.created_at.isoformat(),
    }


async def usage_of(runtime: AdminRuntime, tenant: str) -> dict[str, Any]:
    """What a tenant uses now, next to its quotas."""
    quotas = runtime.directory.quotas(tenant)
    usage = await runtime.counters.usage(tenant, quotas)
    usage["conversations"] = await runtime.tenant_store.count_conversations(tenant)
    return {"tenant": tenant, "quotas": quotas.to_json(), "usage": usage}


def admin_router(runtime: Callable[[], AdminRuntime]) -> APIRouter:
    """The admin routes."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"])

    async def guard(call: Callable[[], Awaitable[Response]]) -> Response:
        try:
            return await call()
        except UnknownTenantError as exc:
            return _error(404, "unknown_tenant", f"no tenant {exc.tenant!r}")
        except TenantExistsError as exc:
            return _error(409, "tenant_exists", f"tenant {exc.tenant!r} exists already")
        except DatabaseUnavailableError:
            return _error(503, "database_unavailable", "the store is unavailable")

    def shown(record: TenantRecord) -> dict[str, Any]:
        return tenant_json(record, runtime().directory.quotas_of(record))

    tenant_id = Path(pattern=TENANT_ID_PATTERN, description="the tenant's id")

    @router.post(
        "/tenants",
        status_code=201,
        response_model=TenantCreated,
        responses={409: {"model": ErrorOut, "description": "the id is taken"}, **_ERRORS},
        summary="Create a tenant (its API key is shown once)",
    )
    async def create(body: TenantIn) -> Response:
        refused = _check_settings(body.settings)
        if refused is not None:
            return refused

        async def run() -> Response:
            quotas = {} if body.quotas is None else body.quotas.model_dump(exclude_none=True)
            record, key = await runtime().admin.create(
                body.id, name=body.name, quotas=quotas, settings=body.settings or {}
            )
            return JSONResponse(
                {**shown(record), "api_key": key.key, "key_id": key.key_id}, status_code=201
            )

        return await guard(run)

    @router.get("/tenants", summary="List the tenants")
    async def list_tenants() -> Response:
        async def run() -> Response:
            records = await runtime().tenant_store.list_tenants()
            return JSONResponse({"tenants": [shown(r) for r in records]})

        return await guard(run)

    @router.get("/tenants/{tenant}", responses=_ERRORS, summary="A tenant, its keys and usage")
    async def show(tenant: str = tenant_id) -> Response:
        async def run() -> Response:
            r = runtime()
            record = await r.tenant_store.get_tenant(tenant)
            if record is None:
                raise UnknownTenantError(tenant)
            keys = await r.tenant_store.list_api_keys(tenant)
            signing = await r.tenant_store.list_signing_keys(tenant)
            return JSONResponse(
                {
                    **shown(record),
                    "api_keys": [
                        {
                            "key_id": k.id,
                            "label": k.label,
                            "created_at": k.created_at.isoformat(),
                            "revoked_at": None
                            if k.revoked_at is None
                            else k.revoked_at.isoformat(),
                        }
                        for k in keys
                    ],
                    "signing_keys": [
                        _signing_json(k.id, k.created_at, k.retires_at) for k in signing
                    ],
                    "usage": (await usage_of(r, tenant))["usage"],
                }
            )

        return await guard(run)

    @router.patch(
        "/tenants/{tenant}",
        response_model=TenantOut,
        responses=_ERRORS,
        summary="Change a tenant's quotas, settings or name",
    )
    async def update(body: TenantPatch, tenant: str = tenant_id) -> Response:
        refused = _check_settings(body.settings)
        if refused is not None:
            return refused

        async def run() -> Response:
            quotas = None if body.quotas is None else body.quotas.model_dump(exclude_unset=True)
            record = await runtime().admin.update(
                tenant, name=body.name, quotas=quotas, settings=body.settings
            )
            return JSONResponse(shown(record))

        return await guard(run)

    @router.delete(
        "/tenants/{tenant}",
        responses={409: {"model": ErrorOut, "description": "`default` is kept"}, **_ERRORS},
        summary="Delete a tenant and everything of it",
    )
    async def delete(tenant: str = tenant_id) -> Response:
        if tenant == PROTECTED_TENANT:
            return _error(409, "protected_tenant", f"tenant {tenant!r} cannot be deleted")

        async def run() -> Response:
            removed = await runtime().admin.delete(tenant)
            return JSONResponse({"id": tenant, "deleted": removed.to_json()})

        return await guard(run)

    @router.get("/tenants/{tenant}/usage", responses=_ERRORS, summary="A tenant's usage")
    async def usage(tenant: str = tenant_id) -> Response:
        async def run() -> Response:
            r = runtime()
            if await r.tenant_store.get_tenant(tenant) is None:
                raise UnknownTenantError(tenant)
            return JSONResponse(await usage_of(r, tenant))

        return await guard(run)

    @router.post(
        "/tenants/{tenant}/keys",
        status_code=201,
        responses=_ERRORS,
        summary="Another API key for the tenant (shown once)",
    )
    async def add_key(body: KeyIn | None = None, tenant: str = tenant_id) -> Response:
        async def run() -> Response:
            key, record = await runtime().admin.add_key(
                tenant, None if body is None else body.label
            )
            return JSONResponse(
                {
                    "key_id": key.key_id,
                    "api_key": key.key,
                    "label": record.label,
                    "created_at": record.created_at.isoformat(),
                },
                status_code=201,
            )

        return await guard(run)

    @router.delete(
        "/tenants/{tenant}/keys/{key_id}",
        responses=_ERRORS,
        summary="Revoke an API key (and the tokens minted with it)",
    )
    async def revoke_key(tenant: str = tenant_id, key_id: str = Path(max_length=64)) -> Response:
        async def run() -> Response:
            record = await runtime().admin.revoke_key(tenant, key_id)
            if record is None or record.revoked_at is None:
                return _error(404, "unknown_key", f"tenant {tenant!r} has no key {key_id!r}")
            return JSONResponse({"key_id": key_id, "revoked_at": record.revoked_at.isoformat()})

        return await guard(run)

    @router.post(
        "/tenants/{tenant}/signing-keys",
        status_code=201,
        responses=_ERRORS,
        summary="Rotate the key client tokens are signed with",
    )
    async def rotate(body: SigningKeyIn | None = None, tenant: str = tenant_id) -> Response:
        async def run() -> Response:
            overlap = None if body is None else body.overlap_s
            record = await runtime().admin.rotate_signing_key(tenant, overlap)
            return JSONResponse(
                _signing_json(record.id, record.created_at, record.retires_at), status_code=201
            )

        return await guard(run)

    @router.delete(
        "/tenants/{tenant}/signing-keys/{kid}",
        responses=_ERRORS,
        summary="Remove a signing key now (its tokens stop working)",
    )
    async def remove_signing(tenant: str = tenant_id, kid: str = Path(max_length=64)) -> Response:
        async def run() -> Response:
            if not await runtime().admin.remove_signing_key(tenant, kid):
                return _error(404, "unknown_key", f"tenant {tenant!r} has no signing key {kid!r}")
            return JSONResponse({"id": kid, "removed": True})

        return await guard(run)

    return router


def _signing_json(kid: str, created_at: datetime, retires_at: datetime | None) -> dict[str, Any]:
    return {
        "id": kid,
        "created_at": created_at.isoformat(),
        "retires_at": None if retires_at is None else retires_at.isoformat(),
    }
