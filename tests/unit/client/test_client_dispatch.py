"""The client's receive side against a scripted in-process server: which reply or request each
frame reaches, and the frames it skips."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection

from durachat.client import Reply
from support.scripted_server import Frame, ScriptedServer, scripted_chat
from support.waiting import eventually

pytestmark = pytest.mark.timeout(20)


async def _now(value: object) -> bool:
    return bool(value)


def response(request_id: str, seq: int | None, chunk: Frame | None, **extra: Any) -> Frame:
    frame: Frame = {
        "type": "cf_agent_use_chat_response",
        "id": request_id,
        "body": json.dumps(chunk) if chunk is not None else "",
        "done": chunk is None,
        **extra,
    }
    if seq is not None:
        frame["seq"] = seq
    return frame


async def push(server: ScriptedServer, *frames: Frame | str) -> None:
    """Send frames to the client from the server's side, outside any script."""
    for frame in frames:
        await server.sockets[-1].send(frame if isinstance(frame, str) else json.dumps(frame))


async def ignore(ws: ServerConnection, frame: Frame) -> None:
    """Answers nothing."""


async def test_a_server_error_belongs_to_the_last_request_still_waiting() -> None:
    async with scripted_chat(ignore) as (client, server):
        # Refused before anything streamed: the reply ends with the server's error.
        refused = await client.send("one")
        await push(server, {"type": "durachat_error", "code": "invalid_messages", "message": "x"})
        assert await refused.wait() == "error"
        assert refused.error is not None and refused.error.code == "invalid_messages"

        # A rejected request gets an error terminal frame first; the code then replaces the
        # generic error.
        rejected = await client.send("two")
        await push(
            server,
            response(rejected.request_id, None, None, body="bad", error=True, outcome="error"),
            {"type": "durachat_error", "code": "invalid_request", "message": "bad"},
        )
        await eventually(lambda: _now(len(client.errors) == 2))
        assert rejected.error is not None and rejected.error.code == "invalid_request"

        # A streaming reply is not the error's: it goes on.
        streaming = await client.send("three")
        await push(server, response(streaming.request_id, 0, {"type": "start"}))
        await eventually(lambda: _now(streaming.chunks))
        await push(server, {"type": "durachat_error", "code": "unavailable", "message": "x"})
        await eventually(lambda: _now(len(client.errors) == 3))
        assert not streaming.done

        # After a cancel, an error belongs to nothing.
        await client.cancel(streaming.request_id)
        await push(server, {"type": "durachat_error", "code": "unknown_frame", "message": "x"})
        await eventually(lambda: _now(len(client.errors) == 4))
        assert not streaming.done and client.replies == [streaming]
        assert [e.code for e in client.errors] == [
            "invalid_messages",
            "invalid_request",
            "unavailable",
            "unknown_frame",
        ]


async def test_frames_of_other_requests_are_observed_once() -> None:
    observed: list[Reply] = []
    async with scripted_chat(ignore, on_reply=observed.append) as (client, server):
        # A terminal or replayed frame of a request never seen starts nothing.
        await push(
            server,
            response("late", None, None),
            response("replayed", 0, {"type": "start"}, replay=True),
            response("other", 0, {"type": "start", "messageId": "a9"}),
        )
        await eventually(lambda: _now(observed))
        (other,) = observed
        assert other.request_id == "other" and other.observed
        assert client.replies == [other]

        await push(server, response("other", None, None))
        assert await other.wait() == "completed"
        # A late frame of a reply that ended starts no new one.
        await push(server, response("other", 1, {"type": "finish"}))
        marker = {"type": "cf_agent_chat_messages", "messages": []}
        await push(server, marker)
        await eventually(lambda: _now(client.messages == []))
        assert observed == [other] and client.replies == []


async def test_unreadable_frames_are_skipped_and_the_hook_sees_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[Frame] = []

    def hook(frame: Frame) -> None:
        seen.append(frame)
        if frame["type"] == "cf_agent_identity":
            raise RuntimeError("a broken hook")

    async with scripted_chat(ignore, on_frame=hook) as (client, server):
        identity = {"type": "cf_agent_identity", "name": "c", "agent": "chat-agent"}
        odd = {"type": "durachat_branch_switched", "branch": "57", "reason": ["not a reason"]}
        last = {"type": "cf_agent_chat_messages", "messages": [{"id": "u1", "role": "user"}]}
        with caplog.at_level(logging.ERROR, logger="durachat.client.dispatch"):
            await push(server, "not json", "[1, 2]", identity, odd, last)
            await eventually(lambda: _now(seen and seen[-1] == last))
        # Not JSON, or not an object: skipped, unseen. A frame the client cannot handle, or
        # whose hook fails, is logged; the frames after it are handled.
        assert seen == [identity, odd, last]
        assert "on_frame hook failed" in caplog.text
        assert client.messages == last["messages"]
