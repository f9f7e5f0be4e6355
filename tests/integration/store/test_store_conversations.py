"""Conversations: get-or-create (also racing), the main branch, lookups, tenants."""

from __future__ import annotations

import asyncio

import pytest

from durachat_infra.store import (
    MAIN_BRANCH,
    ConversationKey,
    UnknownTenantError,
)
from durachat_infra.store.port import StorePort
from support.store_backends import StoreBackend

KEY = ConversationKey("default", "support-agent", "c-1")


async def branch_names(backend: StoreBackend, conversation_id: int) -> list[str]:
    return sorted(name for name, _ in await backend.branch_leaves(conversation_id))


async def test_get_or_create_creates_once_with_a_main_branch(
    store: StorePort, backend: StoreBackend
) -> None:
    assert await store.find_conversation(KEY) is None

    created = await store.get_or_create_conversation(KEY)
    again = await store.get_or_create_conversation(KEY)

    assert created.key == KEY
    assert created.epoch == 0
    # Only the call that created it says so (activation skips its reads then).
    assert created.created
    assert not again.created
    assert (again.id, again.key, again.epoch) == (created.id, created.key, created.epoch)
    assert await store.find_conversation(KEY) == again
    assert await branch_names(backend, created.id) == [MAIN_BRANCH]
    assert await store.load_path(created.id) == []


async def test_conversations_are_distinct_per_tenant_agent_and_name(store: StorePort) -> None:
    keys = [
        KEY,
        ConversationKey("default", "other-agent", "c-1"),
        ConversationKey("default", "support-agent", "c-2"),
    ]

    ids = {(await store.get_or_create_conversation(key)).id for key in keys}

    assert len(ids) == 3


async def test_racing_creators_get_the_same_conversation(backend: StoreBackend) -> None:
    # Separate stores have separate pools, like separate shard processes.
    stores = [backend.open() for _ in range(4)]
    # Open every connection first, so the creators really run side by side.
    await asyncio.gather(*(store.find_conversation(KEY) for store in stores for _ in range(3)))

    results = await asyncio.gather(
        *(store.get_or_create_conversation(KEY) for store in stores for _ in range(3))
    )

    assert len({conv.id for conv in results}) == 1
    assert sum(conv.created for conv in results) == 1
    assert await backend.conversation_count() == 1
    assert await branch_names(backend, results[0].id) == [MAIN_BRANCH]


async def test_unknown_tenant_is_rejected(store: StorePort, backend: StoreBackend) -> None:
    key = ConversationKey("no-such-tenant", "agent", "c")

    with pytest.raises(UnknownTenantError) as raised:
        await store.get_or_create_conversation(key)

    assert raised.value.tenant == "no-such-tenant"
    assert await store.find_conversation(key) is None
    assert await backend.conversation_count() == 0


@pytest.mark.parametrize(
    ("tenant", "agent", "name"),
    [("", "a", "n"), ("t", "", "n"), ("t", "a", ""), ("t", "a", "n" * 513)],
)
def test_conversation_key_parts_must_be_non_empty_and_bounded(
    tenant: str, agent: str, name: str
) -> None:
    with pytest.raises(ValueError, match=r"1\.\.512"):
        ConversationKey(tenant, agent, name)
