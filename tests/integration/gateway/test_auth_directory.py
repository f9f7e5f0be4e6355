"""The credentials directory of two gateways on one store and one Redis: what the admin
operations change on one gateway reaches the other within the refresh interval."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from redis.asyncio import Redis

from durachat_gateway.auth.directory import AuthDirectory, AuthError
from durachat_gateway.auth.principal import Principal
from durachat_gateway.auth.tokens import SCOPES, mint
from durachat_gateway.tenant_admin import TenantAdmin
from durachat_infra.keys import ClusterKeys
from durachat_infra.quotas import QuotaCounters
from durachat_infra.settings import QuotaDefaults
from durachat_infra.store import ConversationKey
from durachat_infra.store.memory import MemoryStore
from support.waiting import eventually

ADMIN = "the-admin-key"


@dataclass
class Gateway:
    directory: AuthDirectory
    admin: TenantAdmin
    store: MemoryStore


@pytest.fixture
async def gateways(redis: Redis, key_prefix: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    store = MemoryStore()
    made = []
    for _ in range(2):
        directory = AuthDirectory(
            store,
            redis,
            ClusterKeys(key_prefix),
            admin_key=ADMIN,
            defaults=QuotaDefaults(connections=9),
            refresh=0.05,
        )
        await directory.start()
        counters = QuotaCounters(redis, key_prefix)
        admin = TenantAdmin(
            store, redis, directory, counters, key_prefix=key_prefix, signing_overlap=3600
        )
        made.append(Gateway(directory, admin, store))
    yield made[0], made[1]
    for gateway in made:
        await gateway.directory.stop()


def refused(directory: AuthDirectory, credential: str | None) -> str:
    with pytest.raises(AuthError) as raised:
        directory.authenticate(credential)
    return raised.value.code


async def token_for(gateway: Gateway, tenant: str, api_key: str | None) -> str:
    signing = await gateway.admin.signing_key(tenant)
    minted, _ = mint(
        kid=signing.id,
        secret=signing.secret,
        tenant=tenant,
        agent="chat-agent",
        name="c1",
        prefix=None,
        scopes=SCOPES,
        subject=None,
        api_key=api_key,
        ttl=60,
    )
    return minted


async def test_the_admin_key_and_missing_or_unknown_credentials(
    gateways: tuple[Gateway, Gateway],
) -> None:
    a, _ = gateways

    assert a.directory.authenticate(ADMIN).kind == "admin"
    assert refused(a.directory, None) == "missing_credentials"
    assert refused(a.directory, "nonsense") == "invalid_credentials"
    assert refused(a.directory, "dck_0123456789abcdef_secret") == "invalid_credentials"


async def test_a_new_tenants_key_works_on_the_other_gateway(
    gateways: tuple[Gateway, Gateway],
) -> None:
    a, b = gateways
    record, key = await a.admin.create("acme", name=None, quotas={"connections": 2}, settings={})

    assert a.directory.authenticate(key.key).tenant == "acme"
    principal = await eventually(lambda: _accepts(b.directory, key.key))
    assert principal.kind == "key" and principal.key_id == key.key_id
    assert b.directory.quotas("acme").connections == 2
    assert b.directory.quotas("acme").turns_per_minute == QuotaDefaults().turns_per_minute
    assert record.id == "acme"


async def _accepts(directory: AuthDirectory, credential: str) -> Principal | None:
    try:
        return directory.authenticate(credential)
    except AuthError:
        return None


async def test_revoking_a_key_reaches_every_gateway_with_its_tokens(
    gateways: tuple[Gateway, Gateway],
) -> None:
    a, b = gateways
    _, key = await a.admin.create("acme", name=None, quotas={}, settings={})
    spare, _ = await a.admin.add_key("acme", "spare")
    token = await token_for(a, "acme", key.key_id)
    await eventually(lambda: _accepts(b.directory, token))
    held = b.directory.authenticate(token)
    closed: list[bool] = []
    b.directory.on_reload.append(lambda: closed.append(not b.directory.still_valid(held)))

    await a.admin.revoke_key("acme", key.key_id)

    await eventually(lambda: _refused_async(b.directory, key.key), timeout=1.0)
    assert refused(b.directory, token) == "revoked_token"
    assert not b.directory.still_valid(held)
    assert closed[-1] is True
    assert b.directory.authenticate(spare.key).tenant == "acme"


async def _refused_async(directory: AuthDirectory, credential: str) -> bool:
    return await _accepts(directory, credential) is None


async def test_rotating_the_signing_key_keeps_old_tokens_for_the_overlap(
    gateways: tuple[Gateway, Gateway],
) -> None:
    a, b = gateways
    await a.admin.create("acme", name=None, quotas={}, settings={})
    old = await token_for(a, "acme", None)
    first = a.directory.signing_key("acme")

    await a.admin.rotate_signing_key("acme")
    assert a.directory.signing_key("acme") != first
    new = await token_for(a, "acme", None)
    await eventually(lambda: _accepts(b.directory, new))
    assert b.directory.authenticate(old).tenant == "acme"

    await a.admin.rotate_signing_key("acme", overlap=0)
    assert refused(a.directory, old) == "revoked_token"
    assert refused(a.directory, new) == "revoked_token"
    newest = await token_for(a, "acme", None)
    assert a.directory.authenticate(newest).kind == "token"
    current = a.directory.signing_key("acme")
    assert current is not None
    await a.admin.remove_signing_key("acme", current.id)
    assert refused(a.directory, newest) == "invalid_token"


async def test_a_token_of_one_tenant_cannot_claim_another(
    gateways: tuple[Gateway, Gateway],
) -> None:
    a, _ = gateways
    await a.admin.create("acme", name=None, quotas={}, settings={})
    await a.admin.create("other", name=None, quotas={}, settings={})
    signing = await a.admin.signing_key("acme")
    forged, _ = mint(
        kid=signing.id,
        secret=signing.secret,
        tenant="other",
        agent="chat-agent",
        name="c1",
        prefix=None,
        scopes=SCOPES,
        subject=None,
        api_key=None,
        ttl=60,
    )

    assert refused(a.directory, forged) == "invalid_token"


async def test_deleting_a_tenant_drops_its_credentials_rows_and_counters(
    gateways: tuple[Gateway, Gateway], redis: Redis, key_prefix: str
) -> None:
    a, b = gateways
    _, key = await a.admin.create("acme", name=None, quotas={}, settings={})
    await eventually(lambda: _accepts(b.directory, key.key))
    await a.store.get_or_create_conversation(ConversationKey("acme", "chat-agent", "c1"))
    counters = QuotaCounters(redis, key_prefix)
    await counters.open_connection("acme", "gw:1", 0)

    removed = await a.admin.delete("acme")

    assert (removed.conversations, removed.api_keys) == (1, 1)
    await eventually(lambda: _refused_async(b.directory, key.key), timeout=1.0)
    assert b.directory.tenant("acme") is None
    assert [k async for k in redis.scan_iter(match=f"{key_prefix}:{{tenant:acme}}:*")] == []
