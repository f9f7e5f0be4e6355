"""Routes for a tenant's backend, called with its API key (docs/security.md#client-tokens):
mint a client token for a browser, read the tenant's usage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal, Self

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from durachat_gateway.admin_api import AdminRuntime, ErrorOut, usage_of
from durachat_gateway.auth.principal import principal_of
from durachat_gateway.auth.tokens import SCOPES, mint
from durachat_infra.store import DatabaseUnavailableError, UnknownTenantError

Scope = Literal["chat", "read", "branches", "events"]

MAX_NAME: Final = 512


class TokenIn(BaseModel):
    """A client token for one conversation (`name`) or for every conversation whose name
    starts with `name_prefix`, of one agent."""

    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, max_length=MAX_NAME)
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME)
    name_prefix: str | None = Field(
        None, max_length=MAX_NAME, description="'' covers every conversation of the agent"
    )
    ttl_s: int = Field(600, ge=1, description="lifetime in seconds (at most the gateway's max)")
    sub: str | None = Field(None, min_length=1, max_length=256, description="the end user")
    scopes: list[Scope] | None = Field(
        None, min_length=1, description=f"default: all of {', '.join(SCOPES)}"
    )

    @model_validator(mode="after")
    def one_target(self) -> Self:
        """Exactly one of `name` and `name_prefix`."""
        if (self.name is None) == (self.name_prefix is None):
            raise ValueError("give exactly one of `name` and `name_prefix`")
        return self


class TokenOut(BaseModel):
    """A client token."""

    token: str
    expires_at: str = Field(description="ISO 8601, UTC")


def tenant_router(runtime: Callable[[], AdminRuntime], *, max_ttl: float) -> APIRouter:
    """`POST /v1/tokens` and `GET /v1/usage`."""
    router = APIRouter(prefix="/v1", tags=["tenant"])

    @router.post(
        "/tokens",
        status_code=201,
        response_model=TokenOut,
        responses={
            400: {"model": ErrorOut, "description": "ttl_s above the gateway's maximum"},
            503: {"model": ErrorOut, "description": "the database is unavailable (retry)"},
        },
        summary="Mint a client token for a browser",
    )
    async def tokens(body: TokenIn, request: Request) -> Response:
        principal = principal_of(request)
        tenant = principal.tenant
        assert tenant is not None
        if body.ttl_s > max_ttl:
            return JSONResponse(
                {"code": "ttl_too_long", "message": f"ttl_s is at most {int(max_ttl)}"}, 400
            )
        try:
            signing = await runtime().admin.signing_key(tenant)
        except UnknownTenantError:
            return JSONResponse({"code": "unknown_tenant", "message": "tenant deleted"}, 401)
        except DatabaseUnavailableError:
            return JSONResponse({"code": "database_unavailable", "message": "retry"}, 503)
        token, expires = mint(
            kid=signing.id,
            secret=signing.secret,
            tenant=tenant,
            agent=body.agent,
            name=body.name,
            prefix=body.name_prefix,
            scopes=body.scopes or SCOPES,
            subject=body.sub,
            api_key=principal.key_id,
            ttl=body.ttl_s,
        )
        return JSONResponse(
            {"token": token, "expires_at": expires.isoformat().replace("+00:00", "Z")}, 201
        )

    @router.get("/usage", summary="The tenant's quotas and what it uses now")
    async def usage(request: Request) -> Response:
        tenant = principal_of(request).tenant
        assert tenant is not None
        try:
            return JSONResponse(await usage_of(runtime(), tenant))
        except DatabaseUnavailableError:
            return JSONResponse({"code": "database_unavailable", "message": "retry"}, 503)

    return router
