"""Crash recovery with real processes: a reply cut off by a SIGKILL continues on another shard.

Each fault here is real: the owning shard (found with `GET /v1/cluster/owner`) is killed with
SIGKILL, or the model really goes silent. Clients stay connected through a gateway the whole time
and must receive every chunk of the reply exactly once, under its original request id. The shards
export their OpenTelemetry spans to their logs (console exporter), where the tests find the
`chat:recovery:*` events.
"""

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

from durachat_infra.local.cluster import LocalCluster, Process
from support.cluster import running_cluster
from support.recovery_agents import COUNTER_DIR_ENV
from support.waiting import eventually
from support.wsclient import Frame, WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))


@pytest.fixture(scope="module")
def counter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("counters")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, counter_dir: Path
) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("recovery"),
        redis_url,
        shards=3,
        env={
            COUNTER_DIR_ENV: str(counter_dir),
            "OTEL_TRACES_EXPORTER": "console",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    ) as running:
        yield running


async def _owner(cluster: LocalCluster, agent: str, name: str) -> Process:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        owner = (await http.get("/v1/cluster/owner", params={"agent": agent, "name": name})).json()
    return next(p for p in cluster.processes if p.popen.pid == owner["pid"])


def _kill(cluster: LocalCluster, process: Process, *, wait: bool = True) -> None:
    """SIGKILL a shard and start a fresh one in its place (for the tests that follow); with
    `wait`, return once every gateway sees it."""
    os.kill(process.popen.pid, signal.SIGKILL)
    process.popen.wait(10)
    cluster.processes.remove(process)
    cluster.spawn_shard(f"{process.name}-r{time.time_ns() % 100_000}")
    if wait:
        cluster.wait_ready(60)


def _stream(client: WsClient, request_id: str) -> list[Frame]:
    """The chunk frames of a request the client received live, in arrival order."""
    return [
        f
        for f in client.frames
        if f.get("type") == "cf_agent_use_chat_response"
        and f.get("id") == request_id
        and not f.get("done")
        and not f.get("error")
        and f.get("body")
    ]


def _assert_exactly_once(client: WsClient, request_id: str) -> None:
    """Every chunk of the request arrived once, in order, with no gap in `seq`."""
    seqs = [f["seq"] for f in _stream(client, request_id)]
    assert seqs == list(range(len(seqs))), seqs
    bodies = [json.loads(f["body"])["type"] for f in _stream(client, request_id)]
    assert bodies.count("start") == 1
    assert bodies.count("finish") == 1


def _text(message: dict[str, object]) -> str:
    parts = message.get("parts")
    assert isinstance(parts, list)
    return "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")


def _events(cluster: LocalCluster) -> str:
    """Everything the shards logged, including their exported spans."""
    log_dir = Path(cluster.log_dir or ".")
    return "\n".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("shard*.log")))


async def _logged(cluster: LocalCluster, *needles: str) -> bool:
    text = _events(cluster)
    return all(n in text for n in needles)


async def test_sigkill_mid_reply_continues_on_another_shard(cluster: LocalCluster) -> None:
    name = f"kill-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    sent = user_message("a slow story")
    request = chat_request([sent])
    await client.send(request)
    rid = str(request["id"])
    await client.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 12, timeout=20)
    owner = await _owner(cluster, AGENT, name)
    _kill(cluster, owner)

    done = await client.wait_done(rid, timeout=45)
    assert "outcome" not in done and not done.get("error"), done
    # The recovered terminal names the sends it answers, as an undisturbed one does.
    assert done.get("messageIds") == [sent["id"]], done
    # Nothing lost, nothing repeated: the reply reads s00 ... s49 exactly once.
    assert client.text(rid) == SLOW_TEXT
    _assert_exactly_once(client, rid)
    recovering = client.of_type("cf_agent_chat_recovering")
    assert [f["recovering"] for f in recovering] == [True, False]
    assert {f["id"] for f in recovering} == {rid}
    assert (await _owner(cluster, AGENT, name)).popen.pid != owner.popen.pid

    history = await get_messages(cluster.urls[1], AGENT, name)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert _text(history[1]) == SLOW_TEXT
    await eventually(
        lambda: _logged(
            cluster,
            "chat:recovery:detected",
            "chat:recovery:attempt",
            "chat:recovery:scheduled",
            "chat:recovery:completed",
        ),
        timeout=10,
    )
    await client.close()


async def test_a_client_that_reconnects_during_recovery_resumes_the_reply(
    cluster: LocalCluster,
) -> None:
    name = f"rejoin-{time.time_ns()}"
    first = await WsClient.connect(cluster.urls[0], AGENT, name)
    request = chat_request([user_message("slow, and then I reconnect")])
    rid = str(request["id"])
    await first.send(request)
    await first.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 8, timeout=20)
    await first.close()
    # Not waiting for the replacement shard: the client comes back while the reply recovers.
    _kill(cluster, await _owner(cluster, AGENT, name), wait=False)

    # Back through the other gateway, with the resume handshake of the reference client.
    second = await WsClient.connect(cluster.urls[1], AGENT, name)
    offer = await second.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming")
    assert offer["id"] == rid
    await second.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    await second.wait_done(rid, timeout=45)
    assert second.text(rid) == SLOW_TEXT
    history = await get_messages(cluster.urls[0], AGENT, name)
    assert _text(history[1]) == SLOW_TEXT
    await second.close()
    cluster.wait_ready(60)


async def test_sigkill_during_a_server_tool_never_runs_it_twice(
    cluster: LocalCluster, counter_dir: Path
) -> None:
    name = f"tool-{time.time_ns()}"
    key = f"k{time.time_ns()}"
    agent = "counting-tool-agent"
    client = await WsClient.connect(cluster.urls[0], agent, name)
    request = chat_request([user_message(f"tool:{key}")])
    rid = str(request["id"])
    await client.send(request)
    counter = counter_dir / f"{key}.count"
    # The tool has started (and is sleeping) on the owner: kill it there.
    await eventually(lambda: _exists(counter), timeout=20)
    _kill(cluster, await _owner(cluster, agent, name))

    done = await client.wait_done(rid, timeout=45)
    assert not done.get("error"), done
    assert counter.read_text().splitlines() == ["run"]
    history = await get_messages(cluster.urls[0], agent, name)
    parts = history[-1]["parts"]
    call = next(p for p in parts if p.get("type") == "tool-getWeather")
    # The call was cut off mid-run: it is reported, not silently run again.
    assert call["state"] == "output-error", parts
    assert "interrupted" in call["errorText"]
    _assert_exactly_once(client, rid)
    await client.close()


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def test_a_stalled_model_stream_is_recovered(cluster: LocalCluster) -> None:
    name = f"stall-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], "stalling-agent", name)
    request = chat_request([user_message("please stall now")])
    rid = str(request["id"])
    await client.send(request)
    done = await client.wait_done(rid, timeout=30)
    assert "outcome" not in done, done
    assert client.text(rid) == SLOW_TEXT
    _assert_exactly_once(client, rid)
    history = await get_messages(cluster.urls[0], "stalling-agent", name)
    assert _text(history[-1]) == SLOW_TEXT
    await eventually(lambda: _logged(cluster, "chat:stream:stalled"), timeout=10)


async def test_recovery_gives_up_with_the_terminal_message(cluster: LocalCluster) -> None:
    name = f"hopeless-{time.time_ns()}"
    agent = "hopeless-agent"
    client = await WsClient.connect(cluster.urls[0], agent, name)
    request = chat_request([user_message("try")])
    rid = str(request["id"])
    await client.send(request)
    done = await client.wait_done(rid, timeout=30)
    assert done["error"] is True
    assert done["body"] == "Gave up on this one."
    # The partial reply is kept.
    history = await get_messages(cluster.urls[0], agent, name)
    assert _text(history[-1]) == "working "
    await eventually(
        lambda: _logged(cluster, "chat:recovery:exhausted", "max_attempts_exceeded"), timeout=10
    )
    # A client that connects later is told how the turn ended.
    late = await WsClient.connect(cluster.urls[1], agent, name)
    await late.send({"type": "cf_agent_stream_resume_request", "probeId": "p"})
    offer = await late.wait_for(lambda f: f.get("probeId") == "p")
    assert offer == {"type": "cf_agent_stream_resuming", "id": rid, "probeId": "p"}
    await late.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    replayed = await late.wait_done(rid)
    assert replayed["error"] is True and replayed["body"] == "Gave up on this one."
    await client.close()
    await late.close()


async def test_on_chat_recovery_can_drop_and_stop(cluster: LocalCluster) -> None:
    name = f"discard-{time.time_ns()}"
    agent = "discarding-agent"
    client = await WsClient.connect(cluster.urls[0], agent, name)
    request = chat_request([user_message("stall")])
    rid = str(request["id"])
    await client.send(request)
    done = await client.wait_done(rid, timeout=30)
    assert done.get("outcome") == "aborted"
    history = await get_messages(cluster.urls[0], agent, name)
    assert [m["role"] for m in history] == ["user"]
    await client.close()


async def test_a_resume_cursor_stays_valid_across_the_failover(cluster: LocalCluster) -> None:
    name = f"cursor-{time.time_ns()}"
    pk = f"tab-{time.time_ns()}"
    first = await WsClient.connect(cluster.urls[0], AGENT, name, pk=pk, cursor="")
    request = chat_request([user_message("slow, with a cursor")])
    rid = str(request["id"])
    await first.send(request)
    await first.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 10, timeout=20)
    await first.close()
    got = _stream(first, rid)
    cursor = str(got[-1]["cursor"])
    _kill(cluster, await _owner(cluster, AGENT, name))

    # Through the other gateway, after the turn moved to another shard: only what was missed.
    second = await WsClient.connect(cluster.urls[1], AGENT, name, pk=pk, cursor=cursor)
    await second.wait_done(rid, timeout=45)
    rest = _stream(second, rid)
    seqs = [f["seq"] for f in got + rest]
    assert seqs == list(range(len(seqs)))
    deltas = [json.loads(f["body"]) for f in got + rest]
    assert "".join(d["delta"] for d in deltas if d["type"] == "text-delta") == SLOW_TEXT
    assert all("cursor" in f for f in rest)
    await second.close()


async def test_an_expired_cursor_gets_a_clear_answer(cluster: LocalCluster) -> None:
    name = f"expired-{time.time_ns()}"
    client = await WsClient.connect(cluster.urls[0], AGENT, name, cursor="1-0")
    error = await client.wait_for(lambda f: f.get("type") == "durachat_error")
    assert error["code"] == "cursor_expired"
    # The connection stays usable.
    request = chat_request([user_message("hello")])
    await client.send(request)
    await client.wait_done(str(request["id"]))
    assert client.text(str(request["id"])) == "echo: hello"
    await client.close()


async def test_sigterm_hands_a_long_reply_to_the_next_owner_at_once(
    cluster: LocalCluster,
) -> None:
    from durachat_infra.cluster import owner_of
    from durachat_infra.keys import conversation_tag

    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        live = [s["id"] for s in (await http.get("/v1/cluster")).json()["shards"]]
    drainer = f"drainer-{time.time_ns() % 100_000}"
    name = next(
        n
        for n in (f"drain-{time.time_ns()}-{i}" for i in range(10_000))
        if owner_of(conversation_tag("default", AGENT, n), [*live, drainer]) == drainer
    )
    # A shard that gives running turns only half a second to finish when told to stop.
    process = cluster.spawn_shard(drainer, env={"DURACHAT_DRAIN_TIMEOUT": "0.5"})
    cluster.wait_ready(60)
    client = await WsClient.connect(cluster.urls[0], AGENT, name)
    request = chat_request([user_message("slow, then a rolling update")])
    rid = str(request["id"])
    await client.send(request)
    await client.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 8, timeout=20)
    assert (await _owner(cluster, AGENT, name)).popen.pid == process.popen.pid
    process.popen.send_signal(signal.SIGTERM)
    done = await client.wait_done(rid, timeout=45)
    assert "outcome" not in done, done
    assert client.text(rid) == SLOW_TEXT
    _assert_exactly_once(client, rid)
    assert process.popen.wait(20) == 0
    cluster.processes.remove(process)
    log_file = Path(cluster.log_dir or ".") / f"{drainer}.log"
    assert "handed over 1 of 1" in await asyncio.to_thread(log_file.read_text)
    history = await get_messages(cluster.urls[0], AGENT, name)
    assert _text(history[-1]) == SLOW_TEXT
    await client.close()


async def test_a_reply_on_a_branch_is_recovered_on_that_branch(cluster: LocalCluster) -> None:
    name = f"branch-kill-{time.time_ns()}"
    first = await WsClient.connect(cluster.urls[0], AGENT, name)
    opening = chat_request([user_message("hello")])
    await first.send(opening)
    await first.wait_done(str(opening["id"]))
    await first.close()
    history = await get_messages(cluster.urls[0], AGENT, name)
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=20) as http:
        created = await http.post(
            f"/agents/{AGENT}/{name}/branches", json={"name": "side", "at": history[1]["id"]}
        )
    assert created.status_code == 201, created.text
    client = await WsClient.connect(cluster.urls[0], AGENT, name, branch="side")
    request = chat_request([*history, user_message("slow on the side")])
    rid = str(request["id"])
    await client.send(request)
    await client.wait_for(lambda f: f.get("id") == rid and f.get("seq") == 10, timeout=20)
    _kill(cluster, await _owner(cluster, AGENT, name), wait=False)
    done = await client.wait_done(rid, timeout=45)
    assert "outcome" not in done, done
    assert client.text(rid) == SLOW_TEXT
    _assert_exactly_once(client, rid)
    side = await get_messages(cluster.urls[0], AGENT, name, branch="side")
    assert _text(side[-1]) == SLOW_TEXT
    # Main never saw it.
    assert await get_messages(cluster.urls[0], AGENT, name) == history
    await client.close()
    cluster.wait_ready(60)
