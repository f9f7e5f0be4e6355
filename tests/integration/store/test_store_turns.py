"""Turns (idempotent by request id) and the saved request context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durachat_infra.store import Conversation, ConversationKey, Store, StoreError

EPOCH = 1


@pytest.fixture
async def conv(store: Store) -> Conversation:
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "turns"))
    await store.claim(conv.id, EPOCH)
    return conv


async def test_request_context_round_trips(store: Store, conv: Conversation) -> None:
    assert await store.load_request_context(conv.id) == (None, None)
    body = {"messages": [], "model": "m", "nested": {"ünïcode": "✓", "n": [1, 2.5, None, True]}}
    tools = [{"name": "lookup", "parameters": {"type": "object"}}]

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_request_context(body, tools)
    assert await store.load_request_context(conv.id) == (body, tools)

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_request_context({"model": "other"}, None)
    assert await store.load_request_context(conv.id) == ({"model": "other"}, None)


async def test_turns_are_idempotent_by_request_id(store: Store, conv: Conversation) -> None:
    before = datetime.now(UTC)
    async with store.transaction(conv.id, EPOCH) as tx:
        assert await tx.begin_turn("req-1", kind="submit", owner="shard-a", request={"n": 1})
    async with store.transaction(conv.id, EPOCH) as tx:
        assert not await tx.begin_turn(
            "req-1", kind="regenerate", owner="shard-b", request={"n": 2}
        )

    turn = await store.get_turn(conv.id, "req-1")

    assert turn is not None
    assert (turn.request_id, turn.kind, turn.status, turn.owner, turn.epoch, turn.request) == (
        "req-1",
        "submit",
        "accepted",
        "shard-a",
        EPOCH,
        {"n": 1},
    )
    assert (turn.message_id, turn.stash, turn.error, turn.heartbeat_at) == (None, None, None, None)
    assert turn.created_at.tzinfo is not None
    assert before - timedelta(seconds=5) <= turn.created_at <= datetime.now(UTC)
    assert await store.get_turn(conv.id, "req-2") is None


async def test_the_same_request_id_in_another_conversation_is_another_turn(
    store: Store, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    for conversation in (conv, other):
        async with store.transaction(conversation.id, EPOCH) as tx:
            assert await tx.begin_turn("req-1", kind="submit", owner="s", request=None)


async def test_update_turn_changes_only_what_is_given(store: Store, conv: Conversation) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.begin_turn("req-1", kind="programmatic", owner="shard-a", request=None)
        await tx.update_turn("req-1", status="running", message_id="msg-1", heartbeat=True)
    running = await store.get_turn(conv.id, "req-1")
    assert running is not None
    assert (running.status, running.message_id) == ("running", "msg-1")
    assert running.heartbeat_at is not None
    assert running.heartbeat_at.tzinfo is not None

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.update_turn("req-1", stash={"chunks": 3})
        await tx.update_turn("req-1", status="error", error="model failed")
    failed = await store.get_turn(conv.id, "req-1")
    assert failed is not None
    assert (failed.status, failed.message_id, failed.stash, failed.error) == (
        "error",
        "msg-1",
        {"chunks": 3},
        "model failed",
    )
    assert failed.heartbeat_at == running.heartbeat_at


async def test_a_new_owner_takes_a_turn_over_under_its_epoch(
    store: Store, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.begin_turn("req-1", kind="submit", owner="shard-a", request=None)
    await store.claim(conv.id, EPOCH + 1)

    async with store.transaction(conv.id, EPOCH + 1) as tx:
        await tx.update_turn("req-1", owner="shard-b", heartbeat=True)

    turn = await store.get_turn(conv.id, "req-1")
    assert turn is not None
    assert (turn.owner, turn.epoch) == ("shard-b", EPOCH + 1)


async def test_updating_an_unknown_turn_fails(store: Store, conv: Conversation) -> None:
    with pytest.raises(StoreError, match="no turn"):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.update_turn("nope", status="completed")


async def test_turn_kind_and_status_are_validated(store: Store, conv: Conversation) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        with pytest.raises(ValueError, match="kind"):
            await tx.begin_turn("req-1", kind="bogus", owner="s", request=None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="status"):
            await tx.update_turn("req-1", status="bogus")  # type: ignore[arg-type]
        # Invalid arguments are rejected before touching the database: the transaction is fine.
        assert await tx.begin_turn("req-1", kind="continuation", owner="s", request=None)
    assert await store.get_turn(conv.id, "req-1") is not None
