"""Fencing (docs/architecture.md#ownership): claims raise the epoch, and writers with an older
epoch apply nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from durachat_infra.store import (
    MAIN_BRANCH,
    Conversation,
    ConversationKey,
    FencedError,
    StoredMessage,
    StoreError,
    TurnRecord,
)
from durachat_infra.store.port import StorePort, TransactionPort
from support.store_backends import ConversationColumns, SQLBackend, StoreBackend
from support.waiting import eventually

KEY = ConversationKey("default", "agent", "fenced")


def msg(message_id: str, role: str = "user") -> dict[str, Any]:
    return {"id": message_id, "role": role, "parts": []}


@pytest.fixture
async def conv(store: StorePort) -> Conversation:
    return await store.get_or_create_conversation(KEY)


State = tuple[ConversationColumns, list[StoredMessage], list[StoredMessage], TurnRecord | None]


async def stored_state(store: StorePort, backend: StoreBackend, conv: Conversation) -> State:
    """Everything a transaction can change, to compare before and after."""
    return (
        await backend.conversation_columns(conv.id),
        await store.load_path(conv.id),
        await store.load_path(conv.id, "other"),
        await store.get_turn(conv.id, "r1"),
    )


async def write_everything(tx: TransactionPort) -> None:
    pks = await tx.insert_chain(None, [msg("u1"), msg("a1", "assistant")])
    await tx.set_leaf(MAIN_BRANCH, pks[-1])
    await tx.set_leaf("other", pks[0])
    await tx.save_request_context({"body": 1}, [{"tool": 1}])
    await tx.begin_turn("r1", kind="submit", owner="shard-a", request={"r": 1})


async def test_claim_raises_the_epoch_and_is_idempotent(
    store: StorePort, conv: Conversation
) -> None:
    await store.claim(conv.id, 3)
    await store.claim(conv.id, 3)

    found = await store.find_conversation(KEY)
    assert found is not None
    assert found.epoch == 3


async def test_claim_with_an_older_epoch_is_fenced(store: StorePort, conv: Conversation) -> None:
    await store.claim(conv.id, 5)

    with pytest.raises(FencedError) as raised:
        await store.claim(conv.id, 4)

    assert (raised.value.conversation_id, raised.value.epoch, raised.value.current_epoch) == (
        conv.id,
        4,
        5,
    )
    found = await store.find_conversation(KEY)
    assert found is not None
    assert found.epoch == 5


async def test_a_fresh_claim_needs_an_epoch_newer_than_the_stored_one(
    store: StorePort, conv: Conversation
) -> None:
    await store.claim(conv.id, 3, fresh=True)

    with pytest.raises(FencedError):
        await store.claim(conv.id, 3, fresh=True)
    await store.claim(conv.id, 3)  # the same tenure claiming again
    await store.claim(conv.id, 4, fresh=True)

    found = await store.find_conversation(KEY)
    assert found is not None and found.epoch == 4


async def test_a_conversation_created_at_an_epoch_is_claimed_for_its_creator(
    store: StorePort,
) -> None:
    key = ConversationKey("default", "agent", "created-claimed")
    created = await store.get_or_create_conversation(key, epoch=7)
    assert created.created and created.epoch == 7
    # Nothing more to claim: the creator writes under its epoch at once, an older one is fenced.
    async with store.transaction(created.id, 7) as tx:
        await tx.begin_turn("r1", kind="submit", owner="s", request=None)
    with pytest.raises(FencedError):
        async with store.transaction(created.id, 6) as tx:
            await tx.begin_turn("r2", kind="submit", owner="s", request=None)
    with pytest.raises(FencedError):
        await store.claim(created.id, 7, fresh=True)
    # A conversation that exists keeps its epoch whatever a later caller passes.
    again = await store.get_or_create_conversation(key, epoch=9)
    assert not again.created and again.epoch == 7
    with pytest.raises(ValueError):
        await store.get_or_create_conversation(ConversationKey("default", "a", "x"), epoch=-1)


async def test_reads_see_only_committed_writes(store: StorePort, conv: Conversation) -> None:
    await store.claim(conv.id, 1)

    async with store.transaction(conv.id, 1) as tx:
        [pk] = await tx.insert_chain(None, [msg("u1")])
        await tx.set_leaf(MAIN_BRANCH, pk)
        await tx.begin_turn("r1", kind="submit", owner="s", request=None)
        assert await store.load_path(conv.id) == []
        assert await store.get_turn(conv.id, "r1") is None

    assert [m.message_id for m in await store.load_path(conv.id)] == ["u1"]
    assert await store.get_turn(conv.id, "r1") is not None


async def test_claim_of_a_missing_conversation_fails(store: StorePort) -> None:
    with pytest.raises(StoreError, match="does not exist") as raised:
        await store.claim(424242, 1)
    assert not isinstance(raised.value, FencedError)


async def test_transaction_with_an_old_epoch_applies_nothing(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    await store.claim(conv.id, 1)
    await store.claim(conv.id, 2)
    before = await stored_state(store, backend, conv)
    body_ran = False

    with pytest.raises(FencedError) as raised:
        async with store.transaction(conv.id, 1) as tx:
            body_ran = True
            await write_everything(tx)

    assert raised.value.current_epoch == 2
    assert not body_ran
    assert await stored_state(store, backend, conv) == before


async def test_transaction_with_a_newer_epoch_than_claimed_is_fenced(
    store: StorePort, conv: Conversation
) -> None:
    await store.claim(conv.id, 1)

    with pytest.raises(FencedError):
        async with store.transaction(conv.id, 2):
            pass


async def test_an_exception_rolls_back_every_operation(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    await store.claim(conv.id, 1)
    before = await stored_state(store, backend, conv)

    with pytest.raises(RuntimeError, match="crash"):
        async with store.transaction(conv.id, 1) as tx:
            await write_everything(tx)
            raise RuntimeError("crash mid-turn")

    assert await stored_state(store, backend, conv) == before
    async with store.transaction(conv.id, 1) as tx:
        await write_everything(tx)
    after = await stored_state(store, backend, conv)
    assert [m.message_id for m in after[1]] == ["u1", "a1"]
    assert after[1][0].seq == 0  # the rolled-back transaction consumed no sequence numbers


async def test_a_failed_operation_spoils_the_transaction_even_if_caught(
    store: StorePort, backend: StoreBackend, conv: Conversation
) -> None:
    await store.claim(conv.id, 1)
    before = await stored_state(store, backend, conv)

    with pytest.raises(StoreError, match="rolled back"):
        async with store.transaction(conv.id, 1) as tx:
            await write_everything(tx)
            with pytest.raises(StoreError):
                await tx.update_message(999_999, msg("ghost"))
            with pytest.raises(StoreError, match="earlier operation failed"):
                await tx.save_request_context(None, None)

    assert await stored_state(store, backend, conv) == before


async def test_the_transaction_is_unusable_after_the_block(
    store: StorePort, conv: Conversation
) -> None:
    await store.claim(conv.id, 1)
    async with store.transaction(conv.id, 1) as tx:
        pass

    with pytest.raises(StoreError, match="over"):
        await tx.insert_chain(None, [msg("late")])


async def test_transaction_on_a_missing_conversation_fails(store: StorePort) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        async with store.transaction(424242, 0):
            pass


async def test_a_claim_waits_for_the_old_owners_open_transaction(backend: StoreBackend) -> None:
    old_owner, new_owner = backend.open(), backend.open()
    conv = await old_owner.get_or_create_conversation(KEY)
    await old_owner.claim(conv.id, 1)

    async with old_owner.transaction(conv.id, 1) as tx:
        # Entering the transaction alone must hold the claim off.
        claim = asyncio.create_task(new_owner.claim(conv.id, 2))
        if isinstance(backend, SQLBackend) and backend.name == "postgres":
            await wait_until_blocked_on_a_lock(backend.url)
        else:
            # SQLite and memory: the claim waits for the write lock; give it every chance to
            # (wrongly) finish while this transaction keeps working.
            for _ in range(20):
                await tx.save_request_context({"n": 1}, None)
                await asyncio.sleep(0)  # let the claim's task run
        assert not claim.done()
        [pk] = await tx.insert_chain(None, [msg("u1")])
        await tx.set_leaf(MAIN_BRANCH, pk)
        assert not claim.done()
    await claim

    # The old owner's transaction committed before the claim took effect...
    assert [m.message_id for m in await new_owner.load_path(conv.id)] == ["u1"]
    # ...and nothing it does afterwards lands.
    with pytest.raises(FencedError):
        async with old_owner.transaction(conv.id, 1) as tx:
            await tx.insert_chain(pk, [msg("zombie")])
    assert [m.message_id for m in await new_owner.load_path(conv.id)] == ["u1"]


async def wait_until_blocked_on_a_lock(url: str) -> None:
    """Wait until a session of this database waits for a (row) lock."""
    conn = await asyncpg.connect(url)
    try:
        await eventually(
            lambda: conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    finally:
        await conn.close()
