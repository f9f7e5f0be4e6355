"""The Python client's tool API against a real cluster: client tools, errors, approvals, the
`on_tool_call` hook and the CLI's approval prompt."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from durachat.client import ChatClient, ClientError, Reply, ToolCall, fetch_history
from durachat_infra.local.cluster import LocalCluster
from support.cli import run_cli
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"
LOCATION = {"lat": 48.85, "lon": 2.35}
PAYMENT = {"amount": 42, "recipient": "bob"}

Frame = dict[str, Any]


class Frames:
    """An `on_frame` hook that records frames and lets a test wait for one."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self._arrived = asyncio.Event()

    def __call__(self, frame: Frame) -> None:
        self.frames.append(frame)
        self._arrived.set()

    async def wait_for(self, predicate: Callable[[Frame], bool], *, timeout: float = 15.0) -> Frame:
        index = 0
        async with asyncio.timeout(timeout):
            while True:
                while index < len(self.frames):
                    index += 1
                    if predicate(self.frames[index - 1]):
                        return self.frames[index - 1]
                self._arrived.clear()
                await self._arrived.wait()


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def tool_part(message: Frame, name: str) -> Frame:
    return next(p for p in message["parts"] if p["type"] == f"tool-{name}")


def texts(message: Frame) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


def same(local: list[Frame], stored: list[Frame]) -> bool:
    """Whether the local transcript is the stored one, but for message metadata (the server
    stores none of its own, such as the `finishReason` the client saw on the wire, but keeps
    what a client's request brings)."""

    def bare(messages: list[Frame]) -> list[Frame]:
        return [{k: v for k, v in m.items() if k != "metadata"} for m in messages]

    return bare(local) == bare(stored)


async def ended(reply: Reply, *, timeout: float = 20.0) -> str:
    async with asyncio.timeout(timeout):
        return await reply.wait()


async def tool_call_reply(client: ChatClient, text: str) -> tuple[Reply, ToolCall]:
    """Send `text`, wait for the reply, return it and the one call it waits on."""
    reply = await client.send(text)
    assert await ended(reply) == "completed"
    calls = [c for c in client.pending_tool_calls() if c.message_id == reply.message_id]
    assert len(calls) == 1, client.messages
    return reply, calls[0]


async def test_a_client_tool_output_continues_the_same_message(
    cluster: LocalCluster, conversation: str
) -> None:
    watched = Frames()
    async with (
        ChatClient.connect(cluster.urls[0], AGENT, conversation) as client,
        ChatClient.connect(cluster.urls[1], AGENT, conversation, on_frame=watched) as other,
    ):
        reply, call = await tool_call_reply(client, "client-tool:")
        assert call.tool_name == "getLocation" and call.input == {}
        assert call.state == "input-available" and not call.needs_approval
        assert call.message_id == reply.message_id
        first = reply.snapshot()
        assert first is not None and first["metadata"] == {"finishReason": "tool-calls"}

        continuation = await client.add_tool_output(call.tool_call_id, LOCATION)
        assert continuation is not None
        assert continuation.continuation and continuation.request_id != reply.request_id
        async with asyncio.timeout(20):
            text = await continuation.text()
        assert text == "tool result: " + compact(LOCATION)
        assert continuation.outcome == "completed"
        # The continuation extends the message of the reply, under its id.
        assert continuation.message_id == reply.message_id
        assert client.pending_tool_calls() == []

        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["role"] for m in history] == ["user", "assistant"]
        assert history[1]["id"] == reply.message_id
        part = tool_part(history[1], "getLocation")
        assert part["state"] == "output-available" and part["output"] == LOCATION
        assert texts(history[1])[-1] == text
        assert same(client.messages, history)
        # The other tab got the update and the continuation into the same message.
        update = await watched.wait_for(lambda f: f.get("type") == "cf_agent_message_updated")
        assert tool_part(update["message"], "getLocation")["state"] == "output-available"

        async def other_in_step() -> bool:
            return same(other.messages, history)

        await eventually(other_in_step)


async def test_the_output_is_applied_locally_at_once(
    cluster: LocalCluster, conversation: str
) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        _, call = await tool_call_reply(client, "client-tool:")
        # Without auto-continue: the result is stored, nothing runs after it.
        assert (
            await client.add_tool_output(call.tool_call_id, LOCATION, auto_continue=False) is None
        )
        part = tool_part(client.messages[-1], "getLocation")
        assert part["state"] == "output-available" and part["output"] == LOCATION
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert tool_part(history[-1], "getLocation")["state"] == "output-available"
        assert texts(history[-1]) == []
        # A second answer changes nothing: the first one wins.
        assert (
            await client.add_tool_output(call.tool_call_id, {"lat": 0}, auto_continue=False) is None
        )
        assert await fetch_history(cluster.urls[0], AGENT, conversation) == history


async def test_a_client_tool_error_does_not_continue(
    cluster: LocalCluster, conversation: str
) -> None:
    watched = Frames()
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation, on_frame=watched) as client:
        _, call = await tool_call_reply(client, "client-tool:")
        await client.add_tool_error(call.tool_call_id, "no GPS fix")
        part = tool_part(client.messages[-1], "getLocation")
        assert part["state"] == "output-error" and part["errorText"] == "no GPS fix"
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        stored = tool_part(history[-1], "getLocation")
        assert stored["state"] == "output-error" and stored["errorText"] == "no GPS fix"
        assert client.pending_tool_calls() == []

        # The next message is answered normally; a continuation, had one been scheduled,
        # would have streamed before it.
        after = await client.send("sure")
        async with asyncio.timeout(10):
            assert await after.text() == "Sure"
        assert not any(f.get("continuation") for f in watched.frames), watched.frames
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
        assert texts(history[1]) == []


@pytest.mark.parametrize(
    ("approved", "state", "text"),
    [
        (True, "output-available", "tool result: " + compact({"ok": True, **PAYMENT})),
        (False, "output-denied", "tool denied"),
    ],
)
async def test_approve_or_reject_a_tool_call(
    cluster: LocalCluster, conversation: str, approved: bool, state: str, text: str
) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        reply, call = await tool_call_reply(client, "approve:bob")
        assert call.tool_name == "processPayment" and call.input == PAYMENT
        assert call.state == "approval-requested" and call.needs_approval
        assert call.approval_id is not None

        continuation = await client.approve_tool(call.tool_call_id, approved)
        assert continuation is not None and continuation.continuation
        async with asyncio.timeout(20):
            assert await continuation.text() == text
        assert continuation.outcome == "completed"
        message = await continuation.message()
        assert message is not None and message["id"] == reply.message_id
        part = tool_part(message, "processPayment")
        assert part["state"] == state
        assert part["approval"]["approved"] is approved
        if approved:
            assert part["output"] == {"ok": True, **PAYMENT}
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["role"] for m in history] == ["user", "assistant"]
        assert tool_part(history[1], "processPayment")["state"] == state
        assert same(client.messages, history)
        assert client.pending_tool_calls() == []


async def test_a_reloaded_client_finds_and_answers_pending_calls(
    cluster: LocalCluster, conversation: str
) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        await tool_call_reply(client, "approve:ann")
        await tool_call_reply(client, "client-tool:")
        # Two calls wait: the approval of the first reply, the client tool of the second.
    async with ChatClient.connect(cluster.urls[1], AGENT, conversation) as reloaded:
        calls = reloaded.pending_tool_calls()
        assert [(c.tool_name, c.state) for c in calls] == [
            ("processPayment", "approval-requested"),
            ("getLocation", "input-available"),
        ]
        assert calls[0].message_id == reloaded.messages[1]["id"]
        assert calls[1].message_id == reloaded.messages[3]["id"]

        # The answer to the last message's call continues that message.
        continuation = await reloaded.add_tool_output(calls[1].tool_call_id, LOCATION)
        assert continuation is not None
        async with asyncio.timeout(20):
            assert await continuation.text() == "tool result: " + compact(LOCATION)
        assert [c.tool_call_id for c in reloaded.pending_tool_calls()] == [calls[0].tool_call_id]
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert len(history) == 4 and same(reloaded.messages, history)


async def test_an_answer_for_an_unknown_call_raises(
    cluster: LocalCluster, conversation: str
) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        with pytest.raises(ClientError) as raised:
            await client.add_tool_output("call_nope", 1)
        assert raised.value.code == "unknown_tool_call"
        with pytest.raises(ClientError) as raised:
            await client.approve_tool("call_nope", True)
        assert raised.value.code == "unknown_tool_call"
        # The chat still works.
        reply = await client.send("sure")
        async with asyncio.timeout(10):
            assert await reply.text() == "Sure"


async def test_on_tool_call_answers_client_tools(cluster: LocalCluster, conversation: str) -> None:
    seen: list[ToolCall] = []

    async def locate(call: ToolCall) -> object:
        seen.append(call)
        return LOCATION

    async with ChatClient.connect(
        cluster.urls[0], AGENT, conversation, on_tool_call=locate
    ) as client:
        reply = await client.send("client-tool:")
        async with asyncio.timeout(30):
            last = await reply.final()
        assert last is not reply and last.continuation
        assert await last.text() == "tool result: " + compact(LOCATION)
        assert [(c.tool_name, c.message_id) for c in seen] == [("getLocation", reply.message_id)]
        # A reply without tool calls is its own final reply.
        plain = await client.send("sure")
        async with asyncio.timeout(10):
            assert await plain.final() is plain
        assert len(seen) == 1
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert tool_part(history[1], "getLocation")["output"] == LOCATION
        assert texts(history[1]) == ["tool result: " + compact(LOCATION)]
        assert same(client.messages, history)


@pytest.mark.parametrize("outcome", ["raises", "declines"])
async def test_on_tool_call_errors_and_declines(
    cluster: LocalCluster, conversation: str, outcome: str
) -> None:
    async def locate(call: ToolCall) -> object:
        if outcome == "raises":
            raise RuntimeError("location permission denied")
        return None

    async with ChatClient.connect(
        cluster.urls[0], AGENT, conversation, on_tool_call=locate
    ) as client:
        reply = await client.send("client-tool:")
        async with asyncio.timeout(30):
            assert await reply.final() is reply
        part = tool_part(client.messages[-1], "getLocation")
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        stored = tool_part(history[-1], "getLocation")
        if outcome == "raises":
            assert part["state"] == stored["state"] == "output-error"
            assert stored["errorText"] == "location permission denied"
            assert client.pending_tool_calls() == []
        else:
            assert part["state"] == stored["state"] == "input-available"
            assert [c.tool_name for c in client.pending_tool_calls()] == ["getLocation"]


async def test_a_parallel_batch_continues_after_its_last_answer(
    cluster: LocalCluster, conversation: str
) -> None:
    agent = "parallel-tools-agent"
    async with ChatClient.connect(cluster.urls[0], agent, conversation) as client:
        reply = await client.send("two-calls")
        assert await ended(reply) == "completed"
        first, second = client.pending_tool_calls()
        assert first.message_id == second.message_id == reply.message_id
        # The server holds the continuation back until every call has its answer.
        async with asyncio.timeout(10):
            assert await client.add_tool_output(first.tool_call_id, {"n": 1}) is None
        assert client.pending_tool_calls() == [second]
        continuation = await client.add_tool_output(second.tool_call_id, {"n": 2})
        assert continuation is not None
        async with asyncio.timeout(20):
            assert await continuation.text() == 'tool result: [{"n":1},{"n":2}]'
        history = await fetch_history(cluster.urls[0], agent, conversation)
        assert [m["role"] for m in history] == ["user", "assistant"]
        outputs = [p.get("output") for p in history[1]["parts"] if p["type"] == "tool-getLocation"]
        assert outputs == [{"n": 1}, {"n": 2}]
        assert same(client.messages, history)


async def test_on_tool_call_answers_a_parallel_batch(
    cluster: LocalCluster, conversation: str
) -> None:
    agent = "parallel-tools-agent"
    answered: list[str] = []

    async def locate(call: ToolCall) -> object:
        answered.append(call.tool_call_id)
        if call.tool_call_id.endswith("_a"):
            raise ValueError("no fix for the first one")
        return {"n": 2}

    async with ChatClient.connect(
        cluster.urls[0], agent, conversation, on_tool_call=locate
    ) as client:
        reply = await client.send("two-calls")
        async with asyncio.timeout(30):
            last = await reply.final()
        # The error is sent first: the output then completes the batch and continues it.
        assert last is not reply and last.continuation and last.outcome == "completed"
        assert sorted(answered) == sorted(c["toolCallId"] for c in tool_parts(last))
        states = [p["state"] for p in tool_parts(last)]
        assert states == ["output-error", "output-available"]
        assert texts(await last.message() or {"parts": []})[-1].startswith("tool result: ")
        history = await fetch_history(cluster.urls[0], agent, conversation)
        assert same(client.messages, history)


def tool_parts(reply: Reply) -> list[Frame]:
    message = reply.snapshot()
    assert message is not None
    return [p for p in message["parts"] if p["type"] == "tool-getLocation"]


async def test_cli_asks_for_approval(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    question = f"approve processPayment {json.dumps(PAYMENT)}? [y/n] "
    code, out, err = await run_cli(
        "chat", "--url", url, "--name", conversation, stdin="approve:bob\nmaybe\ny\n"
    )
    assert (code, err) == (0, ""), err
    paid = "tool result: " + compact({"ok": True, **PAYMENT})
    assert out == f"you> {question}{question}{paid}\nyou> \n"

    code, out, err = await run_cli(
        "chat", "--url", url, "--name", conversation, stdin="approve:carl\nn\n"
    )
    assert (code, err) == (0, ""), err
    assert out == f"you> {question.replace('bob', 'carl')}tool denied\nyou> \n"
    history = await fetch_history(url, AGENT, conversation)
    states = [tool_part(m, "processPayment")["state"] for m in history if m["role"] == "assistant"]
    assert states == ["output-available", "output-denied"]

    # Without an answer, the call stays pending.
    code, out, err = await run_cli(
        "chat", "--url", url, "--name", conversation, "approve:dan", stdin=""
    )
    assert code == 0
    assert out == question.replace("bob", "dan") + "\n"
    assert err == "(the tool processPayment still waits for an approval)\n"
