"""The AI SDK's HTTP chat transport through real processes (docs/client.md#the-ai-sdks-usechat):
the UI message stream over Server-Sent Events, the same conversation as the WebSocket, resume
from the start, stop, and a reply cut off by a SIGKILL that goes on in the same response. The
real `DefaultChatTransport` drives these routes in tests/compat (aisdk.mjs)."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster, Process
from support.cluster import running_cluster
from support.waiting import eventually
from support.wsclient import WsClient, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    """A cluster of this module's own: one test kills a shard."""
    with running_cluster(tmp_path_factory.mktemp("aisdk"), redis_url) as running:
        yield running


def body(name: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """What `DefaultChatTransport` posts."""
    return {"id": name, "messages": messages, "trigger": "submit-message", **extra}


async def events(lines: AsyncIterator[str], until: int | None = None) -> list[str]:
    """The next `data:` payloads of an event stream (`response.aiter_lines()`): the next
    `until` of them, or all that are left."""
    found: list[str] = []
    async for line in lines:
        if line.startswith("data: "):
            found.append(line.removeprefix("data: "))
            if until is not None and len(found) >= until:
                break
    return found


def text_of(payloads: list[str]) -> str:
    chunks = [json.loads(p) for p in payloads if p != "[DONE]"]
    return "".join(c.get("delta", "") for c in chunks if c.get("type") == "text-delta")


async def test_a_chat_streams_the_ui_message_stream_and_websocket_tabs_see_it(
    cluster: LocalCluster,
) -> None:
    name = f"sse-{uuid.uuid4().hex[:8]}"
    tab = await WsClient.connect(cluster.urls[1], AGENT, name)
    question = user_message("hello there")
    async with (
        httpx.AsyncClient(base_url=cluster.urls[0], timeout=30) as http,
        http.stream("POST", f"/v1/agents/{AGENT}/chat", json=body(name, [question])) as response,
    ):
        assert response.status_code == 200
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = await events(response.aiter_lines())
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert [c["type"] for c in chunks][:2] == ["start", "start-step"]
    assert chunks[-1]["type"] == "finish"
    assert text_of(payloads) == "echo: hello there"

    # The same conversation: the stored transcript, and a WebSocket tab that saw it live.
    history = await get_messages(cluster.urls[0], AGENT, name)
    assert [m["id"] for m in history] == [question["id"], chunks[0]["messageId"]]
    [request_id] = {f["id"] for f in tab.of_type("cf_agent_use_chat_response")}
    assert tab.text(request_id) == "echo: hello there"
    await tab.close()


async def test_errors_resume_of_nothing_and_a_stop(cluster: LocalCluster) -> None:
    name = f"sse-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=30) as http:
        unknown = await http.post("/v1/agents/no-such-agent/chat", json=body(name, []))
        assert (unknown.status_code, unknown.json()["code"]) == (404, "unknown_agent")
        invalid = await http.post(f"/v1/agents/{AGENT}/chat", json={"messages": []})
        assert (invalid.status_code, invalid.json()["code"]) == (400, "invalid_request")
        branch = await http.post(f"/v1/agents/{AGENT}/chat?branch=nope", json=body(name, []))
        assert (branch.status_code, branch.json()["code"]) == (404, "unknown_branch")
        nothing = await http.get(f"/v1/agents/{AGENT}/chat/{name}/stream")
        assert nothing.status_code == 204
        idle = await http.post(f"/v1/agents/{AGENT}/chat/{name}/stop")
        assert idle.json() == {"stopped": None}

        # A dropped response does not cancel; a resume replays from the start; a stop cancels.
        slow = body(name, [user_message("slow")])
        async with http.stream("POST", f"/v1/agents/{AGENT}/chat", json=slow) as response:
            early = await events(response.aiter_lines(), until=6)
        assert text_of(early)
        async with http.stream("GET", f"/v1/agents/{AGENT}/chat/{name}/stream") as resumed:
            assert resumed.status_code == 200
            lines = resumed.aiter_lines()
            replay = await events(lines, until=8)
            assert json.loads(replay[0])["type"] == "start"
            stopped = await http.post(f"/v1/agents/{AGENT}/chat/{name}/stop")
            assert isinstance(stopped.json()["stopped"], str)
            rest = await events(lines)
    whole = [*replay, *rest]
    assert whole[-1] == "[DONE]" and json.loads(whole[-2]) == {"type": "abort"}
    partial = text_of(whole)
    assert partial and SLOW_TEXT.startswith(partial) and partial != SLOW_TEXT

    async def stored() -> list[dict[str, Any]] | None:
        history = await get_messages(cluster.urls[0], AGENT, name)
        return history if len(history) == 2 else None

    history = await eventually(stored, timeout=10)
    assert history[1]["parts"][-1]["text"] == partial


async def _owner(cluster: LocalCluster, name: str) -> Process:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        owner = (await http.get("/v1/cluster/owner", params={"agent": AGENT, "name": name})).json()
    return next(p for p in cluster.processes if p.popen.pid == owner["pid"])


async def test_a_sigkill_mid_reply_goes_on_in_the_same_response(cluster: LocalCluster) -> None:
    name = f"sse-kill-{uuid.uuid4().hex[:8]}"
    async with (
        httpx.AsyncClient(base_url=cluster.urls[0], timeout=60) as http,
        http.stream(
            "POST", f"/v1/agents/{AGENT}/chat", json=body(name, [user_message("slow")])
        ) as response,
    ):
        lines = response.aiter_lines()
        before = await events(lines, until=12)
        owner = await _owner(cluster, name)
        os.kill(owner.popen.pid, signal.SIGKILL)
        owner.popen.wait(10)
        cluster.processes.remove(owner)
        cluster.spawn_shard(f"{owner.name}-r{time.time_ns() % 100_000}")
        after = await events(lines)
    payloads = [*before, *after]
    assert payloads[-1] == "[DONE]"
    # Nothing lost, nothing repeated.
    assert text_of(payloads) == SLOW_TEXT
    types = [json.loads(p)["type"] for p in payloads[:-1]]
    assert types.count("start") == 1 and types.count("finish") == 1
    assert (await _owner(cluster, name)).popen.pid != owner.popen.pid
    cluster.wait_ready(60)
