"""Stored JSON too deep to read safely: every read hands out what can be kept of it, the rest of
the conversation loads, forks load, and the repair quarantines and rewrites such rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from durachat import limits
from durachat_infra.admin import repair
from durachat_infra.store import MAIN_BRANCH, Conversation, ConversationKey, Store
from durachat_infra.store.port import StorePort
from support.store_backends import StoreBackend

EPOCH = 1
POISON_DEPTH = 960
"""As deep as the JSON a client could get stored before the shard bounded it."""


def msg(message_id: str, role: str = "user") -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": message_id}]}


def poisoned_body(message_id: str) -> str:
    """A user message whose text part carries `providerMetadata` nested 960 levels deep, as
    stored before the bound (built as text: encoding it here could hit the recursion limit)."""
    deep = '{"a":' * POISON_DEPTH + "1" + "}" * POISON_DEPTH
    return (
        f'{{"id":"{message_id}","role":"user","parts":[{{"type":"text","text":"{message_id}",'
        f'"providerMetadata":{deep}}}]}}'
    )


@pytest.fixture
async def poisoned(store: StorePort, backend: StoreBackend) -> Conversation:
    """A conversation `u1 a1 u2` whose `u1` is poisoned."""
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "poison"))
    await store.claim(conv.id, EPOCH)
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant"), msg("u2")])
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
    await backend.plant_body(pks[0], poisoned_body("u1"))
    return conv


def assert_kept(message: dict[str, Any]) -> None:
    """What a quarantined `u1` is handed out as: its id, role and text, within the bound."""
    assert message["id"] == "u1" and message["role"] == "user"
    assert message["parts"][0]["text"] == "u1"
    assert limits.json_depth(message) <= limits.MAX_MESSAGE_DEPTH
    json.dumps(message)  # and it can be encoded again


async def test_a_poisoned_message_is_quarantined_and_the_rest_loads(
    store: StorePort, poisoned: Conversation
) -> None:
    path = await store.load_path(poisoned.id)
    assert [m.message_id for m in path] == ["u1", "a1", "u2"]
    assert path[0].quarantined is not None and "too deeply nested" in path[0].quarantined
    assert [m.quarantined for m in path[1:]] == [None, None]
    assert_kept(path[0].message)
    assert path[1].message == msg("a1", "assistant")
    transcript = await store.transcript(poisoned.key)
    assert transcript == [m.message for m in path]
    branch = await store.branch_path(poisoned.id, MAIN_BRANCH)
    assert branch is not None and [m.quarantined is not None for m in branch] == [1, 0, 0]


async def test_a_fork_of_a_poisoned_conversation_loads(
    store: StorePort, poisoned: Conversation
) -> None:
    target = ConversationKey("default", "agent", "poison-fork")
    fork = await store.fork_conversation(poisoned.key, MAIN_BRANCH, target)
    path = await store.load_path(fork.id)
    assert [m.message_id for m in path] == ["u1", "a1", "u2"]
    assert path[0].quarantined is not None
    assert_kept(path[0].message)


async def test_the_repair_quarantines_and_rewrites_poisoned_rows(
    database_url: str, open_store: Callable[[str], Store]
) -> None:
    store = open_store(database_url)
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "repair"))
    await store.claim(conv.id, EPOCH)
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant")])
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
    original = poisoned_body("u1")
    async with store.engine.begin() as conn:
        await conn.execute(
            text("UPDATE messages SET body = :body WHERE id = :pk"),
            {"body": original, "pk": pks[0]},
        )
        await conn.execute(
            text("UPDATE conversations SET last_body = :body WHERE id = :id"),
            {"body": '{"x":' + "[" * 500 + "]" * 500 + "}", "id": conv.id},
        )

    repaired = await repair(store)

    assert {(r.table, r.column, r.row_id) for r in repaired} == {
        ("messages", "body", pks[0]),
        ("conversations", "last_body", conv.id),
    }
    path = await store.load_path(conv.id)
    assert [m.quarantined for m in path] == [None, None]
    assert_kept(path[0].message)
    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT table_name, row_id, conversation_id, original FROM quarantined_rows")
            )
        ).all()
    kept = {(r.table_name, r.row_id): r for r in rows}
    assert kept[("messages", pks[0])].original == original
    assert kept[("messages", pks[0])].conversation_id == conv.id
    # Nothing left to repair.
    assert await repair(store) == []
