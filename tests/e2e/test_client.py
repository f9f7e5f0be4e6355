"""The Python client and the `durachat` CLI against a real cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from durachat.client import ChatClient, Reply, fetch_history
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.ports import free_port
from support.cli import run_cli

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))

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
        """The first recorded frame matching `predicate`, waiting up to `timeout` seconds."""
        index = 0
        async with asyncio.timeout(timeout):
            while True:
                while index < len(self.frames):
                    index += 1
                    if predicate(self.frames[index - 1]):
                        return self.frames[index - 1]
                self._arrived.clear()
                await self._arrived.wait()


def deltas(chunks: list[Frame]) -> list[str]:
    return [c["delta"] for c in chunks if c.get("type") == "text-delta"]


async def collect(reply: Reply, *, timeout: float = 30.0) -> list[Frame]:
    """Every chunk of a reply, iterated to its end."""
    async with asyncio.timeout(timeout):
        return [chunk async for chunk in reply]


async def test_send_streams_and_matches_history(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    async with ChatClient.connect(url, AGENT, conversation) as client:
        assert client.messages == []
        reply = await client.send("hello world")
        chunks = await collect(reply)
        assert "".join(deltas(chunks)) == "echo: hello world"
        async with asyncio.timeout(5):
            assert await reply.text() == "echo: hello world"
            message = await reply.message()
        assert reply.outcome == "completed" and reply.error is None
        assert message is not None and message["role"] == "assistant"
        assert len(reply.request_id) == 8
        user = client.messages[0]
        assert len(user["id"]) == 16 and user["id"].isalnum()
        assert client.messages[-1] == message

        history = await fetch_history(url, AGENT, conversation)
        assert [m["role"] for m in history] == ["user", "assistant"]
        assert history[0] == user
        assert [m["id"] for m in client.messages] == [m["id"] for m in history]
        assert history[1]["id"] == message["id"]
        assert message["id"].startswith("assistant_")

        # A second turn carries the whole transcript.
        again = await client.send("sure")
        async with asyncio.timeout(10):
            assert await again.text() == "Sure"
        history = await fetch_history(url, AGENT, conversation)
        assert [m["id"] for m in client.messages] == [m["id"] for m in history]
        assert len(history) == 4

    # A new client starts from the persisted transcript.
    async with ChatClient.connect(cluster.urls[1], AGENT, conversation) as other:
        assert other.messages == history
        assert await other.history() == history


async def test_regenerate_replaces_the_last_answer(
    cluster: LocalCluster, conversation: str
) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        first = await client.send("regen me")
        async with asyncio.timeout(10):
            first_message = await first.message()
        assert first_message is not None
        user_id = client.messages[0]["id"]
        assert client.branch == "main"

        second = await client.regenerate()
        async with asyncio.timeout(10):
            second_message = await second.message()
        assert second.outcome == "completed"
        assert second_message is not None
        assert second_message["id"] != first_message["id"]
        assert await second.text() == "echo: regen me"
        # The server answered where the client is, as the reference does.
        assert client.branch == "main" and second.branch == "main"
        assert [m["id"] for m in client.messages] == [user_id, second_message["id"]]
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["id"] for m in history] == [user_id, second_message["id"]]
        assert await client.history() == history
        # The first answer is kept on a branch of its own.
        [kept] = [b for b in await client.branches() if b["name"].startswith("regenerate-")]
        old = await fetch_history(cluster.urls[0], AGENT, conversation, branch=kept["id"])
        assert [m["id"] for m in old] == [user_id, first_message["id"]]


async def test_cancel_aborts_a_running_reply(cluster: LocalCluster, conversation: str) -> None:
    watched = Frames()
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation, on_frame=watched) as client:
        reply = await client.send("slow")
        seen: list[str] = []
        async with asyncio.timeout(20):
            async for chunk in reply:
                if chunk.get("type") == "text-delta":
                    seen.append(chunk["delta"])
                    if len(seen) == 3:
                        assert await client.cancel() == reply.request_id
        assert reply.outcome == "aborted", watched.frames
        text = await reply.text()
        assert text == "".join(seen)
        assert text.startswith("s00 s01 s02 ") and len(text) < len(SLOW_TEXT)
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["role"] for m in history] == ["user", "assistant"]
        assert history[-1]["parts"][-1]["text"] == text
        assert client.messages[-1]["parts"][-1]["text"] == text


async def test_clear_empties_the_chat(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    watched = Frames()
    async with (
        ChatClient.connect(url, AGENT, conversation) as client,
        ChatClient.connect(cluster.urls[1], AGENT, conversation, on_frame=watched) as other,
    ):
        reply = await client.send("hi")
        async with asyncio.timeout(10):
            await reply.wait()
        await watched.wait_for(
            lambda f: f.get("type") == "cf_agent_chat_messages" and len(f["messages"]) == 2
        )
        assert len(other.messages) == 2

        await client.clear()
        assert client.messages == []
        await watched.wait_for(lambda f: f.get("type") == "cf_agent_chat_clear")
        assert other.messages == []
        assert await fetch_history(url, AGENT, conversation) == []

        again = await client.send("after clear")
        async with asyncio.timeout(10):
            assert await again.text() == "echo: after clear"
        history = await fetch_history(url, AGENT, conversation)
        assert [m["id"] for m in history] == [m["id"] for m in client.messages]
        assert len(history) == 2


async def test_error_reply(cluster: LocalCluster, conversation: str) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        reply = await client.send("an error please")
        chunks = await collect(reply)
        assert deltas(chunks) == ["partial "]
        assert reply.outcome == "error"
        assert reply.error is not None and reply.error.code == "stream_error"
        assert reply.error.message
        assert await reply.text() == "partial "

        # The chat still works.
        after = await client.send("sure")
        async with asyncio.timeout(10):
            assert await after.text() == "Sure"


async def test_server_error_frames_reach_the_operation(
    cluster: LocalCluster, conversation: str
) -> None:
    watched = Frames()
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation, on_frame=watched) as client:
        # A body field overriding `messages` makes the server reject the request.
        reply = await client.send("hi", body={"messages": "not a list"})
        async with asyncio.timeout(10):
            assert await reply.wait() == "error"
        assert reply.error is not None
        assert reply.error.message == "the request body needs a `messages` array"
        # The coded error frame follows the request's terminal frame.
        await watched.wait_for(lambda f: f.get("type") == "durachat_error")
        assert reply.error.code == "invalid_messages", watched.frames
        assert [e.code for e in client.errors] == ["invalid_messages"]


async def test_dropped_socket_reconnects_and_resumes_exactly_once(
    cluster: LocalCluster, conversation: str
) -> None:
    watched = Frames()
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation, on_frame=watched) as client:
        first_socket = client.websocket
        assert first_socket is not None
        reply = await client.send("please be slow")
        chunks: list[Frame] = []
        async with asyncio.timeout(40):
            async for chunk in reply:
                chunks.append(chunk)
                if len(deltas(chunks)) == 5:
                    # A network failure: no closing handshake.
                    first_socket.transport.abort()
        assert reply.outcome == "completed"
        assert deltas(chunks) == [f"s{i:02d} " for i in range(50)]
        assert await reply.text() == SLOW_TEXT
        # It went through the resume handshake on a new socket with the same _pk.
        assert client.websocket is not None and client.websocket is not first_socket
        assert any(f.get("replayComplete") for f in watched.frames)
        assert any(f.get("type") == "cf_agent_stream_resuming" for f in watched.frames)
        assert client.messages[-1]["parts"][-1]["text"] == SLOW_TEXT
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert history[-1]["parts"][-1]["text"] == SLOW_TEXT
        assert [m["id"] for m in history] == [m["id"] for m in client.messages]


async def test_a_reply_that_ends_while_disconnected_still_completes(
    cluster: LocalCluster, conversation: str
) -> None:
    watched = Frames()
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation, on_frame=watched) as client:
        socket = client.websocket
        assert socket is not None
        reply = await client.send("quick one")
        socket.transport.abort()
        async with asyncio.timeout(20):
            text = await reply.text()
        assert text == "echo: quick one", (reply.error, watched.frames)
        assert reply.outcome == "completed"
        assert "".join(deltas(reply.chunks)) == "echo: quick one"
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["id"] for m in history] == [m["id"] for m in client.messages]
        after = await client.send("sure")
        async with asyncio.timeout(10):
            assert await after.text() == "Sure"


async def test_a_new_client_resumes_a_running_reply(
    cluster: LocalCluster, conversation: str
) -> None:
    async with ChatClient.connect(cluster.urls[0], AGENT, conversation) as client:
        reply = await client.send("slow again")
        async with asyncio.timeout(20):
            async for chunk in reply:
                if chunk.get("type") == "text-delta":
                    break
        watched = Frames()
        async with ChatClient.connect(
            cluster.urls[1], AGENT, conversation, on_frame=watched
        ) as reloaded:
            async with asyncio.timeout(10):
                resumed = await reloaded.resume()
            assert resumed is not None
            assert resumed.request_id == reply.request_id and resumed.observed
            try:
                chunks = await collect(resumed, timeout=15)
            except TimeoutError:
                pytest.fail(f"no end: {watched.frames}")
            assert "".join(deltas(chunks)) == SLOW_TEXT
            assert resumed.outcome == "completed"
            async with asyncio.timeout(5):
                assert await reply.text() == SLOW_TEXT
            # Nothing runs any more.
            async with asyncio.timeout(10):
                assert await reloaded.resume() in (None, resumed)


async def test_a_second_client_observes_the_turn(cluster: LocalCluster, conversation: str) -> None:
    observed: asyncio.Queue[Reply] = asyncio.Queue()
    watched = Frames()
    async with (
        ChatClient.connect(cluster.urls[0], AGENT, conversation) as client,
        ChatClient.connect(
            cluster.urls[1], AGENT, conversation, on_reply=observed.put_nowait, on_frame=watched
        ) as other,
    ):
        reply = await client.send("one two three")
        async with asyncio.timeout(10):
            theirs = await observed.get()
        assert theirs.request_id == reply.request_id and theirs.observed
        chunks = await collect(theirs)
        assert "".join(deltas(chunks)) == "echo: one two three"
        assert chunks == reply.chunks
        assert theirs.outcome == "completed"
        await watched.wait_for(
            lambda f: f.get("type") == "cf_agent_chat_messages" and len(f["messages"]) == 2
        )
        assert other.messages == client.messages
        history = await fetch_history(cluster.urls[0], AGENT, conversation)
        assert [m["id"] for m in other.messages] == [m["id"] for m in history]


async def test_cli_one_shot(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    code, out, err = await run_cli("chat", "--url", url, "--name", conversation, "hello")
    assert (code, out, err) == (0, "echo: hello\n", "")

    code, out, err = await run_cli("history", "--url", url, "--name", conversation)
    assert (code, out, err) == (0, "you: hello\nassistant: echo: hello\n", "")

    code, out, err = await run_cli("chat", "--url", url, "--name", conversation, "an error")
    assert code == 1
    assert out == "partial \n"
    assert err.startswith("error: ") and "Traceback" not in err


async def test_cli_interactive(cluster: LocalCluster, conversation: str) -> None:
    url = cluster.urls[0]
    code, out, err = await run_cli(
        "chat", "--url", url, "--name", conversation, stdin="hello\n/regenerate\n/history\n/clear\n"
    )
    assert code == 0, err
    assert out == (
        "you> echo: hello\nyou> echo: hello\nyou> you: hello\nassistant: echo: hello\nyou> you> \n"
    )
    # The regenerate was answered where the CLI is (main), so /clear cleared the conversation.
    assert err.splitlines() == ["(conversation cleared)"]
    assert await fetch_history(url, AGENT, conversation) == []


async def test_cli_without_a_server() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = await run_cli("chat", "--url", url, "hello")
    assert code == 1 and out == ""
    assert err.startswith("error: cannot connect to ") and "Traceback" not in err
    assert "make run" in err
