"""The in-memory adapter's methods on tenants, their API keys and their token signing keys."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from durachat_infra.store._memory_data import MemoryDatabase, TenantRow, encode
from durachat_infra.store._tenant_records import (
    ApiKeyRecord,
    Credentials,
    SigningKeyRecord,
    TenantRecord,
    TenantRemoval,
    check_tenant_id,
)
from durachat_infra.store._types import utcnow
from durachat_infra.store.errors import StoreError, TenantExistsError, UnknownTenantError


class MemoryTenants:
    """Tenants and their credentials on a `MemoryDatabase` (the contract is the store port's,
    `durachat_infra.store.port.TenantStorePort`)."""

    database: MemoryDatabase

    async def create_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        quotas: dict[str, int] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> TenantRecord:
        """Create a tenant."""
        check_tenant_id(tenant_id)
        async with self.database.write_lock:
            if tenant_id in self.database.tenants:
                raise TenantExistsError(tenant_id)
            row = TenantRow(
                tenant_id,
                name or tenant_id,
                encode(quotas or None, "create tenant"),
                encode(settings or None, "create tenant"),
                utcnow(),
            )
            self.database.tenants[tenant_id] = row
            return row.record()

    async def get_tenant(self, tenant_id: str) -> TenantRecord | None:
        """One tenant, or `None`."""
        row = self.database.tenants.get(tenant_id)
        return None if row is None else row.record()

    async def list_tenants(self) -> list[TenantRecord]:
        """Every tenant, by id."""
        return [self.database.tenants[key].record() for key in sorted(self.database.tenants)]

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        quotas: dict[str, int] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> TenantRecord:
        """Replace what is given of a tenant."""
        async with self.database.write_lock:
            row = self.database.tenants.get(tenant_id)
            if row is None:
                raise UnknownTenantError(tenant_id)
            if name is not None:
                row = replace(row, name=name)
            if quotas is not None:
                row = replace(row, quotas=encode(quotas or None, "update tenant"))
            if settings is not None:
                row = replace(row, settings=encode(settings or None, "update tenant"))
            self.database.tenants[tenant_id] = row
            return row.record()

    async def delete_tenant(self, tenant_id: str) -> TenantRemoval:
        """Delete a tenant, its conversations and its keys."""
        database = self.database
        async with database.write_lock:
            if tenant_id not in database.tenants:
                raise UnknownTenantError(tenant_id)
            doomed = sorted(
                (
                    state
                    for state in database.conversations.values()
                    if state.key.tenant == tenant_id
                ),
                key=lambda state: state.id,
            )
            keys = [key for key, record in database.api_keys.items() if record.tenant == tenant_id]
            removal = TenantRemoval(
                conversations=[state.key for state in doomed],
                messages=sum(len(state.messages) for state in doomed),
                branches=sum(len(state.branches) for state in doomed),
                turns=sum(len(state.turns) for state in doomed),
                api_keys=len(keys),
            )
            for state in doomed:
                del database.conversations[state.id]
                del database.by_key[state.key]
            for key in keys:
                del database.api_keys[key]
            for kid in [k for k, r in database.signing_keys.items() if r.tenant == tenant_id]:
                del database.signing_keys[kid]
            for hook in [k for k, r in database.webhooks.items() if r.tenant == tenant_id]:
                del database.webhooks[hook]
            del database.tenants[tenant_id]
            return removal

    async def count_conversations(self, tenant_id: str) -> int:
        """How many conversations the tenant has."""
        return sum(1 for key in self.database.by_key if key.tenant == tenant_id)

    async def add_api_key(
        self, tenant_id: str, key_id: str, secret_hash: str, *, label: str | None = None
    ) -> ApiKeyRecord:
        """Store a new API key of a tenant."""
        async with self.database.write_lock:
            if tenant_id not in self.database.tenants:
                raise UnknownTenantError(tenant_id)
            if key_id in self.database.api_keys:
                raise StoreError(f"API key id {key_id!r} is taken")
            record = ApiKeyRecord(key_id, tenant_id, secret_hash, label, utcnow(), None)
            self.database.api_keys[key_id] = record
            return record

    async def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        """Every API key of a tenant, oldest first."""
        mine = [r for r in self.database.api_keys.values() if r.tenant == tenant_id]
        return sorted(mine, key=lambda r: (r.created_at, r.id))

    async def revoke_api_key(self, tenant_id: str, key_id: str) -> ApiKeyRecord | None:
        """Revoke an API key of the tenant; `None` if it has no such key."""
        async with self.database.write_lock:
            record = self.database.api_keys.get(key_id)
            if record is None or record.tenant != tenant_id:
                return None
            if record.revoked_at is None:
                record = replace(record, revoked_at=utcnow())
                self.database.api_keys[key_id] = record
            return record

    async def add_signing_key(
        self, tenant_id: str, key_id: str, secret: str, *, retire_others_at: datetime | None
    ) -> SigningKeyRecord:
        """Store a new signing key of a tenant, retiring the others at `retire_others_at`."""
        async with self.database.write_lock:
            if tenant_id not in self.database.tenants:
                raise UnknownTenantError(tenant_id)
            if key_id in self.database.signing_keys:
                raise StoreError(f"signing key id {key_id!r} is taken")
            if retire_others_at is not None:
                for kid, other in list(self.database.signing_keys.items()):
                    if other.tenant == tenant_id and (
                        other.retires_at is None or other.retires_at > retire_others_at
                    ):
                        self.database.signing_keys[kid] = replace(
                            other, retires_at=retire_others_at
                        )
            record = SigningKeyRecord(key_id, tenant_id, secret, utcnow(), None)
            self.database.signing_keys[key_id] = record
            return record

    async def list_signing_keys(self, tenant_id: str) -> list[SigningKeyRecord]:
        """Every signing key of a tenant, oldest first."""
        mine = [r for r in self.database.signing_keys.values() if r.tenant == tenant_id]
        return sorted(mine, key=lambda r: (r.created_at, r.id))

    async def remove_signing_key(self, tenant_id: str, key_id: str) -> bool:
        """Delete a signing key of the tenant; False if it has no such key."""
        async with self.database.write_lock:
            record = self.database.signing_keys.get(key_id)
            if record is None or record.tenant != tenant_id:
                return False
            del self.database.signing_keys[key_id]
            return True

    async def load_credentials(self) -> Credentials:
        """Every tenant, every API key not revoked, every signing key."""
        database = self.database
        return Credentials(
            tenants=[database.tenants[key].record() for key in sorted(database.tenants)],
            api_keys=[
                database.api_keys[key]
                for key in sorted(database.api_keys)
                if database.api_keys[key].revoked_at is None
            ],
            signing_keys=[database.signing_keys[key] for key in sorted(database.signing_keys)],
        )
