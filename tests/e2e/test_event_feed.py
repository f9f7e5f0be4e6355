"""The event feed with real processes (docs/observability.md#subscribing-to-events): an SSE
subscriber sees a conversation's turns, resumes after a reconnect with Last-Event-ID without
missing any, the WebSocket feed filters, and a subscriber sees the recovery events of a shard
killed with SIGKILL mid-reply, in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import websockets

from durachat.observability.feed import FeedEvent
from durachat_infra.local.cluster import LocalCluster, Process
from support.cli import DURACHAT, run_cli
from support.cluster import running_cluster
from support.feed import Collector
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
TURNS = ("chat:turn:started", "chat:turn:finished", "chat:turn:failed")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("events"), redis_url, shards=2) as running:
        yield running


async def _chat(base_url: str, name: str, text: str) -> str:
    client = await WsClient.connect(base_url, AGENT, name)
    try:
        request = chat_request([user_message(text)])
        await client.send(request)
        done = await client.wait_done(str(request["id"]), timeout=30)
        assert "outcome" not in done, done
        return str(request["id"])
    finally:
        await client.close()


def _finished(request_id: str) -> Callable[[list[FeedEvent]], bool]:
    def found(events: list[FeedEvent]) -> bool:
        return any(
            e.type == "chat:turn:finished" and e.data.get("requestId") == request_id for e in events
        )

    return found


async def test_a_subscriber_sees_the_turns_of_a_conversation(cluster: LocalCluster) -> None:
    name = f"feed-{time.time_ns()}"
    feed = await Collector.start(cluster.urls[1], types=["chat:turn:*"], name=name)
    try:
        request_id = await _chat(cluster.urls[0], name, "hello feed")
        await feed.wait_for(_finished(request_id))
        started, finished = feed.of("chat:turn:started"), feed.of("chat:turn:finished")
        assert [e.data["requestId"] for e in started] == [request_id]
        assert finished[0].data["outcome"] == "completed"
        event = finished[0]
        assert (event.tenant, event.agent, event.name) == ("default", AGENT, name)
        assert event.process.startswith("shard:") and event.time > 0 and event.id
        assert all(e.type.startswith("chat:turn:") for e in feed.events)
    finally:
        await feed.stop()


async def test_a_subscriber_that_reconnects_with_its_last_event_id_misses_nothing(
    cluster: LocalCluster,
) -> None:
    name = f"resume-{time.time_ns()}"
    feed = await Collector.start(cluster.urls[0], types=list(TURNS), name=name)
    first = await _chat(cluster.urls[0], name, "one")
    await feed.wait_for(_finished(first))
    await feed.stop()
    last = feed.events[-1].id
    assert last is not None and feed.client.last_event_id == last

    # While nobody listens: two more turns.
    missed = [await _chat(cluster.urls[1], name, text) for text in ("two", "three")]

    # Through the other gateway, resuming with the Last-Event-ID header.
    again = await Collector.start(cluster.urls[1], types=list(TURNS), name=name, last_event_id=last)
    try:
        await again.wait_for(_finished(missed[-1]))
        assert [(e.type, e.data["requestId"]) for e in again.events] == [
            ("chat:turn:started", missed[0]),
            ("chat:turn:finished", missed[0]),
            ("chat:turn:started", missed[1]),
            ("chat:turn:finished", missed[1]),
        ]
        ids = [e.id for e in feed.events + again.events]
        assert len(set(ids)) == len(ids)
    finally:
        await again.stop()

    # `?last_event_id=` does the same as the header, for raw SSE readers.
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=10) as http:
        params = {"types": "chat:turn:started", "name": name, "last_event_id": last}
        async with http.stream("GET", "/v1/events", params=params) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            data: list[dict[str, object]] = []
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    data.append(json.loads(line[6:]))
                if len(data) == 2:
                    break
    assert [d["data"]["requestId"] for d in data] == missed  # type: ignore[index]


async def test_tool_calls_branch_forks_and_connections_reach_the_feed(
    cluster: LocalCluster,
) -> None:
    name = f"kinds-{time.time_ns()}"
    feed = await Collector.start(cluster.urls[0], name=name)
    try:
        request_id = await _chat(cluster.urls[1], name, "tool:Paris")
        async with httpx.AsyncClient(base_url=cluster.urls[1], timeout=10) as http:
            created = await http.post(f"/agents/{AGENT}/{name}/branches", json={"name": "side"})
            assert created.status_code == 201, created.text

        def seen(events: list[FeedEvent]) -> bool:
            kinds = {e.type for e in events}
            return {"chat:branch:forked", "chat:connection:closed"} <= kinds

        await feed.wait_for(seen)
        calls = feed.of("tool:call")
        assert [(c.data["requestId"], c.data["toolName"]) for c in calls][:1] == [
            (request_id, "getWeather")
        ]
        forked = feed.of("chat:branch:forked")[0]
        assert forked.data["op"] == "create" and forked.data["created"]["name"] == "side"
        opened, closed = feed.of("chat:connection:opened"), feed.of("chat:connection:closed")
        assert [e.data["connection"] for e in opened] == [e.data["connection"] for e in closed]
        assert all(e.process.startswith("gateway:") for e in opened + closed)
        assert feed.of("message:request")[0].data["requestId"] == request_id
    finally:
        await feed.stop()


async def test_a_bad_cursor_is_refused(cluster: LocalCluster) -> None:
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=10) as http:
        response = await http.get("/v1/events", headers={"Last-Event-ID": "not-an-id"})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_cursor"


async def test_the_websocket_feed_filters(cluster: LocalCluster) -> None:
    name, other = f"ws-{time.time_ns()}", f"ws-other-{time.time_ns()}"
    url = cluster.urls[0].replace("http", "ws", 1)
    query = f"types=chat:turn:finished,chat:connection:*&name={name}"
    async with websockets.connect(f"{url}/v1/events/ws?{query}") as ws:
        await _chat(cluster.urls[1], other, "not for this subscriber")
        request_id = await _chat(cluster.urls[1], name, "for this one")
        frames: list[dict[str, object]] = []
        while not any(f.get("type") == "chat:connection:closed" for f in frames):
            frames.append(json.loads(await ws.recv(decode=True)))
    assert [f["type"] for f in frames] == [
        "chat:connection:opened",
        "chat:turn:finished",
        "chat:connection:closed",
    ]
    assert {f["name"] for f in frames} == {name}
    assert frames[1]["data"]["requestId"] == request_id  # type: ignore[index]
    assert all(isinstance(f["id"], str) for f in frames)

    # Resuming after the first frame brings the others again, in order.
    first = frames[0]["id"]
    async with websockets.connect(f"{url}/v1/events/ws?{query}&last_event_id={first}") as ws:
        again = [json.loads(await ws.recv(decode=True)) for _ in range(2)]
    assert again == frames[1:]


async def test_the_command_line_prints_the_feed_as_json_lines(cluster: LocalCluster) -> None:
    name = f"cli-{time.time_ns()}"
    follow = await asyncio.create_subprocess_exec(
        str(DURACHAT),
        "events",
        "--url",
        cluster.urls[0],
        "--follow",
        "--types",
        "chat:turn:*",
        "--name",
        name,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "DURACHAT_API_KEY": "", "DURACHAT_ADMIN_KEY": ""},
    )
    lines: list[dict[str, Any]] = []
    try:
        stdout = follow.stdout
        assert stdout is not None

        async def followed() -> bool:
            # The follower starts at the end of the feed once it is up: chat until it sees a turn.
            await _chat(cluster.urls[1], name, "hello command line")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(3):
                    while not lines or lines[-1]["type"] != "chat:turn:finished":
                        lines.append(json.loads(await stdout.readline()))
            return bool(lines) and lines[-1]["type"] == "chat:turn:finished"

        await eventually(followed, timeout=45, interval=0.1)
    finally:
        follow.kill()
        await follow.wait()
    assert {line["name"] for line in lines} == {name}
    assert lines[-2]["type"] == "chat:turn:started"
    assert lines[-2]["data"]["requestId"] == lines[-1]["data"]["requestId"]

    # Without --follow: what the feed holds, then stop.
    code, out, _ = await run_cli(
        "events", "--url", cluster.urls[1], "--types", "chat:turn:finished", "--name", name
    )
    assert code == 0
    held = [json.loads(line) for line in out.splitlines()]
    assert held and {e["type"] for e in held} == {"chat:turn:finished"}
    assert held[-1]["id"] == lines[-1]["id"]


async def _owner(cluster: LocalCluster, name: str) -> Process:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        owner = (await http.get("/v1/cluster/owner", params={"agent": AGENT, "name": name})).json()
    return next(p for p in cluster.processes if p.popen.pid == owner["pid"])


async def test_a_subscriber_sees_the_recovery_of_a_killed_shard_in_order(
    cluster: LocalCluster,
) -> None:
    name = f"kill-{time.time_ns()}"
    feed = await Collector.start(
        cluster.urls[1], types=["chat:recovery:*", "chat:turn:*"], name=name
    )
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    try:
        request = chat_request([user_message("a slow story")])
        await client.send(request)
        rid = str(request["id"])
        await client.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 8, timeout=20)
        owner = await _owner(cluster, name)
        os.kill(owner.popen.pid, signal.SIGKILL)
        owner.popen.wait(10)
        done = await client.wait_done(rid, timeout=45)
        assert not done.get("error"), done

        recovery = [
            "chat:recovery:detected",
            "chat:recovery:attempt",
            "chat:recovery:scheduled",
            "chat:recovery:completed",
        ]

        def recovered(events: list[FeedEvent]) -> bool:
            return "chat:recovery:completed" in [e.type for e in events]

        await feed.wait_for(recovered, timeout=30)
        seen = [e for e in feed.events if e.type.startswith("chat:recovery:")]
        assert [e.type for e in seen] == recovery
        assert {e.data["requestId"] for e in seen} == {rid}
        assert all(e.process.startswith("shard:") for e in seen)
        assert {e.process for e in seen}.isdisjoint({f"shard:{owner.name}"})
        # The turn started on the killed shard, and again (recovered) on the next owner.
        started = feed.of("chat:turn:started")
        assert [e.data["recovered"] for e in started] == [False, True]
        assert started[0].process != started[1].process
        ids = [e.id for e in feed.events]
        assert ids == sorted(ids, key=lambda i: tuple(int(p) for p in str(i).split("-")))
    finally:
        await client.close()
        await feed.stop()
        cluster.processes[:] = [p for p in cluster.processes if p.popen.poll() is None]
