"""Tenants, keys and tokens for end-to-end tests of a cluster that requires credentials."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx

from support.waiting import eventually

ADMIN_KEY = "e2e-admin-key"
AUTH_ENV = {"DURACHAT_ADMIN_KEY": ADMIN_KEY}
"""What a test cluster needs to require credentials."""


def bearer(credential: str) -> dict[str, str]:
    """The `Authorization` header of a credential."""
    return {"Authorization": f"Bearer {credential}"}


ADMIN = bearer(ADMIN_KEY)


@dataclass(frozen=True)
class Tenant:
    """A tenant made for a test, with its first API key."""

    id: str
    key: str
    key_id: str

    @property
    def headers(self) -> dict[str, str]:
        """Its API key as a header."""
        return bearer(self.key)


def tenant_id(prefix: str = "t") -> str:
    """A tenant id of this test's own."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_tenant(
    http: httpx.AsyncClient,
    tenant: str | None = None,
    *,
    quotas: dict[str, int] | None = None,
    known_at: list[str] | None = None,
) -> Tenant:
    """Create a tenant through the admin API; with `known_at` (gateway URLs), wait until each
    of them accepts its key (a gateway learns of a new key within its refresh interval)."""
    body: dict[str, Any] = {"id": tenant or tenant_id()}
    if quotas is not None:
        body["quotas"] = quotas
    response = await http.post("/v1/admin/tenants", json=body, headers=ADMIN)
    assert response.status_code == 201, response.text
    created = response.json()
    made = Tenant(created["id"], created["api_key"], created["key_id"])
    for url in known_at or []:
        async with httpx.AsyncClient(base_url=url, headers=made.headers, timeout=10) as gateway:

            async def known(gateway: httpx.AsyncClient = gateway) -> bool:
                return (await gateway.get("/v1/usage")).status_code == 200

            await eventually(known, timeout=5.0)
    return made


async def mint(
    http: httpx.AsyncClient, tenant: Tenant, agent: str, name: str | None = None, **more: Any
) -> str:
    """A client token of the tenant for one conversation (or `name_prefix=`)."""
    body: dict[str, Any] = {"agent": agent, **more}
    if name is not None:
        body["name"] = name
    response = await http.post("/v1/tokens", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token
