"""A turn interrupted on one owner is recovered by the next, in-process, on real Redis and SQL.

The first owner's actor is torn down mid-reply the way a crash leaves things: its tasks die,
nothing is settled, its lease is gone. The second owner activates the conversation as a shard
does (lease, epoch claim, transcript from SQL) and recovers the turn. The `chat:recovery:*`
events are read from an in-memory OpenTelemetry exporter.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import astuple
from pathlib import Path
from typing import ClassVar

import pytest
from redis.asyncio import Redis

from durachat import ChatRecovery, RecoveryContext, RecoveryOptions, Turn
from durachat.demo import ChatAgent
from durachat.messages import sanitize_message
from durachat.observability import Event, subscribe
from durachat.types import UIChunk
from durachat_infra.cluster import Leases
from durachat_infra.eventlog import Kind, LogEntry, LogWriter, read_range
from durachat_infra.keys import ClusterKeys, ConversationKeys, conversation_tag
from durachat_infra.store import ConversationKey, Store, migrate
from durachat_shard.actor import ConversationActor
from durachat_shard.emitter import Emitter
from durachat_shard.recovery import Incidents
from durachat_shard.transcript import Transcript
from support.telemetry import recorded_events
from support.waiting import eventually

pytestmark = pytest.mark.timeout(60)

KEY = ConversationKey("default", "chat-agent", "recovered")
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    await migrate(url)
    async with Store.from_url(url) as opened:
        yield opened


async def _host(
    redis: Redis,
    store: Store,
    prefix: str,
    shard_id: str,
    *,
    key: ConversationKey = KEY,
    agent_cls: type[ChatAgent] = ChatAgent,
) -> tuple[ConversationActor, LogWriter]:
    """Activate the conversation the way a shard does, recovering what was left open."""
    keys = ConversationKeys(prefix, conversation_tag(key.tenant, key.agent, key.name))
    grant = await Leases(redis, ClusterKeys(prefix), shard_id, 30.0).acquire(keys)
    conversation = await store.get_or_create_conversation(key)
    await store.claim(conversation.id, grant.epoch)
    stored = await store.load_path(conversation.id)
    writer = LogWriter(redis, owner=shard_id)
    agent = agent_cls(key.name)
    actor = ConversationActor(
        conversation_id=conversation.id,
        key=key,
        epoch=grant.epoch,
        shard_id=shard_id,
        agent=agent,
        transcript=Transcript([(m.pk, m.message) for m in stored], sanitize=sanitize_message),
        store=store,
        emitter=Emitter(writer, keys, redis),
        incidents=Incidents(
            store=store,
            conversation_id=conversation.id,
            tenant=key.tenant,
            agent=key.agent,
            name=key.name,
            config=agent.chat_recovery,
            redis=redis,
            key_prefix=prefix,
        ),
    )
    agent.host = actor.host
    await actor.recover(await store.open_turns(conversation.id))
    actor.start()
    return actor, writer


def _chunks(entries: list[LogEntry], request_id: str) -> list[dict[str, object]]:
    return [
        json.loads(e.frame)
        for e in entries
        if e.kind is Kind.CHUNK and e.request == request_id and "error" not in json.loads(e.frame)
    ]


async def test_the_next_owner_continues_an_interrupted_reply(
    redis: Redis, store: Store, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURACHAT_SCRIPTED_DELAY_SCALE", "0.2")
    keys = ConversationKeys(key_prefix, conversation_tag(KEY.tenant, KEY.agent, KEY.name))
    seen: list[str] = []
    unsubscribe = subscribe("agents:chat", lambda event: seen.append(event.type))
    messages: list[str] = []
    unsubscribe_messages = subscribe("agents:message", lambda event: messages.append(event.type))
    with recorded_events() as (_, exporter):
        first, first_writer = await _host(redis, store, key_prefix, "shard-a")
        request = {
            "type": "cf_agent_use_chat_request",
            "id": "req-1",
            "init": {
                "method": "POST",
                "body": json.dumps(
                    {
                        "messages": [
                            {
                                "id": "u1",
                                "role": "user",
                                "parts": [{"type": "text", "text": "slow"}],
                            }
                        ]
                    }
                ),
            },
        }
        await first.submit("conn-1", request)

        async def some_streamed() -> bool:
            return len(_chunks(await read_range(redis, keys), "req-1")) >= 8

        await eventually(some_streamed, timeout=20)
        # The crash: the owner's tasks die mid-reply, nothing is settled, the lease lapses.
        for task in first._tasks:
            task.cancel()
        await asyncio.gather(*first._tasks, return_exceptions=True)
        await first_writer.flush()
        await redis.delete(keys.lease)

        second, _ = await _host(redis, store, key_prefix, "shard-b")

        async def ended() -> bool:
            entries = await read_range(redis, keys)
            return any(e.kind is Kind.TERMINAL and e.request == "req-1" for e in entries)

        await eventually(ended, timeout=30)
        await second.stop()
    unsubscribe()
    unsubscribe_messages()
    # The first owner published the request; the reply's end came from the second.
    assert messages == ["message:request", "message:response"]

    frames = _chunks(await read_range(redis, keys), "req-1")
    assert [f["seq"] for f in frames] == list(range(len(frames)))
    bodies = [json.loads(str(f["body"])) for f in frames]
    text = "".join(str(b["delta"]) for b in bodies if b["type"] == "text-delta")
    assert text == SLOW_TEXT
    conversation = await store.get_or_create_conversation(KEY)
    stored = [m.message for m in await store.load_path(conversation.id)]
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert "".join(p.get("text", "") for p in stored[1]["parts"]) == SLOW_TEXT
    turn = await store.get_turn(conversation.id, "req-1")
    assert turn is not None and turn.status == "completed" and turn.owner == "shard-b"

    events = [
        s.attributes
        for s in exporter.get_finished_spans()
        if s.attributes
        and str(s.attributes.get("durachat.event.type", "")).startswith("chat:recovery:")
    ]
    kinds = [e["durachat.event.type"] for e in events]
    assert kinds == [
        "chat:recovery:detected",
        "chat:recovery:attempt",
        "chat:recovery:scheduled",
        "chat:recovery:completed",
    ]
    # The same events reach in-process subscribers (beside the turn events of the feed).
    assert [kind for kind in seen if kind.startswith("chat:recovery:")] == kinds
    for event in events:
        assert event["durachat.payload.requestId"] == "req-1"
        assert event["durachat.payload.incidentId"] == "req-1:u1"
        assert event["durachat.payload.recoveryKind"] == "continue"
        assert event["durachat.payload.attempt"] == 1
        assert event["durachat.conversation"] == KEY.name


def _request(request_id: str, text: str) -> dict[str, object]:
    message = {"id": f"u-{request_id}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {
        "type": "cf_agent_use_chat_request",
        "id": request_id,
        "init": {"method": "POST", "body": json.dumps({"messages": [message], "topic": "x"})},
    }


async def _crash_mid_reply(
    redis: Redis,
    store: Store,
    *,
    prefix: str,
    key: ConversationKey,
    agent_cls: type[ChatAgent],
    rid: str,
) -> ConversationActor:
    """Start a `slow` reply on one owner, kill it mid-way, activate the next owner."""
    keys = ConversationKeys(prefix, conversation_tag(key.tenant, key.agent, key.name))
    first, writer = await _host(redis, store, prefix, "shard-a", key=key, agent_cls=agent_cls)
    await first.submit("conn-1", _request(rid, "slow"))

    async def some_streamed() -> bool:
        return len(_chunks(await read_range(redis, keys), rid)) >= 8

    await eventually(some_streamed, timeout=20)
    for task in first._tasks:
        task.cancel()
    await asyncio.gather(*first._tasks, return_exceptions=True)
    await writer.flush()
    await redis.delete(keys.lease)
    second, _ = await _host(redis, store, prefix, "shard-b", key=key, agent_cls=agent_cls)

    async def ended() -> bool:
        entries = await read_range(redis, keys)
        return any(e.kind is Kind.TERMINAL and e.request == rid for e in entries)

    await eventually(ended, timeout=30)
    await second.stop()
    return second


class StashingAgent(ChatAgent):
    seen: ClassVar[list[RecoveryContext]] = []

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        if not turn.continuation:
            await self.stash({"step": "started", "request": turn.request_id})
        async for chunk in self.stream_model(turn):
            yield chunk

    async def on_chat_recovery(self, ctx: RecoveryContext) -> RecoveryOptions:
        self.seen.append(ctx)
        return RecoveryOptions()


async def test_the_stash_and_the_request_reach_on_chat_recovery(
    redis: Redis, store: Store, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURACHAT_SCRIPTED_DELAY_SCALE", "0.2")
    key = ConversationKey("default", "stashing-agent", "stash")
    await _crash_mid_reply(
        redis, store, prefix=key_prefix, key=key, agent_cls=StashingAgent, rid="req-s"
    )
    [ctx] = StashingAgent.seen
    assert ctx.recovery_data == {"step": "started", "request": "req-s"}
    assert ctx.request_id == ctx.recovery_root_request_id == "req-s"
    assert ctx.incident_id == "req-s:u-req-s"
    assert ctx.recovery_kind == "continue" and ctx.attempt == 1
    assert ctx.partial_text.startswith("s00 s01 ") and SLOW_TEXT.startswith(ctx.partial_text)
    assert ctx.last_body == {"topic": "x"}
    assert [m["role"] for m in ctx.messages] == ["user"]


class BudgetedAgent(ChatAgent):
    chat_recovery = ChatRecovery(tenant_token_budget=5, terminal_message="Out of budget.")


async def test_a_tenant_over_its_recovery_token_budget_is_sealed(
    redis: Redis, store: Store, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURACHAT_SCRIPTED_DELAY_SCALE", "0.2")
    first = ConversationKey("default", "budgeted-agent", "one")
    second = ConversationKey("default", "budgeted-agent", "two")
    await _crash_mid_reply(
        redis, store, prefix=key_prefix, key=first, agent_cls=BudgetedAgent, rid="req-1"
    )

    async def charged() -> bool:
        keys = [k async for k in redis.scan_iter(match=f"{key_prefix}:tenant:default:*")]
        return bool(keys) and int(await redis.get(keys[0]) or 0) >= 5

    # The first recovery ran to its end and used more than the tenant's budget.
    await eventually(charged, timeout=10)
    seen: list[Event] = []
    unsubscribe = subscribe("agents:chat", seen.append)
    await _crash_mid_reply(
        redis, store, prefix=key_prefix, key=second, agent_cls=BudgetedAgent, rid="req-2"
    )
    unsubscribe()
    keys = ConversationKeys(key_prefix, conversation_tag(*astuple(second)))
    terminal = [
        json.loads(e.frame)
        for e in await read_range(redis, keys)
        if e.kind is Kind.TERMINAL and e.request == "req-2"
    ]
    assert terminal == [
        {
            "body": "Out of budget.",
            "done": True,
            "error": True,
            "id": "req-2",
            "type": "cf_agent_use_chat_response",
        }
    ]
    exhausted = [e for e in seen if e.type == "chat:recovery:exhausted"]
    assert [e.payload["reason"] for e in exhausted] == ["tenant_budget_exceeded"]
