"""The tool-execution ledger and recovery incidents (docs/architecture.md#storage,
docs/recovery.md#budgets)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from durachat_infra.store import (
    Conversation,
    ConversationKey,
    FencedError,
    IncidentRecord,
    ToolCallRecord,
)
from durachat_infra.store._types import utcnow
from durachat_infra.store.port import StorePort

EPOCH = 1


@pytest.fixture
async def conv(store: StorePort) -> Conversation:
    conv = await store.get_or_create_conversation(ConversationKey("default", "agent", "ledger"))
    await store.claim(conv.id, EPOCH)
    return conv


@pytest.fixture
async def other(store: StorePort) -> Conversation:
    other = await store.get_or_create_conversation(ConversationKey("default", "agent", "other"))
    await store.claim(other.id, EPOCH)
    return other


async def record(
    store: StorePort, conv: Conversation, call_id: str, tool: str = "getWeather"
) -> ToolCallRecord | None:
    async with store.transaction(conv.id, EPOCH) as tx:
        return await tx.record_tool_call(call_id, tool_name=tool, input={"city": "Oslo"}, owner="s")


async def test_a_tool_call_is_entered_once_and_keeps_its_outcome(
    store: StorePort, conv: Conversation, other: Conversation
) -> None:
    assert await record(store, conv, "call-1") is None
    # Seen again before it finished: the worker that ran it died.
    assert await record(store, conv, "call-1", "other-tool") == ToolCallRecord(
        "call-1", "getWeather", "running", None, None
    )

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.finish_tool_call("call-1", output={"temp": 21, "unit": "°C"})
    assert await record(store, conv, "call-1") == ToolCallRecord(
        "call-1", "getWeather", "completed", {"temp": 21, "unit": "°C"}, None
    )
    # The same call id in another conversation is another call.
    assert await record(store, other, "call-1") is None


async def test_a_failed_tool_call_records_its_error(store: StorePort, conv: Conversation) -> None:
    await record(store, conv, "call-1")
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.finish_tool_call("call-1", error="boom")
        # Finishing a call that was never entered changes nothing.
        await tx.finish_tool_call("never-entered", output=1)

    assert await record(store, conv, "call-1") == ToolCallRecord(
        "call-1", "getWeather", "error", None, "boom"
    )
    assert await record(store, conv, "never-entered") is None


async def test_tool_calls_are_fenced_roll_back_and_outlive_a_clear(
    store: StorePort, conv: Conversation
) -> None:
    with pytest.raises(RuntimeError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.record_tool_call("rolled-back", tool_name="t", input=None, owner="s")
            raise RuntimeError("crash")
    await record(store, conv, "kept")
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.clear()
    await store.claim(conv.id, EPOCH + 1)

    with pytest.raises(FencedError):
        async with store.transaction(conv.id, EPOCH) as tx:
            await tx.record_tool_call("late", tool_name="t", input=None, owner="s")

    async with store.transaction(conv.id, EPOCH + 1) as tx:
        assert (
            await tx.record_tool_call("rolled-back", tool_name="t", input=None, owner="s") is None
        )
        assert await tx.record_tool_call("late", tool_name="t", input=None, owner="s") is None
        kept = await tx.record_tool_call("kept", tool_name="t", input=None, owner="s")
    assert kept is not None and kept.status == "running"


async def test_incidents_are_created_replaced_and_read(
    store: StorePort, conv: Conversation, other: Conversation
) -> None:
    before = datetime.now(UTC)
    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_incident(
            "r1:u1", request_id="r1", status="detected", attempt=1, data={"progress": [1, "ü"]}
        )
    first = await store.get_incident(conv.id, "r1:u1")
    assert first is not None
    assert first == IncidentRecord(
        "r1:u1", "r1", "detected", 1, {"progress": [1, "ü"]}, first.updated_at
    )
    assert before - timedelta(seconds=5) <= first.updated_at <= datetime.now(UTC)

    async with store.transaction(conv.id, EPOCH) as tx:
        await tx.save_incident("r1:u1", request_id="r2", status="attempting", attempt=2, data={})
    second = await store.get_incident(conv.id, "r1:u1")

    assert second is not None
    assert (second.request_id, second.status, second.attempt, second.data) == (
        "r2",
        "attempting",
        2,
        {},
    )
    assert second.updated_at >= first.updated_at
    assert await store.get_incident(conv.id, "nope") is None
    assert await store.get_incident(other.id, "r1:u1") is None


async def test_sweep_deletes_incidents_unchanged_since_a_time(
    store: StorePort, conv: Conversation, other: Conversation
) -> None:
    async def save(on: Conversation, incident_id: str) -> IncidentRecord:
        async with store.transaction(on.id, EPOCH) as tx:
            await tx.save_incident(
                incident_id, request_id="r", status="scheduled", attempt=1, data={}
            )
        found = await store.get_incident(on.id, incident_id)
        assert found is not None
        return found

    old = await save(conv, "old")
    await save(other, "old-elsewhere")
    while utcnow() <= old.updated_at:  # the clock must move on (a microsecond will do)
        pass
    cutoff = utcnow()
    while utcnow() <= cutoff:
        pass
    fresh = await save(conv, "fresh")
    assert fresh.updated_at > cutoff

    assert await store.sweep_incidents(old.updated_at) == 0
    assert await store.sweep_incidents(cutoff) == 2
    assert await store.get_incident(conv.id, "old") is None
    assert await store.get_incident(other.id, "old-elsewhere") is None
    assert await store.get_incident(conv.id, "fresh") == fresh
    assert await store.sweep_incidents(utcnow() + timedelta(seconds=1)) == 1
