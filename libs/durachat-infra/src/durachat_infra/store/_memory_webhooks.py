"""The in-memory adapter's methods on a tenant's webhooks."""

from __future__ import annotations

from durachat_infra.store._memory_data import MemoryDatabase
from durachat_infra.store._tenant_records import WebhookRecord
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import StoreError, UnknownTenantError


class MemoryWebhooks:
    """Webhooks on a `MemoryDatabase` (the contract is the store port's,
    `durachat_infra.store.port.TenantStorePort`)."""

    database: MemoryDatabase

    async def add_webhook(
        self, tenant_id: str, webhook_id: str, *, url: str, types: list[str], secret: str
    ) -> WebhookRecord:
        """Register a webhook of the tenant."""
        async with self.database.write_lock:
            if tenant_id not in self.database.tenants:
                raise UnknownTenantError(tenant_id)
            if webhook_id in self.database.webhooks:
                raise StoreError(f"webhook id {webhook_id!r} is taken")
            record = WebhookRecord(webhook_id, tenant_id, url, list(types), secret, utcnow())
            self.database.webhooks[webhook_id] = record
            return record

    async def list_webhooks(self, tenant_id: str) -> list[WebhookRecord]:
        """The tenant's webhooks, oldest first."""
        mine = [r for r in self.database.webhooks.values() if r.tenant == tenant_id]
        return sorted(mine, key=lambda r: (r.created_at, r.id))

    async def get_webhook(self, tenant_id: str, webhook_id: str) -> WebhookRecord | None:
        """The tenant's webhook, or `None`."""
        found = self.database.webhooks.get(webhook_id)
        return found if found is not None and found.tenant == tenant_id else None

    async def delete_webhook(self, tenant_id: str, webhook_id: str) -> bool:
        """Delete the tenant's webhook; False if the tenant has no such one."""
        async with self.database.write_lock:
            found = self.database.webhooks.get(webhook_id)
            if found is None or found.tenant != tenant_id:
                return False
            del self.database.webhooks[webhook_id]
            return True
