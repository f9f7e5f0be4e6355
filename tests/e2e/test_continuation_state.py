"""When a continuation runs, and what the stream state tells tabs meanwhile
(docs/protocol.md#continuations): a dropped continuation ends its pending state; a batch
completed by any result continues."""

from __future__ import annotations

import asyncio

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


async def test_a_dropped_continuation_leaves_no_pending_stream(
    cluster: LocalCluster, conversation: str
) -> None:
    agent = "chat-agent"
    a = await WsClient.connect(cluster.urls[0], agent, conversation)
    request = chat_request([user_message("client-tool:")])
    await a.send(request)
    await a.wait_done(request["id"])
    call = next(c for c in a.chunks(request["id"]) if c["type"] == "tool-input-available")
    history = await get_messages(cluster.urls[0], agent, conversation)
    # Another tab's `setMessages` adds a user message without a request: the transcript now
    # ends with it, so the continuation the tool result schedules has nothing to continue.
    note = user_message("a note")
    await a.send({"type": "cf_agent_chat_messages", "messages": [*history, note]})
    mark = len(a.frames)
    await a.send(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": call["toolCallId"],
            "toolName": "getLocation",
            "output": {"lat": 1},
            "autoContinue": True,
        }
    )
    await a.send({"type": "cf_agent_stream_resume_request", "probeId": "cont"})
    answer = await a.wait_for(lambda f: f.get("probeId") == "cont", after=mark)
    if answer["type"] == "cf_agent_stream_pending":
        # Parked: released by `resuming` if the continuation runs, `resume_none` if not.
        released = await a.wait_for(
            lambda f: f.get("type") in ("cf_agent_stream_resuming", "cf_agent_stream_resume_none"),
            after=mark,
            timeout=5,
        )
        assert released["type"] == "cf_agent_stream_resume_none"
    b = await WsClient.connect(cluster.urls[1], agent, conversation)
    await b.send({"type": "cf_agent_stream_resume_request", "probeId": "fresh"})
    answer = await b.wait_for(lambda f: f.get("probeId") == "fresh")
    assert answer["type"] == "cf_agent_stream_resume_none", b.frames
    assert not b.of_type("cf_agent_stream_pending")
    await a.close()
    await b.close()


async def test_an_error_completing_a_parallel_batch_continues_it(
    cluster: LocalCluster, conversation: str
) -> None:
    agent = "parallel-tools-agent"
    a = await WsClient.connect(cluster.urls[0], agent, conversation)
    request = chat_request([user_message("two-calls")])
    await a.send(request)
    await a.wait_done(request["id"])
    first, second = [
        c["toolCallId"] for c in a.chunks(request["id"]) if c["type"] == "tool-input-available"
    ]
    result = {"type": "cf_agent_tool_result", "toolName": "getLocation"}
    mark = len(a.frames)
    await a.send({**result, "toolCallId": first, "output": {"n": 1}, "autoContinue": True})
    await a.wait_for(lambda f: f.get("type") == "cf_agent_message_updated", after=mark)
    # Not synchronisation but the scenario: the second tool fails later than the 50 ms in
    # which results share a continuation, so the continuation of the first is parked by then.
    await asyncio.sleep(0.3)
    await a.send(
        {
            **result,
            "toolCallId": second,
            "output": None,
            "state": "output-error",
            "errorText": "no fix",
            "autoContinue": False,
        }
    )
    done = await a.wait_for(
        lambda f: f.get("continuation") is True and f.get("done") is True, timeout=5
    )
    assert "outcome" not in done
    history = await get_messages(cluster.urls[0], agent, conversation)
    assert history[-1]["parts"][-1]["text"].startswith("tool result: ")
    await a.close()
