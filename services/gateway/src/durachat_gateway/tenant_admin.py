"""What the admin API does to tenants and their credentials (docs/security.md): the store
holds them, every change is announced so each gateway's directory reloads, and deleting a
tenant also removes its conversations' event logs and its quota counters from Redis."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from durachat_gateway.auth.credentials import NewApiKey, new_api_key, new_signing_key
from durachat_gateway.auth.directory import AuthDirectory
from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.quotas import QuotaCounters
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import (
    ApiKeyRecord,
    ConversationKey,
    SigningKeyRecord,
    TenantRecord,
)
from durachat_infra.store.port import TenantStorePort

_DELETE_BATCH = 500


@dataclass(frozen=True, slots=True)
class Removed:
    """What deleting a tenant removed."""

    conversations: int
    messages: int
    branches: int
    turns: int
    api_keys: int
    event_logs: int

    def to_json(self) -> dict[str, int]:
        """As the admin API answers it."""
        return {
            "conversations": self.conversations,
            "messages": self.messages,
            "branches": self.branches,
            "turns": self.turns,
            "api_keys": self.api_keys,
            "event_logs": self.event_logs,
        }


class TenantAdmin:
    """Creates, changes and deletes tenants and their keys."""

    def __init__(
        self,
        store: TenantStorePort,
        redis: RedisClient,
        directory: AuthDirectory,
        counters: QuotaCounters,
        *,
        key_prefix: str,
        signing_overlap: float,
    ) -> None:
        self._store = store
        self._redis = redis
        self._directory = directory
        self._counters = counters
        self._prefix = key_prefix
        self._overlap = signing_overlap

    async def create(
        self,
        tenant_id: str,
        *,
        name: str | None,
        quotas: dict[str, int],
        settings: dict[str, Any],
    ) -> tuple[TenantRecord, NewApiKey]:
        """A new tenant with its first API key and signing key.

        Raises:
            TenantExistsError: the id is taken.
        """
        record = await self._store.create_tenant(
            tenant_id, name=name, quotas=quotas, settings=settings
        )
        key = new_api_key()
        await self._store.add_api_key(tenant_id, key.key_id, key.secret_hash, label="initial")
        kid, secret = new_signing_key()
        await self._store.add_signing_key(tenant_id, kid, secret, retire_others_at=None)
        await self._directory.announce()
        return record, key

    async def update(
        self,
        tenant_id: str,
        *,
        name: str | None,
        quotas: dict[str, int | None] | None,
        settings: dict[str, Any] | None,
    ) -> TenantRecord:
        """Change a tenant: `quotas` and `settings` are merged into what it has (a `None`
        value removes an entry: the quota falls back to its default).

        Raises:
            UnknownTenantError: no such tenant.
        """
        current = await self._store.get_tenant(tenant_id)
        merged_quotas = (
            None if quotas is None or current is None else _merge(current.quotas, quotas)
        )
        merged_settings = (
            None if settings is None or current is None else _merge(current.settings, settings)
        )
        record = await self._store.update_tenant(
            tenant_id, name=name, quotas=merged_quotas, settings=merged_settings
        )
        await self._directory.announce()
        return record

    async def delete(self, tenant_id: str) -> Removed:
        """Delete a tenant and everything of it: its rows (one transaction), then its
        conversations' event logs and its quota counters.

        Raises:
            UnknownTenantError: no such tenant.
        """
        removal = await self._store.delete_tenant(tenant_id)
        # Gateways drop the tenant's credentials (and close its sockets) before Redis is swept.
        await self._directory.announce()
        logs = await self._remove_logs(removal.conversations)
        await self._counters.forget(tenant_id)
        return Removed(
            conversations=len(removal.conversations),
            messages=removal.messages,
            branches=removal.branches,
            turns=removal.turns,
            api_keys=removal.api_keys,
            event_logs=logs,
        )

    async def _remove_logs(self, keys: list[ConversationKey]) -> int:
        """Delete the Redis keys of conversations; returns how many event logs went. The
        lease goes first, so an owner still holding one of them stops writing to it."""
        removed = 0
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [
                ConversationKeys(self._prefix, conversation_tag(k.tenant, k.agent, k.name))
                for k in keys[start : start + _DELETE_BATCH]
            ]
            pipe = self._redis.pipeline(transaction=False)
            for conversation in batch:
                pipe.delete(conversation.lease)
            for conversation in batch:
                pipe.delete(conversation.log)
            for conversation in batch:
                pipe.delete(conversation.state, conversation.epoch)
            results = await pipe.execute()
            removed += sum(int(r) for r in results[len(batch) : 2 * len(batch)])
        return removed

    async def add_key(self, tenant_id: str, label: str | None) -> tuple[NewApiKey, ApiKeyRecord]:
        """Another API key of the tenant (for rotation).

        Raises:
            UnknownTenantError: no such tenant.
        """
        key = new_api_key()
        record = await self._store.add_api_key(tenant_id, key.key_id, key.secret_hash, label=label)
        await self._directory.announce()
        return key, record

    async def revoke_key(self, tenant_id: str, key_id: str) -> ApiKeyRecord | None:
        """Revoke an API key of the tenant, and the tokens minted with it; None if unknown."""
        record = await self._store.revoke_api_key(tenant_id, key_id)
        if record is not None:
            await self._directory.announce()
        return record

    async def rotate_signing_key(
        self, tenant_id: str, overlap: float | None = None
    ) -> SigningKeyRecord:
        """A new signing key for the tenant's tokens; the old ones keep verifying the tokens
        they signed for `overlap` seconds (default: the longest token lifetime).

        Raises:
            UnknownTenantError: no such tenant.
        """
        kid, secret = new_signing_key()
        retire = datetime.now(UTC) + timedelta(
            seconds=self._overlap if overlap is None else overlap
        )
        record = await self._store.add_signing_key(tenant_id, kid, secret, retire_others_at=retire)
        await self._directory.announce()
        return record

    async def remove_signing_key(self, tenant_id: str, kid: str) -> bool:
        """Delete a signing key now: the tokens it signed stop working."""
        removed = await self._store.remove_signing_key(tenant_id, kid)
        if removed:
            await self._directory.announce()
        return removed

    async def signing_key(self, tenant_id: str) -> SigningKeyRecord:
        """The key that signs the tenant's new tokens, made if it has none yet (a tenant made
        before tokens existed, such as `default`).

        Raises:
            UnknownTenantError: no such tenant.
        """
        found = self._directory.signing_key(tenant_id)
        if found is not None:
            return found
        kid, secret = new_signing_key()
        record = await self._store.add_signing_key(tenant_id, kid, secret, retire_others_at=None)
        await self._directory.announce()
        return record


def _merge(current: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    merged = dict(current)
    for name, value in change.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged
