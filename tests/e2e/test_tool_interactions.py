"""Client tools and approvals over the wire: results, message updates, continuations."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"


def _tool_part(message: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in message["parts"] if p["type"] == f"tool-{name}")


async def _continuation(client: WsClient, after: int) -> str:
    """Follow the continuation the way the client hook does: probe, ACK, stream to the end."""
    await client.send({"type": "cf_agent_stream_resume_request", "probeId": "cont"})
    answer = await client.wait_for(
        lambda f: (
            f.get("probeId") == "cont"
            and f.get("type") in ("cf_agent_stream_pending", "cf_agent_stream_resuming")
        ),
        after=after,
    )
    request_id = answer["id"]
    if answer["type"] == "cf_agent_stream_pending":
        await client.wait_for(
            lambda f: f.get("type") == "cf_agent_stream_resuming" and f.get("id") == request_id,
            after=after,
        )
    await client.send({"type": "cf_agent_stream_resume_ack", "id": request_id})
    done = await client.wait_done(request_id, after=after)
    assert done.get("continuation") is True and "messageIds" not in done
    return str(request_id)


async def test_client_tool_round_trip(cluster: LocalCluster, conversation: str) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    request = chat_request([user_message("client-tool:")])
    await a.send(request)
    await a.wait_done(request["id"])
    chunks = a.chunks(request["id"])
    call = next(c for c in chunks if c["type"] == "tool-input-available")
    assert call["toolName"] == "getLocation"
    assert chunks[-1] == {"type": "finish", "messageMetadata": {"finishReason": "tool-calls"}}
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert _tool_part(history[1], "getLocation")["state"] == "input-available"

    mark = len(a.frames)
    location = {"lat": 48.85, "lon": 2.35}
    await a.send(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": call["toolCallId"],
            "toolName": "getLocation",
            "output": location,
            "autoContinue": True,
        }
    )
    updated = await b.wait_for(lambda f: f.get("type") == "cf_agent_message_updated")
    assert _tool_part(updated["message"], "getLocation")["state"] == "output-available"
    continuation = await _continuation(a, mark)
    cont_chunks = a.chunks(continuation)
    assert cont_chunks[0] == {"type": "start"}  # no messageId on a continuation
    assert a.text(continuation) == "tool result: " + json.dumps(location, separators=(",", ":"))
    # Every tab, the requester included, gets the transcript after a continuation.
    await a.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages", after=mark)
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    part = _tool_part(history[1], "getLocation")
    assert part["state"] == "output-available" and part["output"] == location
    assert history[1]["parts"][-1]["text"].startswith("tool result: ")
    # The same result again changes nothing and starts nothing.
    mark = len(b.frames)
    await a.send(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": call["toolCallId"],
            "toolName": "getLocation",
            "output": {"lat": 0, "lon": 0},
        }
    )
    after = await get_messages(cluster.urls[0], AGENT, conversation)
    assert after == history
    assert [f for f in b.frames[mark:] if f.get("type") == "cf_agent_message_updated"] == []
    await a.close()
    await b.close()


@pytest.mark.parametrize(("approved", "reply"), [(True, "paid"), (False, "denied")])
async def test_approval(
    cluster: LocalCluster, conversation: str, approved: bool, reply: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    request = chat_request([user_message("approve:bob")])
    await a.send(request)
    await a.wait_done(request["id"])
    chunks = a.chunks(request["id"])
    asked = next(c for c in chunks if c["type"] == "tool-approval-request")
    # A reload shows the approval to answer.
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    part = _tool_part(history[1], "processPayment")
    assert part["state"] == "approval-requested"
    assert part["input"] == {"amount": 42, "recipient": "bob"}

    mark = len(a.frames)
    await a.send(
        {
            "type": "cf_agent_tool_approval",
            "toolCallId": asked["toolCallId"],
            "approved": approved,
            "autoContinue": True,
        }
    )
    updated = await a.wait_for(lambda f: f.get("type") == "cf_agent_message_updated", after=mark)
    assert _tool_part(updated["message"], "processPayment")["state"] == (
        "approval-responded" if approved else "output-denied"
    )
    continuation = await _continuation(a, mark)
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    part = _tool_part(history[1], "processPayment")
    if reply == "paid":
        outputs = [c for c in a.chunks(continuation) if c["type"] == "tool-output-available"]
        assert outputs[0]["output"] == {"ok": True, "amount": 42, "recipient": "bob"}
        assert part["state"] == "output-available"
        assert a.text(continuation) == 'tool result: {"ok":true,"amount":42,"recipient":"bob"}'
    else:
        assert part["state"] == "output-denied"
        assert a.text(continuation) == "tool denied"
    assert [m["role"] for m in history] == ["user", "assistant"]
    await a.close()


async def test_a_result_for_an_unknown_call_gets_a_clear_error(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    await a.send({"type": "cf_agent_tool_result", "toolCallId": "nope", "output": 1})
    error = await a.wait_for(lambda f: f.get("type") == "durachat_error")
    assert error["code"] == "unknown_tool_call"
    request = chat_request([user_message("still works")])
    await a.send(request)
    await a.wait_done(request["id"])
    await a.close()
