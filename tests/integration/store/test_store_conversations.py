"""Conversations: get-or-create (also racing), the main branch, lookups, tenants."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import func, select

from durachat_infra.store import (
    MAIN_BRANCH,
    ConversationKey,
    Store,
    UnknownTenantError,
)
from durachat_infra.store.models import Branch
from durachat_infra.store.models import Conversation as ConversationRow

KEY = ConversationKey("default", "support-agent", "c-1")


async def branch_names(store: Store, conversation_id: int) -> list[str]:
    async with store.engine.connect() as conn:
        names = await conn.scalars(
            select(Branch.name).where(Branch.conversation_id == conversation_id)
        )
        return sorted(names)


async def test_get_or_create_creates_once_with_a_main_branch(store: Store) -> None:
    assert await store.find_conversation(KEY) is None

    created = await store.get_or_create_conversation(KEY)
    again = await store.get_or_create_conversation(KEY)

    assert created.key == KEY
    assert created.epoch == 0
    assert again == created
    assert await store.find_conversation(KEY) == created
    assert await branch_names(store, created.id) == [MAIN_BRANCH]
    assert await store.load_path(created.id) == []


async def test_conversations_are_distinct_per_tenant_agent_and_name(store: Store) -> None:
    keys = [
        KEY,
        ConversationKey("default", "other-agent", "c-1"),
        ConversationKey("default", "support-agent", "c-2"),
    ]

    ids = {(await store.get_or_create_conversation(key)).id for key in keys}

    assert len(ids) == 3


async def test_racing_creators_get_the_same_conversation(
    database_url: str, open_store: Callable[[str], Store]
) -> None:
    # Separate stores have separate pools, like separate shard processes.
    stores = [open_store(database_url) for _ in range(4)]
    # Open every connection first, so the creators really run side by side.
    await asyncio.gather(*(store.find_conversation(KEY) for store in stores for _ in range(3)))

    results = await asyncio.gather(
        *(store.get_or_create_conversation(KEY) for store in stores for _ in range(3))
    )

    assert len({conv.id for conv in results}) == 1
    async with stores[0].engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(ConversationRow)) == 1
    assert await branch_names(stores[0], results[0].id) == [MAIN_BRANCH]


async def test_unknown_tenant_is_rejected(store: Store) -> None:
    key = ConversationKey("no-such-tenant", "agent", "c")

    with pytest.raises(UnknownTenantError) as raised:
        await store.get_or_create_conversation(key)

    assert raised.value.tenant == "no-such-tenant"
    assert await store.find_conversation(key) is None


@pytest.mark.parametrize(
    ("tenant", "agent", "name"),
    [("", "a", "n"), ("t", "", "n"), ("t", "a", ""), ("t", "a", "n" * 513)],
)
def test_conversation_key_parts_must_be_non_empty_and_bounded(
    tenant: str, agent: str, name: str
) -> None:
    with pytest.raises(ValueError, match=r"1\.\.512"):
        ConversationKey(tenant, agent, name)
