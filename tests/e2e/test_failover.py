"""Shards that stop, die or stall: conversations move and history survives; zombies can't write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from durachat_infra.cluster import cluster_auth
from durachat_infra.local.cluster import LocalCluster, Process
from support.cluster import running_cluster
from support.faults import stop_between_writes
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


def _text(message: dict[str, object]) -> str:
    parts = message.get("parts")
    assert isinstance(parts, list)
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("failover"),
        redis_url,
        shards=3,
        env={"DURACHAT_IDLE_EVICT_AFTER": "1.0"},
    ) as running:
        yield running


async def _owner(cluster: LocalCluster, name: str) -> Process:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        owner = (await http.get("/v1/cluster/owner", params={"agent": AGENT, "name": name})).json()
    return next(p for p in cluster.processes if p.popen.pid == owner["pid"])


async def _live_pids(cluster: LocalCluster) -> set[int]:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        shards = (await http.get("/v1/cluster")).json()["shards"]
    return {s["pid"] for s in shards}


async def _chat(client: WsClient, messages: list[dict[str, object]]) -> str:
    request = chat_request(messages)
    await client.send(request)
    done = await client.wait_done(request["id"], timeout=30)
    assert "outcome" not in done, done
    return client.text(request["id"])


def _replace(cluster: LocalCluster, dead: Process) -> None:
    cluster.processes.remove(dead)
    cluster.spawn_shard(f"{dead.name}-r{int(time.time() * 1000) % 100000}")
    cluster.wait_ready(60)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_idle_conversation_moves_when_its_shard_stops(
    cluster: LocalCluster, sig: signal.Signals
) -> None:
    name = f"move-{sig.name.lower()}-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    u1 = user_message("before the move")
    assert await _chat(client, [u1]) == "echo: before the move"
    owner = await _owner(cluster, name)
    owner.popen.send_signal(sig)
    owner.popen.wait(20)
    await eventually(lambda: _gone(cluster, owner.pid), timeout=10)
    history = await get_messages(cluster.urls[1], AGENT, name)
    u2 = user_message("after the move")
    # The other gateway, and a conversation re-activated from SQL on another shard.
    other = await WsClient.connect(cluster.urls[1], AGENT, name)
    assert await _chat(other, [*history, u2]) == "echo: after the move"
    new_owner = await _owner(cluster, name)
    assert new_owner.pid != owner.pid
    after = await get_messages(cluster.urls[0], AGENT, name)
    assert [m["role"] for m in after] == ["user", "assistant", "user", "assistant"]
    assert after[:2] == history
    await client.close()
    await other.close()
    _replace(cluster, owner)


async def _gone(cluster: LocalCluster, pid: int) -> bool:
    return pid not in await _live_pids(cluster)


async def test_a_stalled_former_owner_cannot_write(cluster: LocalCluster) -> None:
    name = f"zombie-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    u1 = user_message("slow one")
    r1 = chat_request([u1])
    await client.send(r1)
    await client.wait_for(lambda f: f.get("id") == r1["id"] and f.get("seq") == 3, timeout=20)
    owner = await _owner(cluster, name)
    assert cluster.database_url is not None
    await stop_between_writes(owner, cluster.database_url)
    try:
        await eventually(lambda: _gone(cluster, owner.pid), timeout=10)
        u2 = user_message("while the old owner sleeps")
        assert await _chat(client, [u1, u2]) == "echo: while the old owner sleeps"
        settled = len(client.frames)
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    log_file = Path(cluster.log_dir or ".") / f"{owner.name}.log"
    await eventually(lambda: _contains(log_file, "fenced"), timeout=15)
    # The zombie's turn wrote nothing: no more frames of its request, and the transcript holds
    # only what the new owner wrote.
    late = [f for f in client.frames[settled:] if f.get("id") == r1["id"]]
    assert late == []
    history = await get_messages(cluster.urls[0], AGENT, name)
    # The new owner recovered the interrupted reply first, then answered.
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]
    assert _text(history[1]) == SLOW_TEXT
    assert history[3]["parts"][-1]["text"] == "echo: while the old owner sleeps"
    await client.close()


async def _contains(path: Path, needle: str) -> bool:
    text = await asyncio.to_thread(path.read_text, errors="replace")
    return needle in text.lower()


async def _active(cluster: LocalCluster, pid: int) -> int:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        shards = (await http.get("/v1/cluster")).json()["shards"]
    return int(next(s["active_conversations"] for s in shards if s["pid"] == pid))


async def test_idle_conversations_are_evicted_and_reactivated_from_sql(
    cluster: LocalCluster,
) -> None:
    name = f"evict-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    u1 = user_message("remember me")
    assert await _chat(client, [u1]) == "echo: remember me"
    owner = await _owner(cluster, name)
    history = await get_messages(cluster.urls[0], AGENT, name)
    await eventually(lambda: _evicted(cluster, owner.pid), timeout=15)
    u2 = user_message("still there?")
    assert await _chat(client, [*history, u2]) == "echo: still there?"
    after = await get_messages(cluster.urls[0], AGENT, name)
    assert after[:2] == history and len(after) == 4
    await client.close()


async def _evicted(cluster: LocalCluster, pid: int) -> bool:
    return await _active(cluster, pid) == 0


async def test_a_shard_that_is_not_the_owner_redirects(cluster: LocalCluster) -> None:
    name = f"redirect-{time.time_ns()}"
    owner = await _owner(cluster, name)
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        shards = (await http.get("/v1/cluster")).json()["shards"]
    other = next(s for s in shards if s["pid"] != owner.pid)
    frame = {
        "tenant": "default",
        "agent": AGENT,
        "name": name,
        "connection": "direct",
        "frame": {"type": "cf_agent_chat_clear"},
    }
    # Signed as a gateway signs it: the internal API takes nothing else.
    async with httpx.AsyncClient(auth=cluster_auth(cluster.cluster_secret)) as http:
        response = await http.post(f"http://{other['address']}/internal/v1/frames", json=frame)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "not_owner"
    assert body["owner"] == next(s["id"] for s in shards if s["pid"] == owner.pid)


async def test_sigterm_mid_reply_lets_the_reply_finish(cluster: LocalCluster) -> None:
    name = f"drain-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    request = chat_request([user_message("slow reply, then a shutdown")])
    await client.send(request)
    await client.wait_for(lambda f: f.get("id") == request["id"] and f.get("seq") == 4, timeout=20)
    owner = await _owner(cluster, name)
    owner.popen.send_signal(signal.SIGTERM)
    # The reply is shorter than the drain timeout: it finishes on the draining shard.
    done = await client.wait_done(request["id"], timeout=15)
    assert "outcome" not in done
    assert client.text(request["id"]) == SLOW_TEXT
    owner.popen.wait(20)
    history = await get_messages(cluster.urls[0], AGENT, name)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert _text(history[1]) == SLOW_TEXT
    # Nobody is offered the ended stream as if it were still running.
    other = await WsClient.connect(cluster.urls[1], AGENT, name)
    await other.send({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    answer = await other.wait_for(lambda f: f.get("probeId") == "p1")
    assert answer["type"] == "cf_agent_stream_resume_none"
    await client.close()
    await other.close()
    _replace(cluster, owner)


async def test_a_joining_shard_does_not_cut_off_a_streaming_turn(cluster: LocalCluster) -> None:
    from durachat_infra.cluster import owner_of
    from durachat_infra.keys import conversation_tag

    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        live = [s["id"] for s in (await http.get("/v1/cluster")).json()["shards"]]
    joiner = f"joiner-{time.time_ns() % 100000}"
    # A conversation that the joining shard will own once it is up.
    name = next(
        n
        for n in (f"join-{i}" for i in range(10_000))
        if owner_of(conversation_tag("default", AGENT, n), [*live, joiner]) == joiner
    )
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    # Three slow replies queue up: about 15 s of streaming on the current owner.
    requests = [chat_request([user_message(f"slow {i} while a shard joins")]) for i in range(3)]
    for request in requests:
        await client.send(request)
    first = requests[0]["id"]
    await client.wait_for(lambda f: f.get("id") == first and f.get("seq") == 3, timeout=20)
    old_owner = await _owner(cluster, name)
    process = cluster.spawn_shard(joiner)
    cluster.wait_ready(60)
    new_owner = await _owner(cluster, name)
    assert new_owner.pid == process.pid != old_owner.pid
    # Frames of the running turn still reach the shard that holds it: cancel the one streaming.
    finished = {f["id"] for f in client.frames if f.get("done") is True}
    running = next((r["id"] for r in requests if r["id"] not in finished), None)
    assert running is not None, json.dumps([f for f in client.frames if f.get("done")])
    await client.send({"type": "cf_agent_chat_request_cancel", "id": running})
    done = await client.wait_done(running, timeout=15)
    assert done["outcome"] == "aborted"
    for request in requests:
        await client.wait_done(request["id"], timeout=30)
    # Once idle the conversation moves, and its history comes along.
    history = await get_messages(cluster.urls[0], AGENT, name)
    assert await _chat(client, [*history, user_message("after the join")]) == "echo: after the join"
    after = await get_messages(cluster.urls[0], AGENT, name)
    assert [m["role"] for m in after][-2:] == ["user", "assistant"]
    assert len(after) == 8
    await client.close()
