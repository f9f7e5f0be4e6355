"""The `Store` methods on a tenant's webhooks (docs/observability.md#webhooks)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row, delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from durachat_infra.store._engine import insert_new
from durachat_infra.store._store_core import StoreCore
from durachat_infra.store._tenant_records import WebhookRecord
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import StoreError, UnknownTenantError
from durachat_infra.store.models import Tenant, Webhook

_COLUMNS: tuple[Any, ...] = (
    Webhook.id,
    Webhook.tenant_id,
    Webhook.url,
    Webhook.types,
    Webhook.secret,
    Webhook.created_at,
)


class WebhookStore(StoreCore):
    """A tenant's webhooks in SQL. Not fenced: they belong to no conversation."""

    async def add_webhook(
        self, tenant_id: str, webhook_id: str, *, url: str, types: list[str], secret: str
    ) -> WebhookRecord:
        """Register a webhook of the tenant.

        Raises:
            UnknownTenantError: no such tenant.
            StoreError: the webhook id is taken.
        """

        async def add(conn: AsyncConnection) -> WebhookRecord:
            if await conn.scalar(select(Tenant.id).where(Tenant.id == tenant_id)) is None:
                raise UnknownTenantError(tenant_id)
            created = await conn.scalar(
                insert_new(
                    conn,
                    Webhook,
                    ["id"],
                    id=webhook_id,
                    tenant_id=tenant_id,
                    url=url,
                    types=list(types) or None,
                    secret=secret,
                    created_at=utcnow(),
                ).returning(Webhook.id)
            )
            if created is None:
                raise StoreError(f"webhook id {webhook_id!r} is taken")
            row = (await conn.execute(select(*_COLUMNS).where(Webhook.id == webhook_id))).one()
            return _record(row)

        return await self._run_write("add webhook", add)

    async def list_webhooks(self, tenant_id: str) -> list[WebhookRecord]:
        """The tenant's webhooks, oldest first."""
        async with self._read("list webhooks") as conn:
            rows = await conn.execute(
                select(*_COLUMNS)
                .where(Webhook.tenant_id == tenant_id)
                .order_by(Webhook.created_at, Webhook.id)
            )
            return [_record(row) for row in rows]

    async def get_webhook(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
        """The tenant's webhook, or `None`."""
        async with self._read("get webhook") as conn:
            row = (
                await conn.execute(
                    select(*_COLUMNS).where(
                        Webhook.id == webhook_id, Webhook.tenant_id == tenant_id
                    )
                )
            ).first()
            return None if row is None else _record(row)

    async def delete_webhook(self, tenant_id: str, webhook_id: str) -> bool:
        """Delete the tenant's webhook; False if the tenant has no such one."""

        async def remove(conn: AsyncConnection) -> bool:
            result = await conn.execute(
                delete(Webhook).where(Webhook.id == webhook_id, Webhook.tenant_id == tenant_id)
            )
            return bool(result.rowcount)

        return await self._run_write("delete webhook", remove)


def _record(row: Row[Any]) -> WebhookRecord:
    return WebhookRecord(
        id=row.id,
        tenant=row.tenant_id,
        url=row.url,
        types=list(row.types or []),
        secret=row.secret,
        created_at=row.created_at,
    )
