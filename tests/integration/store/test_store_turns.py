"""Turns (idempotent by request id) and the saved request context."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durachat_infra.store import Conversation, ConversationKey, StoreError, TurnStatus
from durachat_infra.store.port import StorePort

EPOCH = 1


@pytest.fixture
async def conv(store: StorePort) -> Conversation:
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "turns"))
    await store.claim(conv.id, EPOCH)
    return conv


async def test_request_context_round_trips(store: StorePort, conv: Conversation) -> None:
    assert await store.load_request_context(conv.id) == (None, None)
    body = {"messages": [], "model": "m", "nested": {"ünïcode": "✓", "n": [1, 2.5, None, True]}}
    tools = [{"name": "lookup", "parameters": {"type": "object"}}]

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_request_context(body, tools)
    assert await store.load_request_context(conv.id) == (body, tools)

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_request_context({"model": "other"}, None)
    assert await store.load_request_context(conv.id) == ({"model": "other"}, None)


async def test_turns_are_idempotent_by_request_id(store: StorePort, conv: Conversation) -> None:
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
    store: StorePort, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    for conversation in (conv, other):
        async with store.transaction(conversation.id, EPOCH) as tx:
            assert await tx.begin_turn("req-1", kind="submit", owner="s", request=None)


async def test_update_turn_changes_only_what_is_given(store: StorePort, conv: Conversation) -> None:
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
    store: StorePort, conv: Conversation
) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.begin_turn("req-1", kind="submit", owner="shard-a", request=None)
    await store.claim(conv.id, EPOCH + 1)

    async with store.transaction(conv.id, EPOCH + 1) as tx:
        await tx.update_turn("req-1", owner="shard-b", heartbeat=True)

    turn = await store.get_turn(conv.id, "req-1")
    assert turn is not None
    assert (turn.owner, turn.epoch) == ("shard-b", EPOCH + 1)


async def test_updating_an_unknown_turn_fails(store: StorePort, conv: Conversation) -> None:
    with pytest.raises(StoreError, match="no turn"):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.update_turn("nope", status="completed")


async def test_turn_kind_and_status_are_validated(store: StorePort, conv: Conversation) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        with pytest.raises(ValueError, match="kind"):
            await tx.begin_turn("req-1", kind="bogus", owner="s", request=None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="status"):
            await tx.update_turn("req-1", status="bogus")  # type: ignore[arg-type]
        # Invalid arguments are rejected before touching the database: the transaction is fine.
        assert await tx.begin_turn("req-1", kind="continuation", owner="s", request=None)
    assert await store.get_turn(conv.id, "req-1") is not None


async def begin(store: StorePort, conv: Conversation, *request_ids: str, owner: str = "s") -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        for request_id in request_ids:
            await tx.begin_turn(request_id, kind="submit", owner=owner, request=None)


async def settle(store: StorePort, conv: Conversation, **statuses: TurnStatus) -> None:
    async with store.transaction(conv.id, EPOCH) as tx:
        for request_id, status in statuses.items():
            await tx.update_turn(request_id, status=status)


async def test_recent_request_ids_are_the_newest_first(
    store: StorePort, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    await begin(store, conv, "r1", "r2")
    await begin(store, other, "x1")
    await begin(store, conv, "r3")

    assert await store.recent_request_ids(conv.id) == ["r3", "r2", "r1"]
    assert await store.recent_request_ids(conv.id, limit=2) == ["r3", "r2"]
    assert await store.recent_request_ids(other.id) == ["x1"]
    assert await store.recent_request_ids(424242) == []


async def test_open_turns_are_those_accepted_or_running(
    store: StorePort, conv: Conversation
) -> None:
    await begin(store, conv, "r1", "r2", "r3", "r4", "r5")
    await settle(store, conv, r1="completed", r2="running", r4="skipped", r5="aborted")

    open_turns = await store.open_turns(conv.id)

    assert [(t.request_id, t.status) for t in open_turns] == [("r2", "running"), ("r3", "accepted")]
    assert await store.open_turns(424242) == []


async def test_all_open_turns_span_conversations_oldest_first(
    store: StorePort, conv: Conversation
) -> None:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    await begin(store, conv, "r1")
    await begin(store, other, "x1", "x2")
    await begin(store, conv, "r2")
    await settle(store, other, x2="error")

    found = await store.all_open_turns()

    assert [(t.conversation_id, t.key, t.turn.request_id) for t in found] == [
        (conv.id, conv.key, "r1"),
        (other.id, other.key, "x1"),
        (conv.id, conv.key, "r2"),
    ]
    assert [t.turn.request_id for t in await store.all_open_turns(limit=2)] == ["r1", "x1"]


async def test_heartbeat_stamps_the_open_turns_of_one_owner_unfenced(
    store: StorePort, conv: Conversation
) -> None:
    await begin(store, conv, "a1", "a2", "a3", owner="shard-a")
    await begin(store, conv, "b1", owner="shard-b")
    await settle(store, conv, a3="completed")
    # A heartbeat says the process is alive, whoever owns the conversation now.
    await store.claim(conv.id, EPOCH + 1)
    before = datetime.now(UTC)

    assert await store.heartbeat_turns("shard-a") == 2
    assert await store.heartbeat_turns("shard-c") == 0

    for request_id in ("a1", "a2"):
        turn = await store.get_turn(conv.id, request_id)
        assert turn is not None and turn.heartbeat_at is not None
        assert before - timedelta(seconds=5) <= turn.heartbeat_at <= datetime.now(UTC)
    for request_id in ("a3", "b1"):
        turn = await store.get_turn(conv.id, request_id)
        assert turn is not None and turn.heartbeat_at is None


async def test_turns_outlive_a_clear(store: StorePort, conv: Conversation) -> None:
    await begin(store, conv, "r1")
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.clear()
        assert not await tx.begin_turn("r1", kind="submit", owner="s", request=None)

    assert await store.recent_request_ids(conv.id) == ["r1"]
