"""Tenants and their credentials: create, read, update, delete (with everything of the tenant),
API keys, signing keys, the credentials snapshot; and isolation: every store method used with
one tenant's keys finds nothing of another's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durachat_infra.store import (
    MAIN_BRANCH,
    ConversationKey,
    StoreError,
    TenantExistsError,
    UnknownConversationError,
    UnknownTenantError,
    check_tenant_id,
)
from durachat_infra.store._types import utcnow
from durachat_infra.store.port import StorePort
from support.store_backends import StoreBackend

EPOCH = 1


def msg(message_id: str, role: str = "user", text: str | None = None) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text or message_id}]}


async def seed(store: StorePort, key: ConversationKey, *texts: str) -> int:
    """A conversation with one message per text on main, a turn and a second branch."""
    conv = await store.get_or_create_conversation(key)
    await store.claim(conv.id, EPOCH)
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(
            None, [msg(f"{key.tenant}-{i}", text=t) for i, t in enumerate(texts)]
        )
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
        await tx.begin_turn(f"req-{key.tenant}", kind="submit", owner="s1", request=None)
        await tx.create_branch("side")
        await tx.save_incident("i1", request_id="r", status="open", attempt=1, data={})
    return conv.id


@pytest.mark.parametrize("tenant_id", ["acme", "a", "a-1", "0", "x" * 63, "9lives"])
def test_valid_tenant_ids(tenant_id: str) -> None:
    check_tenant_id(tenant_id)


@pytest.mark.parametrize(
    "tenant_id", ["", "Acme", "a_b", "-a", "a.b", "a b", "x" * 64, "é", "a/b", "a\n"]
)
async def test_invalid_tenant_ids_are_refused(store: StorePort, tenant_id: str) -> None:
    with pytest.raises(ValueError, match="tenant id"):
        await store.create_tenant(tenant_id)
    assert [t.id for t in await store.list_tenants()] == ["default"]


async def test_create_get_list_update_a_tenant(store: StorePort) -> None:
    created = await store.create_tenant("acme", quotas={"connections": 5}, settings={"x": [1]})

    assert created.id == "acme"
    assert created.name == "acme"
    assert created.quotas == {"connections": 5}
    assert created.settings == {"x": [1]}
    assert await store.get_tenant("acme") == created
    assert await store.get_tenant("nobody") is None
    assert [t.id for t in await store.list_tenants()] == ["acme", "default"]

    changed = await store.update_tenant("acme", quotas={"turns_per_minute": 2})
    assert changed.quotas == {"turns_per_minute": 2}
    assert changed.settings == {"x": [1]}
    cleared = await store.update_tenant("acme", settings={}, name="Acme Inc")
    assert (cleared.settings, cleared.name, cleared.quotas) == ({}, "Acme Inc", changed.quotas)
    assert await store.get_tenant("acme") == cleared


async def test_a_tenant_is_created_once(store: StorePort) -> None:
    await store.create_tenant("acme")

    with pytest.raises(TenantExistsError):
        await store.create_tenant("acme", quotas={"connections": 1})
    with pytest.raises(TenantExistsError):
        await store.create_tenant("default")
    record = await store.get_tenant("acme")
    assert record is not None and record.quotas == {}


async def test_unknown_tenants_are_refused(store: StorePort) -> None:
    with pytest.raises(UnknownTenantError):
        await store.update_tenant("nobody", quotas={})
    with pytest.raises(UnknownTenantError):
        await store.delete_tenant("nobody")
    with pytest.raises(UnknownTenantError):
        await store.add_api_key("nobody", "k1", "hash")
    with pytest.raises(UnknownTenantError):
        await store.add_signing_key("nobody", "s1", "secret", retire_others_at=None)
    assert await store.count_conversations("nobody") == 0


async def test_a_new_tenant_gets_conversations_of_its_own(store: StorePort) -> None:
    await store.create_tenant("acme")

    conv = await store.get_or_create_conversation(ConversationKey("acme", "agent", "c"))

    assert conv.key.tenant == "acme"
    assert await store.count_conversations("acme") == 1
    assert await store.count_conversations("default") == 0


async def test_delete_tenant_removes_everything_of_it_and_nothing_else(
    store: StorePort, backend: StoreBackend
) -> None:
    await store.create_tenant("acme")
    await store.create_tenant("other")
    await store.add_api_key("acme", "ka", "ha")
    await store.add_api_key("other", "ko", "ho")
    await store.add_signing_key("acme", "sa", "secret-a", retire_others_at=None)
    await store.add_signing_key("other", "so", "secret-o", retire_others_at=None)
    gone = [ConversationKey("acme", "agent", "c1"), ConversationKey("acme", "agent2", "c2")]
    for key in gone:
        await seed(store, key, "one", "two")
    kept = await seed(store, ConversationKey("other", "agent", "c1"), "kept")

    removal = await store.delete_tenant("acme")

    assert removal.conversations == gone
    assert (removal.messages, removal.branches, removal.turns, removal.api_keys) == (4, 4, 2, 1)
    assert await store.get_tenant("acme") is None
    for key in gone:
        assert await store.find_conversation(key) is None
        assert await store.transcript(key) == []
    assert await store.list_api_keys("acme") == []
    assert await store.list_signing_keys("acme") == []
    assert await backend.conversation_count() == 1
    assert [m["id"] for m in await store.transcript(ConversationKey("other", "agent", "c1"))] == [
        "other-0"
    ]
    assert len(await store.list_branches(kept)) == 2
    assert [k.id for k in await store.list_api_keys("other")] == ["ko"]
    assert [k.id for k in await store.list_signing_keys("other")] == ["so"]
    with pytest.raises(UnknownTenantError):
        await store.get_or_create_conversation(gone[0])


async def test_a_deleted_tenant_can_be_created_again_empty(store: StorePort) -> None:
    await store.create_tenant("acme")
    key = ConversationKey("acme", "agent", "c")
    await seed(store, key, "hello")
    await store.delete_tenant("acme")

    await store.create_tenant("acme")

    assert await store.transcript(key) == []
    assert await store.count_conversations("acme") == 0


async def test_api_keys_are_listed_revoked_and_kept_per_tenant(store: StorePort) -> None:
    await store.create_tenant("acme")
    await store.create_tenant("other")
    first = await store.add_api_key("acme", "k1", "h1", label="backend")
    await store.add_api_key("acme", "k2", "h2")
    await store.add_api_key("other", "k3", "h3")

    assert (first.id, first.tenant, first.secret_hash, first.label) == (
        "k1",
        "acme",
        "h1",
        "backend",
    )
    assert first.revoked_at is None
    assert [k.id for k in await store.list_api_keys("acme")] == ["k1", "k2"]
    with pytest.raises(StoreError):
        await store.add_api_key("other", "k1", "h")

    assert await store.revoke_api_key("acme", "k3") is None
    revoked = await store.revoke_api_key("acme", "k1")
    assert revoked is not None and revoked.revoked_at is not None
    again = await store.revoke_api_key("acme", "k1")
    assert again == revoked
    assert await store.revoke_api_key("acme", "nope") is None

    by_id = {k.id: k for k in await store.list_api_keys("acme")}
    assert by_id["k1"].revoked_at is not None and by_id["k2"].revoked_at is None
    other = await store.list_api_keys("other")
    assert [(k.id, k.revoked_at) for k in other] == [("k3", None)]
    credentials = await store.load_credentials()
    assert sorted(k.id for k in credentials.api_keys) == ["k2", "k3"]


async def test_signing_keys_rotate_with_an_overlap(store: StorePort) -> None:
    await store.create_tenant("acme")
    await store.create_tenant("other")
    first = await store.add_signing_key("acme", "s1", "secret-1", retire_others_at=None)
    await store.add_signing_key("other", "s9", "secret-9", retire_others_at=None)
    assert first.retires_at is None and first.secret == "secret-1"

    soon = utcnow() + timedelta(minutes=10)
    second = await store.add_signing_key("acme", "s2", "secret-2", retire_others_at=soon)
    later = soon + timedelta(minutes=10)
    third = await store.add_signing_key("acme", "s3", "secret-3", retire_others_at=later)

    keys = {k.id: k for k in await store.list_signing_keys("acme")}
    assert list(keys) == ["s1", "s2", "s3"]
    # s1 keeps its earlier retirement; s2 gets the later one; the newest does not retire.
    assert keys["s1"].retires_at == soon
    assert keys["s2"].retires_at == later
    assert keys["s3"].retires_at is None
    assert second.retires_at is None and third.retires_at is None
    assert [k.retires_at for k in await store.list_signing_keys("other")] == [None]

    with pytest.raises(StoreError):
        await store.add_signing_key("other", "s1", "x", retire_others_at=None)
    assert await store.remove_signing_key("other", "s1") is False
    assert await store.remove_signing_key("acme", "s1") is True
    assert await store.remove_signing_key("acme", "s1") is False
    credentials = await store.load_credentials()
    assert sorted(k.id for k in credentials.signing_keys) == ["s2", "s3", "s9"]
    assert [t.id for t in credentials.tenants] == ["acme", "default", "other"]


async def test_one_tenants_keys_find_nothing_of_another(store: StorePort) -> None:
    """The same conversation names in two tenants are two conversations, and every store
    method used with tenant A's keys reads and changes only A's."""
    await store.create_tenant("tenant-a")
    await store.create_tenant("tenant-b")
    b_key = ConversationKey("tenant-b", "agent", "shared")
    b_id = await seed(store, b_key, "secret of b")
    await store.add_api_key("tenant-b", "kb", "hb")
    await store.add_signing_key("tenant-b", "sb", "secret-b", retire_others_at=None)
    a_key = ConversationKey("tenant-a", "agent", "shared")

    assert await store.find_conversation(a_key) is None
    assert await store.transcript(a_key) == []
    assert await store.transcript(a_key, "side") == []
    with pytest.raises(UnknownConversationError):
        await store.fork_conversation(a_key, MAIN_BRANCH, ConversationKey("tenant-a", "agent", "x"))
    assert await store.count_conversations("tenant-a") == 0
    assert await store.list_api_keys("tenant-a") == []
    assert await store.list_signing_keys("tenant-a") == []
    assert await store.revoke_api_key("tenant-a", "kb") is None
    assert await store.remove_signing_key("tenant-a", "sb") is False

    a_conv = await store.get_or_create_conversation(a_key)
    assert a_conv.id != b_id
    assert await store.load_path(a_conv.id) == []
    assert await store.transcript(a_key) == []
    assert [b.name for b in await store.list_branches(a_conv.id)] == [MAIN_BRANCH]
    assert await store.get_branch(a_conv.id, "side") is None
    assert await store.branch_path(a_conv.id, "side") is None
    assert await store.siblings(a_conv.id, "tenant-b-0") is None
    assert await store.recent_request_ids(a_conv.id) == []
    assert await store.get_turn(a_conv.id, "req-tenant-b") is None
    assert await store.open_turns(a_conv.id) == []
    assert await store.load_request_context(a_conv.id) == (None, None)
    assert await store.get_incident(a_conv.id, "i1") is None
    assert await store.count_conversations("tenant-a") == 1
    # A's writes cannot reach B's rows either.
    b_pk = (await store.load_path(b_id))[0].pk
    b_side = await store.get_branch(b_id, "side")
    assert b_side is not None
    await store.claim(a_conv.id, EPOCH)
    with pytest.raises(StoreError):
        async with store.transaction(a_conv.id, EPOCH) as tx:
            await tx.insert_chain(b_pk, [msg("a-1")])
    with pytest.raises(StoreError):
        async with store.transaction(a_conv.id, EPOCH) as tx:
            await tx.set_leaf(b_side.id, None)
    with pytest.raises(StoreError):
        async with store.transaction(a_conv.id, EPOCH) as tx:
            await tx.delete_branch(b_side.id)
    await store.delete_tenant("tenant-a")

    assert [m["id"] for m in await store.transcript(b_key)] == ["tenant-b-0"]
    assert [b.name for b in await store.list_branches(b_id)] == [MAIN_BRANCH, "side"]
    assert await store.get_incident(b_id, "i1") is not None
    assert [k.id for k in await store.list_api_keys("tenant-b")] == ["kb"]
    assert [k.id for k in await store.list_signing_keys("tenant-b")] == ["sb"]
    assert await store.count_conversations("tenant-b") == 1
