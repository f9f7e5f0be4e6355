"""The example agents of `examples/`, served by a real cluster, behave as docs/agents.md says."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.cluster import TESTS_DIR, running_cluster
from support.wsclient import Frame, WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

REPO_ROOT = str(Path(__file__).resolve().parents[2])
AGENTS = ",".join(
    [
        "durachat.demo",
        "support.agents",
        "examples.weather_agent",
        "examples.handwritten_agent",
        "examples.concurrency_agents",
    ]
)
PARIS = {"city": "Paris", "temperature": 21, "condition": "sunny"}


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    """A cluster serving the example agents beside the demo and test agents."""
    env = {"DURACHAT_AGENTS": AGENTS, "PYTHONPATH": os.pathsep.join([REPO_ROOT, TESTS_DIR])}
    with running_cluster(tmp_path_factory.mktemp("examples"), redis_url, env=env) as cluster:
        yield cluster


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def _of_type(chunks: list[Frame], chunk_type: str) -> list[Frame]:
    return [c for c in chunks if c["type"] == chunk_type]


def _tool_part(message: dict[str, Any], name: str) -> dict[str, Any]:
    parts = [p for p in message["parts"] if p["type"] == f"tool-{name}"]
    assert len(parts) == 1, message["parts"]
    part: dict[str, Any] = parts[0]
    return part


async def _send(
    client: WsClient, text: str, *, history: list[Frame] | None = None, **extra: Any
) -> tuple[str, list[Frame]]:
    """Send a user message after `history` (the transcript so far, as a client holds it) and
    wait for the request's terminal frame."""
    request = chat_request([*(history or []), user_message(text)], **extra)
    await client.send(request)
    done = await client.wait_done(str(request["id"]))
    assert "outcome" not in done, done
    return str(request["id"]), client.chunks(str(request["id"]))


async def _continuation(client: WsClient, after: int) -> tuple[str, list[Frame]]:
    """The continuation the server starts on its own: its request id and chunks."""
    done = await client.wait_for(
        lambda f: (
            f.get("type") == "cf_agent_use_chat_response"
            and f.get("done") is True
            and f.get("continuation") is True
        ),
        after=after,
    )
    assert "outcome" not in done, done
    return str(done["id"]), client.chunks(str(done["id"]))


# --- examples/weather_agent.py ------------------------------------------------------------------


async def test_a_plain_server_tool_runs_between_two_model_steps(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "weather-agent", conversation)
    request_id, chunks = await _send(client, "tool:Paris")
    [call] = _of_type(chunks, "tool-input-available")
    assert (call["toolName"], call["input"]) == ("getWeather", {"city": "Paris"})
    assert _of_type(chunks, "tool-output-available") == [
        {"type": "tool-output-available", "toolCallId": call["toolCallId"], "output": PARIS}
    ]
    assert client.text(request_id) == "tool result: " + _compact(PARIS)
    assert chunks[-1] == {"type": "finish", "messageMetadata": {"finishReason": "stop"}}
    history = await get_messages(url, "weather-agent", conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["id"] == chunks[0]["messageId"]
    part = _tool_part(history[1], "getWeather")
    assert (part["state"], part["output"]) == ("output-available", PARIS)
    await client.close()


async def test_an_async_generator_tool_streams_preliminary_results(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "live-weather-agent", conversation)
    request_id, chunks = await _send(client, "tool:Paris")
    outputs = _of_type(chunks, "tool-output-available")
    final = {"status": "done", **PARIS}
    # Every yielded value goes out as a preliminary result, in order; the last one is then
    # sent again as the final output.
    assert [(o["output"], o.get("preliminary")) for o in outputs] == [
        ({"city": "Paris", "status": "finding weather stations"}, True),
        ({"city": "Paris", "status": "reading 3 stations"}, True),
        (final, True),
        (final, None),
    ]
    assert client.text(request_id) == "tool result: " + _compact(final)
    history = await get_messages(url, "live-weather-agent", conversation)
    part = _tool_part(history[1], "getWeather")
    assert part["state"] == "output-available"
    assert part["output"] == final
    assert "preliminary" not in part
    await client.close()


async def test_an_approval_check_that_says_no_runs_the_tool_at_once(
    examples: LocalCluster, conversation: str
) -> None:
    client = await WsClient.connect(examples.urls[0], "weather-agent", conversation)
    request_id, chunks = await _send(client, "approve:alice")
    assert _of_type(chunks, "tool-approval-request") == []
    paid = {"paid": True, "amount": 42, "recipient": "alice"}
    assert [o["output"] for o in _of_type(chunks, "tool-output-available")] == [paid]
    assert client.text(request_id) == "tool result: " + _compact(paid)
    await client.close()


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
async def test_a_call_needing_approval_waits_for_the_user(
    examples: LocalCluster, conversation: str, approved: bool
) -> None:
    url = examples.urls[0]
    a = await WsClient.connect(url, "weather-agent", conversation)
    b = await WsClient.connect(examples.urls[1], "weather-agent", conversation)
    _request_id, chunks = await _send(a, "approve:bob")
    [asked] = _of_type(chunks, "tool-approval-request")
    assert _of_type(chunks, "tool-output-available") == []
    assert chunks[-1] == {"type": "finish", "messageMetadata": {"finishReason": "tool-calls"}}
    reply_id = chunks[0]["messageId"]
    # Stored at once: a reload shows the approval to answer.
    history = await get_messages(url, "weather-agent", conversation)
    part = _tool_part(history[1], "processPayment")
    assert part["state"] == "approval-requested"
    assert part["approval"] == {"id": asked["approvalId"]}
    assert part["input"] == {"amount": 42, "recipient": "bob"}

    mark_a, mark_b = len(a.frames), len(b.frames)
    await a.send(
        {
            "type": "cf_agent_tool_approval",
            "toolCallId": asked["toolCallId"],
            "approved": approved,
            "autoContinue": True,
        }
    )
    for client, mark in ((a, mark_a), (b, mark_b)):
        updated = await client.wait_for(
            lambda f: f.get("type") == "cf_agent_message_updated", after=mark
        )
        assert updated["message"]["id"] == reply_id
        assert _tool_part(updated["message"], "processPayment")["state"] == (
            "approval-responded" if approved else "output-denied"
        )
    continuation, cont_chunks = await _continuation(a, mark_a)
    assert cont_chunks[0] == {"type": "start"}  # no messageId: it extends the same message
    outputs = _of_type(cont_chunks, "tool-output-available")
    paid = {"paid": True, "amount": 42, "recipient": "bob"}
    if approved:
        assert [o["output"] for o in outputs] == [paid]
        assert a.text(continuation) == "tool result: " + _compact(paid)
    else:
        assert outputs == []
        assert a.text(continuation) == "tool denied"
    history = await get_messages(url, "weather-agent", conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["id"] == reply_id
    part = _tool_part(history[1], "processPayment")
    if approved:
        assert (part["state"], part["output"]) == ("output-available", paid)
    else:
        assert part["state"] == "output-denied"
        assert part["approval"]["approved"] is False
    await a.close()
    await b.close()


async def test_a_client_tool_waits_for_the_browser_then_continues(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "weather-agent", conversation)
    _request_id, chunks = await _send(client, "client-tool:")
    [call] = _of_type(chunks, "tool-input-available")
    assert call["toolName"] == "getLocation"
    assert _of_type(chunks, "tool-output-available") == []
    history = await get_messages(url, "weather-agent", conversation)
    assert _tool_part(history[1], "getLocation")["state"] == "input-available"

    mark = len(client.frames)
    location = {"lat": 48.85, "lon": 2.35}
    await client.send(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": call["toolCallId"],
            "toolName": "getLocation",
            "output": location,
            "autoContinue": True,
        }
    )
    continuation, _chunks = await _continuation(client, mark)
    assert client.text(continuation) == "tool result: " + _compact(location)
    history = await get_messages(url, "weather-agent", conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    part = _tool_part(history[1], "getLocation")
    assert (part["state"], part["output"]) == ("output-available", location)
    await client.close()


async def test_a_dynamic_client_tool_comes_with_the_request(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "live-weather-agent", conversation)
    # Without it, the agent has no such tool: the call fails with an error result.
    _request_id, chunks = await _send(client, "client-tool:")
    [error] = _of_type(chunks, "tool-output-error")
    assert error["errorText"].startswith("Model tried to call unavailable tool 'getLocation'")

    declared = [
        {
            "name": "getLocation",
            "description": "The user's location",
            "parameters": {"type": "object", "properties": {}},
        }
    ]
    history = await get_messages(url, "live-weather-agent", conversation)
    _request_id, chunks = await _send(client, "client-tool:", history=history, clientTools=declared)
    [call] = _of_type(chunks, "tool-input-available")
    assert call["toolName"] == "getLocation"
    assert _of_type(chunks, "tool-output-available") == []
    assert _of_type(chunks, "tool-output-error") == []
    mark = len(client.frames)
    await client.send(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": call["toolCallId"],
            "toolName": "getLocation",
            "output": {"city": "Paris"},
            "autoContinue": True,
        }
    )
    continuation, _chunks = await _continuation(client, mark)
    assert client.text(continuation) == 'tool result: {"city":"Paris"}'
    await client.close()


# --- examples/handwritten_agent.py --------------------------------------------------------------


async def test_a_handwritten_reply_with_data_parts(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    a = await WsClient.connect(url, "report-agent", conversation)
    b = await WsClient.connect(examples.urls[1], "report-agent", conversation)
    request_id, chunks = await _send(a, "durable chat", steps=4)
    start = chunks[0]
    assert start["type"] == "start"
    assert start["messageId"].startswith("assistant_")  # stamped by the host
    assert start["messageMetadata"] == {"kind": "report"}
    # The transient part reaches every tab live (the other tab, through the other gateway,
    # may still be reading the reply when the sender has its end).
    await b.wait_done(request_id)
    status = {"type": "data-status", "data": {"text": "Researching durable chat"}}
    for client in (a, b):
        assert {**status, "transient": True} in client.chunks(request_id)
    assert [c["data"] for c in _of_type(chunks, "data-progress")] == [
        {"done": n, "total": 4} for n in range(1, 5)
    ]
    assert a.text(request_id) == "Report on durable chat."
    assert chunks[-1] == {"type": "finish"}

    history = await get_messages(url, "report-agent", conversation)
    reply = history[1]
    assert reply["id"] == start["messageId"]
    assert reply["metadata"] == {"kind": "report"}
    # Same type and id: one part, holding the last data. Without an id: one part each.
    # Transient: not stored.
    assert reply["parts"] == [
        {"type": "data-progress", "id": "research", "data": {"done": 4, "total": 4}},
        {"type": "text", "text": "Report on durable chat.", "state": "done"},
        {"type": "data-source", "data": {"title": "The durachat docs"}},
        {"type": "data-source", "data": {"title": "The AI SDK docs"}},
    ]
    # The other tab's post-turn transcript is the stored one.
    broadcast = await b.wait_for(
        lambda f: (
            f.get("type") == "cf_agent_chat_messages"
            and any(m["id"] == reply["id"] for m in f["messages"])
        )
    )
    assert broadcast["messages"][-1] == reply
    await a.close()
    await b.close()


async def test_the_request_body_reaches_the_turn(examples: LocalCluster, conversation: str) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "report-agent", conversation)
    _request_id, chunks = await _send(client, "defaults")
    assert len(_of_type(chunks, "data-progress")) == 3
    history = await get_messages(url, "report-agent", conversation)
    _request_id, chunks = await _send(client, "two steps", history=history, steps=2)
    assert len(_of_type(chunks, "data-progress")) == 2
    await client.close()


async def test_a_transient_status_before_the_model_reply(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "status-then-model-agent", conversation)
    request_id, chunks = await _send(client, "hi there")
    assert [c["type"] for c in chunks][:2] == ["start", "data-status"]
    assert chunks[1] == {"type": "data-status", "data": {"text": "Thinking"}, "transient": True}
    assert client.text(request_id) == "echo: hi there"
    history = await get_messages(url, "status-then-model-agent", conversation)
    assert [p["type"] for p in history[1]["parts"]] == ["step-start", "text"]
    await client.close()


# --- examples/concurrency_agents.py -------------------------------------------------------------


async def _busy(client: WsClient) -> tuple[Frame, Frame]:
    """Start a slow reply and wait until it streams; returns its user message and request."""
    u1 = user_message("slow one")
    r1 = chat_request([u1])
    await client.send(r1)
    await client.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 2, timeout=20)
    return u1, r1


async def test_latest_answers_only_the_newest_send(
    examples: LocalCluster, conversation: str
) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "live-search-agent", conversation)
    u1, r1 = await _busy(client)
    u2, u3 = user_message("two"), user_message("three")
    r2, r3 = chat_request([u1, u2]), chat_request([u1, u2, u3])
    await client.send(r2)
    await client.send(r3)
    # The running reply is not interrupted.
    assert "outcome" not in await client.wait_done(str(r1["id"]))
    assert client.text(str(r1["id"])) == "".join(f"s{i:02d} " for i in range(50))
    skipped = await client.wait_done(str(r2["id"]))
    assert skipped["outcome"] == "skipped"
    assert client.chunks(str(r2["id"])) == []
    assert "outcome" not in await client.wait_done(str(r3["id"]))
    assert client.text(str(r3["id"])) == "echo: three"
    history = await get_messages(url, "live-search-agent", conversation)
    assert [m["role"] for m in history] == ["user", "user", "user", "assistant", "assistant"]
    assert [m["id"] for m in history[:3]] == [u1["id"], u2["id"], u3["id"]]
    await client.close()


async def test_debounce_waits_for_a_quiet_moment(examples: LocalCluster, conversation: str) -> None:
    url = examples.urls[0]
    client = await WsClient.connect(url, "bursty-chat-agent", conversation)
    u1, r1 = await _busy(client)
    u2, u3 = user_message("two"), user_message("three")
    r2, r3 = chat_request([u1, u2]), chat_request([u1, u2, u3])
    await client.send(r2)
    sent = time.monotonic()  # before r3 leaves, so before the shard starts its delay
    await client.send(r3)
    await client.send({"type": "cf_agent_chat_request_cancel", "id": r1["id"]})
    assert (await client.wait_done(str(r1["id"])))["outcome"] == "aborted"
    assert (await client.wait_done(str(r2["id"])))["outcome"] == "skipped"
    await client.wait_for(lambda f: f.get("id") == r3["id"] and f.get("seq") == 0)
    # r3 did not start until 500 ms after it was sent, though nothing else ran by then.
    assert time.monotonic() - sent >= 0.5
    assert "outcome" not in await client.wait_done(str(r3["id"]))
    assert client.text(str(r3["id"])) == "echo: three"
    history = await get_messages(url, "bursty-chat-agent", conversation)
    assert [m["role"] for m in history] == ["user", "user", "user", "assistant", "assistant"]
    await client.close()
