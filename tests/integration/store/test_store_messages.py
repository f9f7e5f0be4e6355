"""The message tree: chains, paths of branches, splices, repeated ids, updates, deletes, clear."""

from __future__ import annotations

from typing import Any

import pytest

from durachat_infra.store import (
    MAIN_BRANCH,
    Conversation,
    ConversationKey,
    StoreError,
)
from durachat_infra.store.port import StorePort
from support.store_backends import StoreBackend

EPOCH = 1


def msg(message_id: str, role: str = "user", text: str | None = None) -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": [{"type": "text", "text": text or message_id}]}


def ids(messages: list[dict[str, Any]]) -> list[str]:
    return [m["id"] for m in messages]


@pytest.fixture
async def conv(store: StorePort) -> Conversation:
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "tree"))
    await store.claim(conv.id, EPOCH)
    return conv


async def path_ids(store: StorePort, conv: Conversation, branch: str = MAIN_BRANCH) -> list[str]:
    return [m.message_id for m in await store.load_path(conv.id, branch)]


async def message_count(backend: StoreBackend, conv: Conversation) -> int:
    return len(await backend.message_ids(conv.id))


async def test_insert_chain_links_messages_and_load_path_returns_them_root_first(
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        first = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant")])
        second = await tx.insert_chain(first[-1], [msg("u2"), msg("a2", "assistant"), msg("u3")])
        await tx.set_leaf(MAIN_BRANCH, second[-1])

    path = await store.load_path(conv.id)

    assert [m.message_id for m in path] == ["u1", "a1", "u2", "a2", "u3"]
    assert [m.pk for m in path] == first + second
    assert [m.parent_pk for m in path] == [None, *(first + second)[:-1]]
    assert [m.seq for m in path] == [0, 1, 2, 3, 4]
    assert path[1].message == msg("a1", "assistant")
    assert await store.transcript(conv.key) == [m.message for m in path]


async def test_seqs_keep_increasing_across_transactions(
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        [root] = await tx.insert_chain(None, [msg("u1")])
    async with store.transaction(conv.id, EPOCH) as tx:
        tail = await tx.insert_chain(root, [msg("a1", "assistant"), msg("u2")])
        await tx.set_leaf(MAIN_BRANCH, tail[-1])

    assert [m.seq for m in await store.load_path(conv.id)] == [0, 1, 2]


async def test_set_leaf_to_an_earlier_message_shortens_the_path_but_keeps_the_tree(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(
            None, [msg("u1"), msg("a1", "assistant"), msg("u2"), msg("a2", "assistant")]
        )
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
        await tx.set_leaf("kept", pks[-1])
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.set_leaf(MAIN_BRANCH, pks[1])

    assert await path_ids(store, conv) == ["u1", "a1"]
    assert await path_ids(store, conv, "kept") == ["u1", "a1", "u2", "a2"]
    assert await message_count(backend, conv) == 4


async def test_set_leaf_to_none_empties_the_branch(store: StorePort, conv: Conversation) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(None, [msg("u1")])
        await tx.set_leaf(MAIN_BRANCH, pks[0])
        await tx.set_leaf(MAIN_BRANCH, None)

    assert await store.load_path(conv.id) == []


async def test_unknown_branch_has_an_empty_path(store: StorePort, conv: Conversation) -> None:
    assert await store.load_path(conv.id, "nope") == []
    assert await store.transcript(conv.key, "nope") == []


async def test_reparent_splices_a_message_into_the_path(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        u1, _, u2 = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant"), msg("u2")])
        await tx.set_leaf(MAIN_BRANCH, u2)
    # Regenerate a1 as a1b and move the rest of the conversation under it.
    async with store.transaction(conv.id, EPOCH) as tx:
        [a1b] = await tx.insert_chain(u1, [msg("a1b", "assistant")])
        await tx.reparent(u2, a1b)

    path = await store.load_path(conv.id)

    assert [m.message_id for m in path] == ["u1", "a1b", "u2"]
    assert [m.parent_pk for m in path] == [None, u1, a1b]
    assert await message_count(backend, conv) == 4  # a1 stays in the tree as a sibling


async def test_reparent_refuses_to_create_a_cycle(store: StorePort, conv: Conversation) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        u1, _, u2 = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant"), msg("u2")])
        await tx.set_leaf(MAIN_BRANCH, u2)

    with pytest.raises(StoreError, match="descendant"):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.reparent(u1, u2)

    assert await path_ids(store, conv) == ["u1", "a1", "u2"]


async def test_a_message_id_may_repeat_on_different_branches(
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        main = await tx.insert_chain(None, [msg("u1", text="hello"), msg("a1", "assistant")])
        await tx.set_leaf(MAIN_BRANCH, main[-1])
    # Editing u1 forks: the edited copy keeps the client's id on a new branch.
    async with store.transaction(conv.id, EPOCH) as tx:
        edit = await tx.insert_chain(
            None, [msg("u1", text="hello, edited"), msg("a1", "assistant", "other")]
        )
        await tx.set_leaf("edit", edit[-1])

    on_main = await store.transcript(conv.key)
    on_edit = await store.transcript(conv.key, "edit")

    assert ids(on_main) == ids(on_edit) == ["u1", "a1"]
    assert on_main[0]["parts"][0]["text"] == "hello"
    assert on_edit[0]["parts"][0]["text"] == "hello, edited"
    assert [m.pk for m in await store.load_path(conv.id, "edit")] == edit


async def test_update_message_replaces_body_and_role(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        [pk] = await tx.insert_chain(None, [msg("m1", "assistant", "partial")])
        await tx.set_leaf(MAIN_BRANCH, pk)
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.update_message(pk, msg("m1", "system", "final"))

    [stored] = await store.load_path(conv.id)
    assert stored.message == msg("m1", "system", "final")
    assert await backend.message_role(pk) == "system"


async def test_delete_messages_empties_branches_that_pointed_at_them(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        u1, a1 = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant")])
        [a1b] = await tx.insert_chain(u1, [msg("a1b", "assistant")])
        await tx.set_leaf(MAIN_BRANCH, a1)
        await tx.set_leaf("alt", a1b)
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.delete_messages([a1, a1b])

    assert await store.load_path(conv.id) == []
    assert await store.load_path(conv.id, "alt") == []
    assert await message_count(backend, conv) == 1


async def test_delete_messages_refuses_to_orphan_a_survivor(
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        u1, _, u2 = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant"), msg("u2")])
        await tx.set_leaf(MAIN_BRANCH, u2)

    with pytest.raises(StoreError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.delete_messages([u1])

    assert await path_ids(store, conv) == ["u1", "a1", "u2"]


async def test_delete_many_messages_across_chunks(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(None, [msg(f"m{i}") for i in range(2500)])
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
    async with store.transaction(conv.id, EPOCH) as tx:
        # Keep the first ten; delete the rest, which arrive in chunks in no helpful order.
        await tx.delete_messages(list(reversed(pks[10:])))
        await tx.set_leaf(MAIN_BRANCH, pks[9])

    assert await path_ids(store, conv) == [f"m{i}" for i in range(10)]
    assert await message_count(backend, conv) == 10


async def test_clear_removes_messages_and_branches_but_keeps_main_and_turns(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        pks = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant")])
        await tx.set_leaf(MAIN_BRANCH, pks[-1])
        await tx.set_leaf("alt", pks[0])
        await tx.save_request_context({"model": "m"}, [{"name": "tool"}])
        await tx.begin_turn("r1", kind="submit", owner="shard-1", request=None)

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.clear()

    assert await store.load_path(conv.id) == []
    assert await message_count(backend, conv) == 0
    assert await backend.branch_leaves(conv.id) == [(MAIN_BRANCH, None)]
    assert await store.load_request_context(conv.id) == (None, None)
    assert await store.get_turn(conv.id, "r1") is not None

    async with store.transaction(conv.id, EPOCH) as tx:
        [pk] = await tx.insert_chain(None, [msg("u9")])
        await tx.set_leaf(MAIN_BRANCH, pk)
    [after] = await store.load_path(conv.id)
    assert after.seq == 2  # sequence numbers are never reused


async def test_writes_cannot_reach_into_another_conversation(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    async with store.transaction(other.id, EPOCH) as tx:
        [foreign] = await tx.insert_chain(None, [msg("x")])

    for operation in ("insert", "leaf", "update", "reparent"):
        with pytest.raises(StoreError, match="not"):
            async with store.transaction(conv.id, EPOCH) as tx:
                if operation == "insert":
                    await tx.insert_chain(foreign, [msg("y")])
                elif operation == "leaf":
                    await tx.set_leaf(MAIN_BRANCH, foreign)
                elif operation == "update":
                    await tx.update_message(foreign, msg("x", text="hijacked"))
                else:
                    await tx.reparent(foreign, None)

    assert await message_count(backend, conv) == 0
    async with store.transaction(other.id, EPOCH) as tx:
        await tx.set_leaf(MAIN_BRANCH, foreign)
    assert await store.transcript(other.key) == [msg("x")]


@pytest.mark.parametrize(
    "bad", [{"role": "user"}, {"id": "m"}, {"id": 3, "role": "user"}, {"id": "", "role": "user"}]
)
async def test_messages_need_an_id_and_a_role(
    store: StorePort, conv: Conversation, bad: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="needs"):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.insert_chain(None, [bad])
