"""The chat client's tool API against a scripted in-process server: the frames it sends, the
transcript it keeps, and how it finds the continuation its answer starts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection

from durachat.client import ChatClient, ClientError, ToolCall
from durachat.client.tools import pending_tool_calls, will_continue
from support.scripted_server import Frame, Script, ScriptedServer, scripted_chat

pytestmark = pytest.mark.timeout(20)


CALL = {
    "type": "tool-getLocation",
    "toolCallId": "call_1",
    "state": "input-available",
    "input": {},
}
APPROVAL = {
    "type": "tool-processPayment",
    "toolCallId": "call_2",
    "state": "approval-requested",
    "input": {"amount": 42},
    "approval": {"id": "approval_2"},
}
USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "where am I?"}]}


def assistant(*parts: Frame, message_id: str = "a1") -> Frame:
    return {"id": message_id, "role": "assistant", "parts": [{"type": "step-start"}, *parts]}


def response(request_id: str, seq: int | None, chunk: Frame | None, **extra: Any) -> str:
    frame: Frame = {
        "type": "cf_agent_use_chat_response",
        "id": request_id,
        "body": json.dumps(chunk) if chunk is not None else "",
        "done": chunk is None,
        **extra,
    }
    if seq is not None:
        frame["seq"] = seq
    return json.dumps(frame)


CONTINUATION: list[Frame] = [
    {"type": "start"},
    {"type": "start-step"},
    {"type": "text-start", "id": "t1"},
    {"type": "text-delta", "id": "t1", "delta": "you are in Paris"},
    {"type": "text-end", "id": "t1"},
    {"type": "finish-step"},
    {"type": "finish", "messageMetadata": {"finishReason": "stop"}},
]


async def stream(ws: ServerConnection, request_id: str, *, replay: bool = False) -> None:
    flags: Frame = {"continuation": True, **({"replay": True} if replay else {})}
    for seq, chunk in enumerate(CONTINUATION):
        await ws.send(response(request_id, seq, chunk, **flags))
    if replay:
        # Replayed what there was; the end comes live.
        complete = {"replay": True, "replayComplete": True, "done": False}
        await ws.send(json.dumps({**json.loads(response(request_id, None, None)), **complete}))
    await ws.send(response(request_id, None, None, continuation=True))


@asynccontextmanager
async def chat(script: Script, **options: Any) -> AsyncIterator[tuple[ChatClient, ScriptedServer]]:
    async with scripted_chat(script, messages=[USER, assistant(CALL)], **options) as opened:
        yield opened


def updated(part: Frame, message_id: str = "a1") -> str:
    return json.dumps(
        {"type": "cf_agent_message_updated", "message": assistant(part, message_id=message_id)}
    )


async def announced_continuation(ws: ServerConnection, frame: Frame) -> None:
    """The server's usual answer: message updated; the probe finds the continuation pending;
    it starts (an unprompted `resuming`); the ACK gets the replay."""
    kind = frame["type"]
    if kind == "cf_agent_tool_result":
        await ws.send(updated({**CALL, "state": "output-available", "output": frame["output"]}))
    elif kind == "cf_agent_stream_resume_request":
        await ws.send(
            json.dumps(
                {"type": "cf_agent_stream_pending", "id": "cont1", "probeId": frame["probeId"]}
            )
        )
        await ws.send(json.dumps({"type": "cf_agent_stream_resuming", "id": "cont1"}))
    elif kind == "cf_agent_stream_resume_ack":
        await stream(ws, frame["id"], replay=True)


async def test_add_tool_output_returns_the_announced_continuation() -> None:
    async with chat(announced_continuation) as (client, server):
        assert [c.tool_call_id for c in client.pending_tool_calls()] == ["call_1"]
        reply = await client.add_tool_output("call_1", {"city": "Paris"})
        assert reply is not None and reply.request_id == "cont1"
        assert await reply.text() == "you are in Paris"
        assert reply.continuation and reply.outcome == "completed"
        [sent] = server.sent("cf_agent_tool_result")
        assert sent == {
            "type": "cf_agent_tool_result",
            "toolCallId": "call_1",
            "toolName": "getLocation",
            "output": {"city": "Paris"},
            "autoContinue": True,
        }
        # One assistant message: the answered call, then the continuation's text.
        assert [m["id"] for m in client.messages] == ["u1", "a1"]
        parts = client.messages[1]["parts"]
        assert parts[1]["state"] == "output-available" and parts[1]["output"] == {"city": "Paris"}
        assert parts[-1] == {"type": "text", "text": "you are in Paris", "state": "done"}
        assert client.pending_tool_calls() == []
        assert server.sent("cf_agent_stream_resume_ack") == [
            {"type": "cf_agent_stream_resume_ack", "id": "cont1"}
        ]


async def test_a_continuation_that_ended_before_the_probe_is_still_found() -> None:
    async def fast(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_tool_result":
            await ws.send(updated({**CALL, "state": "output-available", "output": 1}))
            await stream(ws, "cont2")  # live, before the probe is answered
        elif frame["type"] == "cf_agent_stream_resume_request":
            reply = {
                "type": "cf_agent_stream_resume_none",
                "reason": "idle",
                "probeId": frame["probeId"],
            }
            await ws.send(json.dumps(reply))

    async with chat(fast) as (client, _):
        reply = await client.add_tool_output("call_1", 1, client_tools=[{"name": "getLocation"}])
        assert reply is not None and reply.request_id == "cont2" and reply.done
        assert await reply.text() == "you are in Paris"
        assert client.messages[1]["parts"][-1]["text"] == "you are in Paris"


async def test_errors_and_no_continuation() -> None:
    async def script(ws: ServerConnection, frame: Frame) -> None:
        kind = frame["type"]
        if kind == "cf_agent_tool_result" and frame["toolCallId"] == "nope":
            error = {"type": "durachat_error", "code": "unknown_tool_call", "message": "no call"}
            await ws.send(json.dumps(error))
        elif kind == "cf_agent_tool_result":
            state = frame.get("state", "output-available")
            await ws.send(updated({**CALL, "state": state, "errorText": frame.get("errorText")}))
        elif kind == "cf_agent_stream_resume_request":
            reply = {
                "type": "cf_agent_stream_resume_none",
                "reason": "idle",
                "probeId": frame["probeId"],
            }
            await ws.send(json.dumps(reply))

    async with chat(script) as (client, server):
        with pytest.raises(ClientError) as raised:
            await client.add_tool_output("nope", 1)
        assert raised.value.code == "unknown_tool_call"
        assert client.errors[-1].code == "unknown_tool_call"

        await client.add_tool_error("call_1", "no GPS")
        sent = server.sent("cf_agent_tool_result")[-1]
        assert sent["state"] == "output-error" and sent["errorText"] == "no GPS"
        assert sent["autoContinue"] is False and sent["toolName"] == "getLocation"
        part = client.messages[1]["parts"][1]
        assert part["state"] == "output-error" and part["errorText"] == "no GPS"
        assert client.pending_tool_calls() == []


async def test_approve_tool_sends_the_approval() -> None:
    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_stream_resume_request":
            reply = {
                "type": "cf_agent_stream_resume_none",
                "reason": "idle",
                "probeId": frame["probeId"],
            }
            await ws.send(json.dumps(reply))

    async with chat(script) as (client, server):
        client.messages = [USER, assistant(APPROVAL)]
        [call] = client.pending_tool_calls()
        assert call == ToolCall(
            tool_call_id="call_2",
            tool_name="processPayment",
            input={"amount": 42},
            state="approval-requested",
            message_id="a1",
            approval_id="approval_2",
        )
        assert call.needs_approval
        assert await client.approve_tool("call_2", False, auto_continue=False) is None
        assert server.sent("cf_agent_tool_approval") == [
            {
                "type": "cf_agent_tool_approval",
                "toolCallId": "call_2",
                "approved": False,
                "autoContinue": False,
            }
        ]
        part = client.messages[1]["parts"][1]
        assert part["state"] == "output-denied"
        assert part["approval"] == {"id": "approval_2", "approved": False}


async def test_a_partly_answered_batch_does_not_wait_for_a_continuation() -> None:
    second = {**CALL, "toolCallId": "call_3"}

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_stream_resume_request":
            # The server holds the continuation back until the batch is complete.
            reply = {"type": "cf_agent_stream_pending", "id": "cont3", "probeId": frame["probeId"]}
            await ws.send(json.dumps(reply))

    async with chat(script) as (client, _):
        client.messages = [USER, assistant(CALL, second)]
        async with asyncio.timeout(5):
            assert await client.add_tool_output("call_1", 1) is None
        assert [c.tool_call_id for c in client.pending_tool_calls()] == ["call_3"]


async def test_message_updated_matches_by_tool_call_and_never_appends() -> None:
    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_stream_resume_request":
            await ws.send(updated({**CALL, "state": "output-available", "output": 2}, "server-id"))
            await ws.send(updated({**CALL, "toolCallId": "other"}, "unknown"))
            reply = {
                "type": "cf_agent_stream_resume_none",
                "reason": "idle",
                "probeId": frame["probeId"],
            }
            await ws.send(json.dumps(reply))

    async with chat(script) as (client, _):
        assert await client.resume() is None
        assert [m["id"] for m in client.messages] == ["u1", "a1"]
        assert client.messages[1]["parts"][1]["output"] == 2


def test_pending_tool_calls_and_batches() -> None:
    messages = [
        USER,
        assistant(CALL, {"type": "text", "text": "hi"}),
        {"id": "u2", "role": "user", "parts": [{**CALL, "toolCallId": "not-assistant"}]},
        assistant(
            {**APPROVAL},
            {**CALL, "toolCallId": "done", "state": "output-available"},
            message_id="a2",
        ),
    ]
    found = pending_tool_calls(messages)
    assert [(c.tool_call_id, c.message_id) for c in found] == [("call_1", "a1"), ("call_2", "a2")]
    assert will_continue(messages[1])
    assert not will_continue(messages[3])  # one answered, one still waiting


async def test_on_tool_call_answers_and_final_follows() -> None:
    seen: list[ToolCall] = []

    async def locate(call: ToolCall) -> object:
        seen.append(call)
        return {"city": "Paris"}

    async def script(ws: ServerConnection, frame: Frame) -> None:
        if frame["type"] == "cf_agent_use_chat_request":
            request_id = frame["id"]
            chunks: list[Frame] = [
                {"type": "start", "messageId": "a9"},
                {
                    "type": "tool-input-available",
                    "toolCallId": "call_9",
                    "toolName": "getLocation",
                    "input": {},
                },
                {"type": "finish", "messageMetadata": {"finishReason": "tool-calls"}},
            ]
            for seq, chunk in enumerate(chunks):
                await ws.send(response(request_id, seq, chunk))
            await ws.send(response(request_id, None, None, messageIds=["x"]))
        else:
            await announced_continuation(ws, frame)

    async with chat(script, on_tool_call=locate) as (client, server):
        client.messages = []
        reply = await client.send("where am I?")
        last = await reply.final()
        assert last.request_id == "cont1" and await last.text() == "you are in Paris"
        assert [c.tool_call_id for c in seen] == ["call_9"]
        assert server.sent("cf_agent_tool_result")[0]["output"] == {"city": "Paris"}
        assert [m["id"] for m in client.messages][1:] == ["a9"]
