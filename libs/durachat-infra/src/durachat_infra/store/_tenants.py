"""The `Store` methods on tenants, their API keys and their token signing keys
(docs/security.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Row, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from durachat_infra.store._engine import insert_new
from durachat_infra.store._records import ConversationKey
from durachat_infra.store._store_core import StoreCore
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
from durachat_infra.store.models import (
    ApiKey,
    Branch,
    Message,
    SigningKey,
    Tenant,
    Turn,
    Webhook,
)
from durachat_infra.store.models import Conversation as ConversationRow

_TENANT_COLUMNS: tuple[Any, ...] = (
    Tenant.id,
    Tenant.name,
    Tenant.quotas,
    Tenant.settings,
    Tenant.created_at,
)
_KEY_COLUMNS: tuple[Any, ...] = (
    ApiKey.id,
    ApiKey.tenant_id,
    ApiKey.secret_hash,
    ApiKey.label,
    ApiKey.created_at,
    ApiKey.revoked_at,
)
_SIGNING_COLUMNS: tuple[Any, ...] = (
    SigningKey.id,
    SigningKey.tenant_id,
    SigningKey.secret,
    SigningKey.created_at,
    SigningKey.retires_at,
)


class TenantStore(StoreCore):
    """Tenants and their credentials in SQL. Not fenced: none of this belongs to a
    conversation's owner."""

    async def create_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        quotas: dict[str, int] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> TenantRecord:
        """Create a tenant.

        Raises:
            ValueError: the id is not a valid tenant id (`check_tenant_id`).
            TenantExistsError: a tenant with that id exists.
        """
        check_tenant_id(tenant_id)

        async def create(conn: AsyncConnection) -> TenantRecord:
            created = await conn.scalar(
                insert_new(
                    conn,
                    Tenant,
                    ["id"],
                    id=tenant_id,
                    name=name or tenant_id,
                    quotas=quotas or None,
                    settings=settings or None,
                    created_at=utcnow(),
                ).returning(Tenant.id)
            )
            if created is None:
                raise TenantExistsError(tenant_id)
            found = await _tenant(conn, tenant_id)
            assert found is not None
            return found

        return await self._run_write("create tenant", create)

    async def get_tenant(self, tenant_id: str) -> TenantRecord | None:
        """One tenant, or `None`."""
        async with self._read("get tenant") as conn:
            return await _tenant(conn, tenant_id)

    async def list_tenants(self) -> list[TenantRecord]:
        """Every tenant, by id."""
        async with self._read("list tenants") as conn:
            rows = await conn.execute(select(*_TENANT_COLUMNS).order_by(Tenant.id))
            return [_tenant_record(row) for row in rows]

    async def update_tenant(
        self,
        tenant_id: str,
        *,
        name: str | None = None,
        quotas: dict[str, int] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> TenantRecord:
        """Replace what is given of a tenant (an empty `quotas` or `settings` clears them).

        Raises:
            UnknownTenantError: no such tenant.
        """
        values: dict[str, Any] = {}
        if name is not None:
            values["name"] = name
        if quotas is not None:
            values["quotas"] = quotas or None
        if settings is not None:
            values["settings"] = settings or None

        async def change(conn: AsyncConnection) -> TenantRecord:
            if values:
                await conn.execute(update(Tenant).where(Tenant.id == tenant_id).values(**values))
            found = await _tenant(conn, tenant_id)
            if found is None:
                raise UnknownTenantError(tenant_id)
            return found

        return await self._run_write("update tenant", change)

    async def delete_tenant(self, tenant_id: str) -> TenantRemoval:
        """Delete a tenant with every conversation of it (messages, branches, turns, tool
        calls, incidents) and its keys, in one transaction.

        Raises:
            UnknownTenantError: no such tenant.
        """

        async def remove(conn: AsyncConnection) -> TenantRemoval:
            if await _tenant(conn, tenant_id) is None:
                raise UnknownTenantError(tenant_id)
            mine = select(ConversationRow.id).where(ConversationRow.tenant_id == tenant_id)
            keys = [
                ConversationKey(tenant_id, row.agent, row.name)
                for row in await conn.execute(
                    select(ConversationRow.agent, ConversationRow.name)
                    .where(ConversationRow.tenant_id == tenant_id)
                    .order_by(ConversationRow.id)
                )
            ]
            removal = TenantRemoval(
                conversations=keys,
                messages=await _count(conn, Message.conversation_id.in_(mine)),
                branches=await _count(conn, Branch.conversation_id.in_(mine)),
                turns=await _count(conn, Turn.conversation_id.in_(mine)),
                api_keys=await _count(conn, ApiKey.tenant_id == tenant_id),
            )
            # Branches point into the message tree and messages at each other: branches, then
            # messages, then the conversations with the rest of their rows (cascade).
            await conn.execute(delete(Branch).where(Branch.conversation_id.in_(mine)))
            await conn.execute(delete(Message).where(Message.conversation_id.in_(mine)))
            await conn.execute(
                delete(ConversationRow).where(ConversationRow.tenant_id == tenant_id)
            )
            await conn.execute(delete(ApiKey).where(ApiKey.tenant_id == tenant_id))
            await conn.execute(delete(SigningKey).where(SigningKey.tenant_id == tenant_id))
            await conn.execute(delete(Webhook).where(Webhook.tenant_id == tenant_id))
            await conn.execute(delete(Tenant).where(Tenant.id == tenant_id))
            return removal

        return await self._run_write("delete tenant", remove)

    async def count_conversations(self, tenant_id: str) -> int:
        """How many conversations the tenant has."""
        async with self._read("count conversations") as conn:
            return await _count(conn, ConversationRow.tenant_id == tenant_id)

    async def add_api_key(
        self, tenant_id: str, key_id: str, secret_hash: str, *, label: str | None = None
    ) -> ApiKeyRecord:
        """Store a new API key of a tenant (its secret already hashed).

        Raises:
            UnknownTenantError: no such tenant.
            StoreError: the key id is taken.
        """

        async def add(conn: AsyncConnection) -> ApiKeyRecord:
            if await _tenant(conn, tenant_id) is None:
                raise UnknownTenantError(tenant_id)
            created = await conn.scalar(
                insert_new(
                    conn,
                    ApiKey,
                    ["id"],
                    id=key_id,
                    tenant_id=tenant_id,
                    secret_hash=secret_hash,
                    label=label,
                    created_at=utcnow(),
                ).returning(ApiKey.id)
            )
            if created is None:
                raise StoreError(f"API key id {key_id!r} is taken")
            row = (await conn.execute(select(*_KEY_COLUMNS).where(ApiKey.id == key_id))).one()
            return _key_record(row)

        return await self._run_write("add API key", add)

    async def list_api_keys(self, tenant_id: str) -> list[ApiKeyRecord]:
        """Every API key of a tenant, revoked ones included, oldest first."""
        async with self._read("list API keys") as conn:
            rows = await conn.execute(
                select(*_KEY_COLUMNS)
                .where(ApiKey.tenant_id == tenant_id)
                .order_by(ApiKey.created_at, ApiKey.id)
            )
            return [_key_record(row) for row in rows]

    async def revoke_api_key(self, tenant_id: str, key_id: str) -> ApiKeyRecord | None:
        """Revoke an API key of the tenant (a key revoked already stays as it was); `None` if
        the tenant has no such key."""

        async def revoke(conn: AsyncConnection) -> ApiKeyRecord | None:
            mine = (ApiKey.id == key_id, ApiKey.tenant_id == tenant_id)
            await conn.execute(
                update(ApiKey).where(*mine, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow())
            )
            row = (await conn.execute(select(*_KEY_COLUMNS).where(*mine))).first()
            return None if row is None else _key_record(row)

        return await self._run_write("revoke API key", revoke)

    async def add_signing_key(
        self, tenant_id: str, key_id: str, secret: str, *, retire_others_at: datetime | None
    ) -> SigningKeyRecord:
        """Store a new signing key of a tenant; it signs the tenant's tokens from now on. The
        tenant's other keys are retired at `retire_others_at` (unless they retire sooner
        already); `None` leaves them as they are.

        Raises:
            UnknownTenantError: no such tenant.
            StoreError: the key id is taken.
        """

        async def add(conn: AsyncConnection) -> SigningKeyRecord:
            if await _tenant(conn, tenant_id) is None:
                raise UnknownTenantError(tenant_id)
            if retire_others_at is not None:
                others = SigningKey.tenant_id == tenant_id
                await conn.execute(
                    update(SigningKey)
                    .where(
                        others,
                        SigningKey.retires_at.is_(None)
                        | (SigningKey.retires_at > retire_others_at),
                    )
                    .values(retires_at=retire_others_at)
                )
            created = await conn.scalar(
                insert_new(
                    conn,
                    SigningKey,
                    ["id"],
                    id=key_id,
                    tenant_id=tenant_id,
                    secret=secret,
                    created_at=utcnow(),
                ).returning(SigningKey.id)
            )
            if created is None:
                raise StoreError(f"signing key id {key_id!r} is taken")
            row = (
                await conn.execute(select(*_SIGNING_COLUMNS).where(SigningKey.id == key_id))
            ).one()
            return _signing_record(row)

        return await self._run_write("add signing key", add)

    async def list_signing_keys(self, tenant_id: str) -> list[SigningKeyRecord]:
        """Every signing key of a tenant, oldest first."""
        async with self._read("list signing keys") as conn:
            rows = await conn.execute(
                select(*_SIGNING_COLUMNS)
                .where(SigningKey.tenant_id == tenant_id)
                .order_by(SigningKey.created_at, SigningKey.id)
            )
            return [_signing_record(row) for row in rows]

    async def remove_signing_key(self, tenant_id: str, key_id: str) -> bool:
        """Delete a signing key of the tenant (tokens it signed stop working); False if the
        tenant has no such key."""

        async def remove(conn: AsyncConnection) -> bool:
            result = await conn.execute(
                delete(SigningKey).where(SigningKey.id == key_id, SigningKey.tenant_id == tenant_id)
            )
            return bool(result.rowcount)

        return await self._run_write("remove signing key", remove)

    async def load_credentials(self) -> Credentials:
        """Every tenant, every API key not revoked, every signing key."""
        async with self._read("load credentials") as conn:
            tenants = await conn.execute(select(*_TENANT_COLUMNS).order_by(Tenant.id))
            keys = await conn.execute(
                select(*_KEY_COLUMNS).where(ApiKey.revoked_at.is_(None)).order_by(ApiKey.id)
            )
            signing = await conn.execute(select(*_SIGNING_COLUMNS).order_by(SigningKey.id))
            return Credentials(
                tenants=[_tenant_record(row) for row in tenants],
                api_keys=[_key_record(row) for row in keys],
                signing_keys=[_signing_record(row) for row in signing],
            )


async def _tenant(conn: AsyncConnection, tenant_id: str) -> TenantRecord | None:
    row = (await conn.execute(select(*_TENANT_COLUMNS).where(Tenant.id == tenant_id))).first()
    return None if row is None else _tenant_record(row)


async def _count(conn: AsyncConnection, condition: Any) -> int:
    """How many rows of the table `condition` is on match it."""
    return int(await conn.scalar(select(func.count()).where(condition)) or 0)


def _tenant_record(row: Row[Any]) -> TenantRecord:
    return TenantRecord(
        id=row.id,
        name=row.name,
        quotas=dict(row.quotas or {}),
        settings=dict(row.settings or {}),
        created_at=row.created_at,
    )


def _key_record(row: Row[Any]) -> ApiKeyRecord:
    return ApiKeyRecord(
        id=row.id,
        tenant=row.tenant_id,
        secret_hash=row.secret_hash,
        label=row.label,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def _signing_record(row: Row[Any]) -> SigningKeyRecord:
    return SigningKeyRecord(
        id=row.id,
        tenant=row.tenant_id,
        secret=row.secret,
        created_at=row.created_at,
        retires_at=row.retires_at,
    )
