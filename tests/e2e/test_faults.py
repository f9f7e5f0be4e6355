"""Real faults against running clusters: a gateway killed mid-reply, Redis restarted with and
without its data, the database unavailable for a while, a former owner waking up.

Every fault is real: processes get SIGKILL or SIGSTOP, the Redis server (a dedicated one, so
the session's Redis is left alone) is killed and started again on its port, the SQLite file is
locked by another connection, the PostgreSQL database refuses connections. Waiting is polling
with deadlines.

The Redis-data-loss and database scenarios run once (module fixtures) and record what clients
saw; each test then checks one property.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from durachat_infra.keys import ConversationKeys, conversation_tag
from durachat_infra.local.cluster import LocalCluster, Process
from durachat_infra.local.redis_server import RedisServer
from support.cluster import running_cluster
from support.faults import (
    LogMark,
    postgres_refusing,
    postgres_table_locked,
    sql_rows,
    sqlite_path,
    sqlite_write_lock,
    stop_between_writes,
)
from support.postgres import PostgresServer
from support.waiting import eventually
from support.wsclient import Frame, WsClient, chat_request, get_messages, user_message

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))
FORWARD_TIMEOUT = 5.0
"""The gateways' forward timeout here (10 s by default): how long a frame may look for an
owner before the client is told the conversation is unavailable."""
ENV = {
    "DURACHAT_FORWARD_TIMEOUT": str(FORWARD_TIMEOUT),
    # The jobs worker's job runs are read from its metrics (arq's per-job lines are DEBUG).
    "DURACHAT_METRICS_PORT": "0",
}
OUTAGE = float(os.environ.get("DURACHAT_FAULT_OUTAGE", "8"))
"""Seconds Redis or the database stays unavailable in the outage scenarios: 8 in `make test`,
30 in `make chaos` (docs/operations.md#failure-modes)."""

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(int(180 + 4 * OUTAGE))]
OPEN_TURN = ("accepted", "running")


# ----------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of this module's own (persisting, AOF), to kill and start again."""
    server = RedisServer(tmp_path_factory.mktemp("faults-redis"), persist=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, own_redis: RedisServer
) -> Iterator[LocalCluster]:
    """2 gateways, 2 shards, jobs, on `own_redis` and SQLite."""
    with running_cluster(
        tmp_path_factory.mktemp("faults"), own_redis.url, shards=2, env=ENV
    ) as running:
        yield running


@pytest.fixture
async def redis(own_redis: RedisServer) -> AsyncIterator[Redis]:
    """A client of `own_redis`."""
    client = Redis.from_url(own_redis.url, decode_responses=True)
    yield client
    await client.aclose()


# ------------------------------------------------------------------------------------ helpers


def _keys(cluster: LocalCluster, name: str) -> ConversationKeys:
    return ConversationKeys(
        cluster.env["DURACHAT_KEY_PREFIX"], conversation_tag("default", AGENT, name)
    )


def _text(message: dict[str, Any]) -> str:
    return "".join(str(p.get("text", "")) for p in message["parts"] if p.get("type") == "text")


def _log(cluster: LocalCluster, process: Process) -> Path:
    return Path(cluster.log_dir or ".") / f"{process.name}.log"


def _named(cluster: LocalCluster, name: str) -> Process:
    return next(p for p in cluster.processes if p.name == name)


def _role(cluster: LocalCluster, role: str) -> list[Process]:
    return [p for p in cluster.processes if p.role == role]


def _exited(cluster: LocalCluster) -> list[Process]:
    return [p for p in cluster.processes if p.popen.poll() is not None]


async def _owner(cluster: LocalCluster, name: str) -> Process:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        owner = (await http.get("/v1/cluster/owner", params={"agent": AGENT, "name": name})).json()
    return next(p for p in cluster.processes if p.pid == owner["pid"])


async def _live_pids(url: str) -> set[int]:
    async with httpx.AsyncClient(base_url=url, timeout=2) as http:
        response = await http.get("/v1/cluster")
        response.raise_for_status()
        return {s["pid"] for s in response.json()["shards"]}


async def _serving(cluster: LocalCluster) -> bool:
    """Every gateway answers and lists every running shard."""
    want = {p.pid for p in _role(cluster, "shard") if p.popen.poll() is None}
    try:
        seen = [await _live_pids(url) for url in cluster.urls]
    except httpx.HTTPError:
        return False
    return all(want <= pids for pids in seen)


async def _ready(cluster: LocalCluster) -> None:
    await asyncio.to_thread(cluster.wait_ready, 60)


async def _orphan_scans(cluster: LocalCluster) -> float | None:
    """How many orphan scans the jobs worker has run (None while its listener is away: it
    is started again with each arq worker)."""
    jobs = _role(cluster, "jobs")[0]
    url = f"http://127.0.0.1:{cluster.metrics_ports[jobs.name]}/metrics"
    try:
        async with httpx.AsyncClient() as http:
            text = (await http.get(url, timeout=2)).text
    except httpx.HTTPError:
        return None
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "durachat_jobs_runs_total"
        and sample.labels.get("job") == "recover_orphans"
    )


async def _scans_so_far(cluster: LocalCluster) -> tuple[float] | None:
    """The orphan scans run so far, once the jobs worker answers (in a tuple, truthy for
    `eventually` even when none ran)."""
    runs = await _orphan_scans(cluster)
    return None if runs is None else (runs,)


async def _after_redis_came_back(cluster: LocalCluster, since: float) -> list[str]:
    """Once Redis is back (`since`: the orphan scans run by then): wait until the jobs worker
    runs a job again (it rides outages out, reconnecting with back-off), start again whatever
    exited anyway, as `durachat-local` or Kubernetes would, and return the names of the
    processes that had exited (none, these days)."""
    jobs = _role(cluster, "jobs")[0]

    async def settled() -> bool:
        if jobs.popen.poll() is not None:
            return True
        runs = await _orphan_scans(cluster)
        return runs is not None and runs > since

    await eventually(settled, timeout=30, interval=0.1)
    exited = [p.name for p in _exited(cluster)]
    cluster.restart_exited()
    await _ready(cluster)
    return exited


async def _new_chats_work(cluster: LocalCluster, prefix: str, deadline: float) -> None:
    """Every gateway serves a new chat before `deadline`, retried as a client told to retry
    would (each attempt in a conversation of its own)."""
    attempts = itertools.count()
    for url in cluster.urls:

        async def works(url: str = url) -> bool:
            await _chat(url, f"{prefix}-{next(attempts)}", "a new chat", timeout=20)
            return True

        await eventually(works, timeout=max(1.0, deadline - time.monotonic()), interval=0.2)


def _chunk_frames(client: WsClient, request_id: str) -> list[Frame]:
    return [f for f in client.frames if f.get("id") == request_id and isinstance(f.get("seq"), int)]


def _assert_exactly_once(client: WsClient, request_id: str, text: str) -> None:
    """The client got every chunk of the request once, in order, and the whole text."""
    seqs = [f["seq"] for f in _chunk_frames(client, request_id)]
    assert seqs == list(range(len(seqs))), seqs
    assert client.text(request_id) == text


async def _chat(url: str, name: str, text: str, *, timeout: float = 30) -> list[dict[str, Any]]:
    """One completed turn (continuing the stored history); returns the history after it."""
    history = await get_messages(url, AGENT, name)
    client = await WsClient.connect(url, AGENT, name)
    try:
        await client.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
        for offer in client.of_type("cf_agent_stream_resuming"):
            # As the reference client does: a connection offered a stream gets nothing else
            # until it acknowledges the offer.
            await client.send({"type": "cf_agent_stream_resume_ack", "id": offer["id"]})
        request = chat_request([*history, user_message(text)])
        await client.send(request)
        done = await client.wait_done(request["id"], timeout=timeout)
        assert "outcome" not in done and not done.get("error"), done
        assert client.text(request["id"]) == f"echo: {text}"
    finally:
        await client.close()
    after: list[dict[str, Any]] = await get_messages(url, AGENT, name)
    assert after[: len(history)] == history
    assert [m["role"] for m in after[len(history) :]] == ["user", "assistant"]
    return after


async def _start_slow(
    url: str, name: str, text: str, *, seq: int = 10, user: Frame | None = None
) -> tuple[WsClient, str]:
    """A client whose slow reply (s00 … s49, 100 ms apart) has streamed up to chunk `seq`."""
    client = await WsClient.connect(url, AGENT, name)
    request = chat_request([user or user_message(text)])
    await client.send(request)
    rid = str(request["id"])
    await client.wait_for(lambda f: f.get("id") == rid and f.get("seq") == seq, timeout=30)
    return client, rid


async def _terminal(client: WsClient, request_id: str, deadline: float) -> Frame | None:
    """The request's terminal frame if it arrives before `deadline` (monotonic), else None."""
    try:
        return await client.wait_done(request_id, timeout=max(0.1, deadline - time.monotonic()))
    except AssertionError:
        return None


async def _conversation(database_url: str, name: str) -> Any:
    rows = await sql_rows(
        database_url,
        "SELECT id, epoch FROM conversations WHERE tenant_id = 'default' AND agent = :agent "
        "AND name = :name",
        agent=AGENT,
        name=name,
    )
    return rows[0] if rows else None


async def _turns(database_url: str, conversation_id: int) -> list[Any]:
    return await sql_rows(
        database_url,
        "SELECT request_id, status, owner, epoch, message_id, request FROM turns "
        "WHERE conversation_id = :cid ORDER BY id",
        cid=conversation_id,
    )


async def _assert_clean(
    database_url: str, gateway: str, name: str, replies: set[str]
) -> list[dict[str, Any]]:
    """Nothing half-written in a conversation: no turn left open; every stored user message
    belongs to a recorded turn; every stored assistant message (on the path or off it) is a
    whole reply from `replies`; no message twice on the path. Returns the path."""
    path: list[dict[str, Any]] = await get_messages(gateway, AGENT, name)
    conversation = await _conversation(database_url, name)
    if conversation is None:
        assert path == []
        return path
    turns = await _turns(database_url, conversation.id)
    assert [t.request_id for t in turns if t.status in OPEN_TURN] == [], turns
    sent = {
        message_id
        for t in turns
        for message_id in (json.loads(t.request) if t.request else {}).get("userMessageIds", [])
    }
    rows = await sql_rows(
        database_url,
        "SELECT message_id, role, body FROM messages WHERE conversation_id = :cid ORDER BY seq",
        cid=conversation.id,
    )
    for row in rows:
        if row.role == "user":
            assert row.message_id in sent, f"user message {row.message_id} without its turn"
        elif row.role == "assistant":
            assert _text(json.loads(row.body)) in replies, row.body
    ids = [m["id"] for m in path]
    assert len(ids) == len(set(ids)), ids
    return path


# ------------------------------------------------------------------ 1. a gateway dies mid-reply


async def test_a_client_resumes_through_another_gateway_when_its_gateway_is_killed(
    cluster: LocalCluster,
) -> None:
    name = f"gwkill-{time.time_ns()}"
    first, rid = await _start_slow(cluster.urls[0], name, "slow, and then my gateway dies")
    gateway = _named(cluster, "gw-1")
    port = cluster.gateway_ports[0]
    os.kill(gateway.pid, signal.SIGKILL)
    gateway.popen.wait(10)
    cluster.processes.remove(gateway)
    await asyncio.wait_for(first.closed.wait(), 10)
    await first.close()
    delivered = len(_chunk_frames(first, rid))

    # The same client comes back through the other gateway: the reference resume handshake.
    second = await WsClient.connect(cluster.urls[1], AGENT, name, pk=first.pk)
    await second.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    mark = len(second.frames)
    await second.send({"type": "cf_agent_stream_resume_request"})
    offer = await second.wait_for(lambda f: f.get("type") == "cf_agent_stream_resuming", after=mark)
    assert offer["id"] == rid
    await second.send({"type": "cf_agent_stream_resume_ack", "id": rid})
    done = await second.wait_done(rid, timeout=30)
    assert "outcome" not in done and not done.get("error"), done

    # Replayed, then live, with nothing missing and nothing twice.
    _assert_exactly_once(second, rid, SLOW_TEXT)
    chunks = _chunk_frames(second, rid)
    replayed = [f for f in chunks if f.get("replay")]
    assert len(replayed) >= delivered
    assert chunks[: len(replayed)] == replayed
    assert len(replayed) < len(chunks), "no live chunk after the replay"
    history = await get_messages(cluster.urls[1], AGENT, name)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert _text(history[1]) == SLOW_TEXT
    await second.close()

    # A gateway in its place, on the same address.
    cluster.spawn_gateway("gw-1", port)
    await _ready(cluster)
    await _chat(cluster.urls[0], name, "and the gateway is back")


# ---------------------------------------------------- 4. a former owner wakes up (the gaps)


async def test_a_former_owner_that_wakes_up_appends_nothing_and_overwrites_nothing(
    cluster: LocalCluster, redis: Redis
) -> None:
    """test_failover covers the requester's frames of the zombie's request and the transcript;
    this checks the log itself (no entry at all), every client on both gateways, and the turn
    rows in SQL."""
    name = f"zombie-{time.time_ns()}"
    keys = _keys(cluster, name)
    database = cluster.database_url or ""
    watcher = await WsClient.connect(cluster.urls[1], AGENT, name)
    await watcher.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    u1 = user_message("slow one")
    client, r1 = await _start_slow(cluster.urls[0], name, "", seq=3, user=u1)
    owner = await _owner(cluster, name)
    log = LogMark(_log(cluster, owner))
    await stop_between_writes(owner, database)
    try:
        await eventually(lambda: _without(cluster, owner.pid), timeout=15)
        r2 = chat_request([u1, user_message("while the old owner sleeps")])
        await client.send(r2)
        done = await client.wait_done(r2["id"], timeout=30)
        assert "outcome" not in done, done
        await watcher.wait_done(r2["id"], timeout=10)
        await client.wait_done(r1, timeout=10)
        history = await get_messages(cluster.urls[0], AGENT, name)
        last = await redis.xrevrange(keys.log, count=1)
        length = await redis.xlen(keys.log)
        conversation = await _conversation(database, name)
        turns = await _turns(database, conversation.id)
        seen = (len(client.frames), len(watcher.frames))
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    # It finds out that it lost the conversation, and lets go of it.
    await eventually(
        lambda: _logged(log, f"released default/{AGENT}/{name}"), timeout=20, interval=0.1
    )
    assert await redis.xrevrange(keys.log, count=1) == last
    assert await redis.xlen(keys.log) == length
    assert client.frames[seen[0] :] == []
    assert watcher.frames[seen[1] :] == []
    assert await _turns(database, conversation.id) == turns
    assert [(t.request_id, t.status) for t in turns] == [(r1, "completed"), (r2["id"], "completed")]
    assert turns[1].owner != owner.name
    assert (await _conversation(database, name)).epoch == conversation.epoch
    assert await get_messages(cluster.urls[1], AGENT, name) == history
    assert [_text(m) for m in history if m["role"] == "assistant"] == [
        SLOW_TEXT,
        "echo: while the old owner sleeps",
    ]
    await client.close()
    await watcher.close()


async def _without(cluster: LocalCluster, pid: int) -> bool:
    return all(pid not in pids for pids in [await _live_pids(url) for url in cluster.urls])


async def _logged(mark: LogMark, needle: str) -> bool:
    return needle in await asyncio.to_thread(mark.since)


# ------------------------------------------------------- 2a. Redis restarts and keeps its data


async def test_a_redis_restart_that_keeps_the_data_is_invisible_to_clients(
    cluster: LocalCluster, own_redis: RedisServer
) -> None:
    stamp = time.time_ns()
    names = [f"keep-{i}-{stamp}" for i in range(3)]
    before = {n: await _chat(cluster.urls[i % 2], n, f"hello {i}") for i, n in enumerate(names)}
    client, rid = await _start_slow(cluster.urls[1], f"keep-inflight-{stamp}", "slow through it")
    reader = LogMark(_log(cluster, _named(cluster, "gw-2")))

    await asyncio.to_thread(own_redis.kill)
    await asyncio.to_thread(own_redis.start)
    (jobs,) = await eventually(lambda: _scans_so_far(cluster), timeout=30, interval=0.1)

    # The reply in flight goes on: the shard's log writer retries, the gateway reads again.
    done = await client.wait_done(rid, timeout=30)
    assert "outcome" not in done and not done.get("error"), done
    _assert_exactly_once(client, rid, SLOW_TEXT)
    await client.close()
    # The restart was felt: the gateway's blocking read lost its connection.
    assert await _logged(reader, "event log read failed")
    # Every process rides it out, the jobs worker included.
    assert await _after_redis_came_back(cluster, jobs) == []

    await _new_chats_work(cluster, f"keep-new-{stamp}", time.monotonic() + 30)
    for name, history in before.items():
        assert await get_messages(cluster.urls[0], AGENT, name) == history
        await _chat(cluster.urls[1], name, "still here")


# --------------------------------------------------------- 2b. Redis comes back without data


@dataclass
class Wiped:
    """What happened around a Redis that came back empty."""

    before: dict[str, list[dict[str, Any]]]
    seeded: str
    """A conversation whose SQL epoch is well above what the empty Redis counts from."""
    seeded_epoch: int
    fresh: str
    """A conversation activated once (SQL epoch 1) and left alone since."""
    fresh_epoch: int
    inflight: WsClient
    inflight_name: str
    inflight_request: str
    fault_at: float
    exited: list[str]
    """Processes that exited because of the outage (and were started again)."""
    marks: list[LogMark]
    """The shards' logs from just before the fault."""


@pytest.fixture(scope="module")
async def wiped(cluster: LocalCluster, own_redis: RedisServer) -> AsyncIterator[Wiped]:
    redis = Redis.from_url(own_redis.url, decode_responses=True)
    stamp = time.time_ns()
    database = cluster.database_url or ""
    # A conversation whose epoch counter is at 5 when it is first activated (it changed hands
    # a few times): its SQL epoch becomes 6.
    seeded = f"wipe-seeded-{stamp}"
    await redis.set(_keys(cluster, seeded).epoch, 5)
    before = {seeded: await _chat(cluster.urls[0], seeded, "seeded")}
    seeded_epoch = (await _conversation(database, seeded)).epoch
    assert seeded_epoch == 6
    for i, url in enumerate(cluster.urls):
        name = f"wipe-{i}-{stamp}"
        before[name] = await _chat(url, name, f"hello {i}")
    fresh = f"wipe-fresh-{stamp}"
    await _chat(cluster.urls[0], fresh, "only once")
    fresh_epoch = (await _conversation(database, fresh)).epoch
    inflight_name = f"wipe-inflight-{stamp}"
    inflight, rid = await _start_slow(cluster.urls[1], inflight_name, "slow into the void")
    shards = _role(cluster, "shard")
    marks = [LogMark(_log(cluster, p)) for p in shards]

    await asyncio.to_thread(own_redis.kill)
    fault_at = time.monotonic()
    # Down long enough for every shard to notice, then back on its port with nothing.
    for mark in marks:
        await eventually(functools.partial(_logged, mark, "heartbeat failed"), timeout=10)
    own_redis.wipe()
    await asyncio.to_thread(own_redis.start)
    (jobs,) = await eventually(lambda: _scans_so_far(cluster), timeout=30, interval=0.1)
    await eventually(lambda: _serving(cluster), timeout=20, interval=0.1)
    exited = await _after_redis_came_back(cluster, jobs)
    await redis.aclose()
    yield Wiped(
        before,
        seeded,
        seeded_epoch,
        fresh,
        fresh_epoch,
        inflight,
        inflight_name,
        rid,
        fault_at,
        exited,
        marks,
    )
    await inflight.close()


async def test_after_redis_lost_its_data_the_cluster_serves_again(
    cluster: LocalCluster, wiped: Wiped, redis: Redis
) -> None:
    # Every process rides it out, the jobs worker included.
    assert wiped.exited == []
    await _new_chats_work(cluster, f"wipe-new-{time.time_ns()}", wiped.fault_at + 40)
    # Nothing stored before is lost, and the old conversations go on.
    for name, history in wiped.before.items():
        assert await get_messages(cluster.urls[1], AGENT, name) == history
        await _chat(cluster.urls[1], name, "still here")
    # The epoch counter restarted from zero; the shard moved it past the stored epoch.
    database = cluster.database_url or ""
    epoch = (await _conversation(database, wiped.seeded)).epoch
    assert epoch > wiped.seeded_epoch
    assert int(await redis.get(_keys(cluster, wiped.seeded).epoch) or 0) >= epoch
    assert any("epoch counter behind the database" in m.since() for m in wiped.marks)


async def test_after_redis_lost_its_data_a_new_owner_gets_a_fresh_epoch(
    cluster: LocalCluster, wiped: Wiped
) -> None:
    await _chat(cluster.urls[0], wiped.fresh, "a new tenure")
    database = cluster.database_url or ""
    assert (await _conversation(database, wiped.fresh)).epoch > wiped.fresh_epoch


async def test_a_reply_in_flight_when_redis_lost_its_data_ends_for_its_client(
    cluster: LocalCluster, wiped: Wiped
) -> None:
    # Its owner took the lease back (nobody else had it) and went on: the client gets the
    # rest of the reply and its terminal frame, and the reply is stored whole.
    done = await _terminal(wiped.inflight, wiped.inflight_request, wiped.fault_at + 20)
    assert done is not None, "the client is still waiting for its reply"
    assert "outcome" not in done and not done.get("error"), done
    chunks = _chunk_frames(wiped.inflight, wiped.inflight_request)
    seqs = [f["seq"] for f in chunks]
    # In order and never twice; entries Redis had taken but no gateway had read yet when it
    # died are gone with its data.
    assert seqs == sorted(set(seqs)), seqs
    assert any("took back the lease" in m.since() for m in wiped.marks)
    history = await get_messages(cluster.urls[0], AGENT, wiped.inflight_name)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert _text(history[1]) == SLOW_TEXT


async def test_a_reply_in_flight_when_redis_lost_its_data_leaves_no_garbage(
    cluster: LocalCluster, wiped: Wiped
) -> None:
    database = cluster.database_url or ""
    # The cut reply is kept as far as it got (as for an aborted turn), or whole if the turn
    # was retried; once either way, and the turn is not left open.
    partials = {SLOW_TEXT[: 4 * i] for i in range(51)}
    path = await eventually(
        lambda: _assert_clean(database, cluster.urls[0], wiped.inflight_name, partials),
        timeout=30,
        interval=0.2,
    )
    assert [m["role"] for m in path] in (["user"], ["user", "assistant"])


# ------------------------------------------------------------- 2c. Redis away for a while


@dataclass
class RedisAway:
    """What happened while Redis was down for `OUTAGE` seconds (then back with its data)."""

    before: dict[str, list[dict[str, Any]]]
    inflight: WsClient
    inflight_name: str
    inflight_request: str
    new_done: Frame | None
    """The terminal frame of a new chat sent during the outage, if it connected."""
    new_errors: list[str]
    """The `durachat_error` codes its client got."""
    new_refused: str | None
    """Why the new chat's connection failed, if it did."""
    new_after: float
    exited_during: list[str]
    exited: list[str]
    back_at: float


@pytest.fixture(scope="module")
async def redis_away(cluster: LocalCluster, own_redis: RedisServer) -> AsyncIterator[RedisAway]:
    stamp = time.time_ns()
    before = {f"away-{stamp}": await _chat(cluster.urls[0], f"away-{stamp}", "before")}
    inflight_name = f"away-inflight-{stamp}"
    inflight, rid = await _start_slow(cluster.urls[1], inflight_name, "slow through it", seq=5)

    await asyncio.to_thread(own_redis.kill)
    down_at = time.monotonic()
    new_done: Frame | None = None
    new_errors: list[str] = []
    new_refused: str | None = None
    sent = time.monotonic()
    try:
        client = await asyncio.wait_for(
            WsClient.connect(cluster.urls[0], AGENT, f"away-new-{stamp}"), 2 * FORWARD_TIMEOUT
        )
        request = chat_request([user_message("while Redis is away")])
        sent = time.monotonic()
        with contextlib.suppress(websockets.ConnectionClosed):
            await client.send(request)
        new_done = await _terminal(client, request["id"], sent + 2 * FORWARD_TIMEOUT + 10)
        new_errors = [str(e.get("code")) for e in client.of_type("durachat_error")]
        await client.close()
    except Exception as exc:  # any refusal is an answer: the test judges it
        new_refused = repr(exc)
    new_after = time.monotonic() - sent
    await asyncio.sleep(max(0.0, down_at + OUTAGE - time.monotonic()))
    exited_during = [p.name for p in _exited(cluster)]
    await asyncio.to_thread(own_redis.start)
    back_at = time.monotonic()
    (jobs,) = await eventually(lambda: _scans_so_far(cluster), timeout=30, interval=0.1)
    exited = await _after_redis_came_back(cluster, jobs)
    yield RedisAway(
        before,
        inflight,
        inflight_name,
        rid,
        new_done,
        new_errors,
        new_refused,
        new_after,
        exited_during,
        exited,
        back_at,
    )
    await inflight.close()


async def test_every_process_stays_up_while_redis_is_away(redis_away: RedisAway) -> None:
    assert redis_away.exited_during == []
    assert redis_away.exited == []


async def test_a_new_chat_while_redis_is_away_gets_a_clear_answer(redis_away: RedisAway) -> None:
    assert redis_away.new_refused is None, redis_away.new_refused
    done = redis_away.new_done
    if done is None:
        # The gateway could not follow the conversation's log: it said so and closed the socket
        # ("try again later").
        assert redis_away.new_errors == ["unavailable"]
        return
    assert done.get("error") is True and done.get("outcome") == "error", done
    assert redis_away.new_after < 2 * FORWARD_TIMEOUT + 10


async def test_a_reply_in_flight_while_redis_is_away_arrives_whole(
    cluster: LocalCluster, redis_away: RedisAway
) -> None:
    client, rid = redis_away.inflight, redis_away.inflight_request
    done = await _terminal(client, rid, redis_away.back_at + 30)
    assert done is not None, "the client is still waiting for its reply"
    assert "outcome" not in done and not done.get("error"), done
    _assert_exactly_once(client, rid, SLOW_TEXT)
    history = await get_messages(cluster.urls[0], AGENT, redis_away.inflight_name)
    assert [(m["role"], _text(m)) for m in history][1:] == [("assistant", SLOW_TEXT)]


async def test_service_resumes_by_itself_when_redis_is_back(
    cluster: LocalCluster, redis_away: RedisAway
) -> None:
    await _new_chats_work(cluster, f"away-new-{time.time_ns()}", redis_away.back_at + 30)
    for name, history in redis_away.before.items():
        assert await get_messages(cluster.urls[1], AGENT, name) == history
        await _chat(cluster.urls[1], name, "still here")


# ----------------------------------------------------------- 3a. SQLite locked for a while


@dataclass
class Outage:
    """What clients saw while the database was unavailable."""

    started: float
    ended: float
    history: list[dict[str, Any]]
    """The stored history of `active` before the outage."""
    active: str
    active_client: WsClient
    active_request: str
    active_done: Frame | None
    read_status: int
    read_body: Any
    new_name: str
    new_client: WsClient
    new_request: str
    new_done: Frame | None
    new_done_after: float
    inflight: str
    inflight_client: WsClient
    inflight_request: str
    inflight_done: Frame | None

    async def close(self) -> None:
        for client in (self.active_client, self.new_client, self.inflight_client):
            await client.close()


async def _during_outage(
    cluster: LocalCluster,
    outage: Any,
    *,
    stamp: int,
    active_text: str,
    hold: float,
) -> Outage:
    """Run the database scenario: an active conversation, a reply in flight, then the outage
    (`outage` is the async context manager that makes the database unavailable, held about
    `hold` seconds); clients read, send and open a new conversation meanwhile."""
    url = cluster.urls[0]
    active = f"db-active-{stamp}"
    history = await _chat(url, active, "before the outage")
    inflight = f"db-inflight-{stamp}"
    inflight_client, inflight_request = await _start_slow(url, inflight, "slow through it")
    active_client = await WsClient.connect(url, AGENT, active)
    async with outage:
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as http:
            read = await http.get(f"{url}/agents/{AGENT}/{active}/get-messages")
        request = chat_request([*history, user_message(active_text)])
        await active_client.send(request)
        new_name = f"db-new-{stamp}"
        new_client = await WsClient.connect(url, AGENT, new_name)
        new_request = chat_request([user_message(NEW_CHAT)])
        sent = time.monotonic()
        await new_client.send(new_request)
        new_done = await _terminal(new_client, new_request["id"], sent + 2 * FORWARD_TIMEOUT + 15)
        new_done_after = time.monotonic() - sent
        active_done = await _terminal(active_client, request["id"], started + hold)
        inflight_done = await _terminal(inflight_client, inflight_request, started + hold)
    return Outage(
        started=started,
        ended=time.monotonic(),
        history=history,
        active=active,
        active_client=active_client,
        active_request=request["id"],
        active_done=active_done,
        read_status=read.status_code,
        read_body=read.json(),
        new_name=new_name,
        new_client=new_client,
        new_request=new_request["id"],
        new_done=new_done,
        new_done_after=new_done_after,
        inflight=inflight,
        inflight_client=inflight_client,
        inflight_request=inflight_request,
        inflight_done=inflight_done,
    )


NEW_CHAT = "a new chat during the outage"

SQLITE_HOLD = max(15.0, OUTAGE)
"""Seconds the SQLite lock is held: well past the store's 5 s busy timeout."""


@pytest.fixture(scope="module")
async def sqlite_locked(cluster: LocalCluster) -> AsyncIterator[Outage]:
    lock = sqlite_write_lock(sqlite_path(cluster.database_url or ""))
    outage = await _during_outage(
        cluster, lock, stamp=time.time_ns(), active_text="while it is locked", hold=SQLITE_HOLD
    )
    yield outage
    await outage.close()


def _assert_unavailable(outage: Outage) -> None:
    """The client of a new conversation was told, in time, that it is unavailable."""
    done = outage.new_done
    assert done is not None, "no answer to a new chat during the outage"
    assert done.get("error") is True and done.get("outcome") == "error", done
    assert outage.new_done_after < 2 * FORWARD_TIMEOUT + 15
    errors = outage.new_client.of_type("durachat_error")
    assert [e["code"] for e in errors] == ["unavailable"], errors


async def _assert_resumed(cluster: LocalCluster, outage: Outage, replies: set[str]) -> None:
    """Service comes back by itself: new chats, the old conversations, the reply that was in
    flight (recovered), and nothing half-written anywhere."""
    stamp = time.time_ns()
    deadline = outage.ended + 30
    for i, url in enumerate(cluster.urls):
        await _chat(url, f"db-after-{i}-{stamp}", "after the outage", timeout=30)
    history = await _chat(cluster.urls[-1], outage.active, "after the outage")
    # The turn refused during the outage left nothing: the history went on from before it.
    assert history[: len(outage.history)] == outage.history
    assert len(history) == len(outage.history) + 2
    # The reply in flight is finished (recovered once the database is back) and stored once.
    # Its client may have been told of an error first (the reply could not be stored then);
    # recovery continues the same request, and the client ends up with the whole reply once.
    client, rid = outage.inflight_client, outage.inflight_request
    await client.wait_for(
        lambda f: (
            f.get("id") == rid
            and f.get("done") is True
            and not f.get("error")
            and "outcome" not in f
        ),
        timeout=max(0.1, deadline - time.monotonic()),
    )
    _assert_exactly_once(client, rid, SLOW_TEXT)
    database = cluster.database_url or ""
    everything = {
        *replies,
        SLOW_TEXT,
        "echo: before the outage",
        "echo: after the outage",
        f"echo: {NEW_CHAT}",
    }

    async def settled() -> list[dict[str, Any]]:
        for name in (outage.active, outage.new_name):
            await _assert_clean(database, cluster.urls[0], name, everything)
        return await _assert_clean(database, cluster.urls[0], outage.inflight, {SLOW_TEXT})

    path = await eventually(settled, timeout=max(1.0, deadline - time.monotonic()), interval=0.2)
    assert [(m["role"], _text(m)) for m in path][1:] == [("assistant", SLOW_TEXT)]
    # The new chat its client was told had failed may still have run once the database was back
    # (see test_a_chat_reported_unavailable_does_not_run_later); if so, whole and once.
    new = await get_messages(cluster.urls[0], AGENT, outage.new_name)
    assert [m["role"] for m in new] in ([], ["user", "assistant"]), new


async def test_reads_go_on_while_sqlite_is_locked(sqlite_locked: Outage) -> None:
    assert sqlite_locked.read_status == 200
    assert sqlite_locked.read_body == sqlite_locked.history


async def test_a_new_chat_while_sqlite_is_locked_is_told_it_is_unavailable(
    sqlite_locked: Outage,
) -> None:
    _assert_unavailable(sqlite_locked)


async def test_a_chat_in_an_active_conversation_while_sqlite_is_locked_ends(
    sqlite_locked: Outage,
) -> None:
    done = sqlite_locked.active_done
    assert done is not None, "the client is still waiting for its reply"
    assert done.get("error") or done.get("outcome") in ("error", "aborted"), done


async def test_service_resumes_by_itself_when_sqlite_is_unlocked(
    cluster: LocalCluster, sqlite_locked: Outage
) -> None:
    await _assert_resumed(cluster, sqlite_locked, {"echo: while it is locked"})


# ---------------------------------------------- 3b. PostgreSQL refuses connections for a while


@pytest.fixture(scope="module")
def pg_cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, postgres_server: PostgresServer
) -> Iterator[tuple[LocalCluster, PostgresServer, str]]:
    """1 gateway, 1 shard, jobs, on a PostgreSQL database of its own (and the session Redis)."""
    database = asyncio.run(postgres_server.create_database(prefix="durachat_faults"))
    try:
        with running_cluster(
            tmp_path_factory.mktemp("faults-pg"),
            redis_url,
            gateways=1,
            shards=1,
            database_url=postgres_server.url(database),
            env=ENV,
        ) as running:
            yield running, postgres_server, database
    finally:
        asyncio.run(postgres_server.drop_database(database))


PG_HOLD = max(10.0, OUTAGE)


@pytest.fixture(scope="module")
async def postgres_down(
    pg_cluster: tuple[LocalCluster, PostgresServer, str],
) -> AsyncIterator[Outage]:
    cluster, server, database = pg_cluster
    outage = await _during_outage(
        cluster,
        postgres_refusing(server, database),
        stamp=time.time_ns(),
        # Slow, so that the write failure surely comes while it streams.
        active_text="slow while the database is down",
        hold=PG_HOLD,
    )
    yield outage
    await outage.close()


@pytest.mark.postgres
async def test_reads_answer_503_while_postgres_is_down(postgres_down: Outage) -> None:
    assert postgres_down.read_status == 503
    assert postgres_down.read_body["code"] == "database_unavailable"


@pytest.mark.postgres
async def test_a_new_chat_while_postgres_is_down_is_told_it_is_unavailable(
    postgres_down: Outage,
) -> None:
    _assert_unavailable(postgres_down)


@pytest.mark.postgres
async def test_a_chat_in_an_active_conversation_while_postgres_is_down_ends(
    postgres_down: Outage,
) -> None:
    done = postgres_down.active_done
    assert done is not None, "the client is still waiting for its reply"
    assert done.get("outcome") in ("error", "aborted"), done
    # The reply in flight when it went down ends too, as an error: it could not be stored.
    done = postgres_down.inflight_done
    assert done is not None and done.get("outcome") == "error", done
    errors = [
        f
        for f in postgres_down.inflight_client.frames
        if f.get("id") == postgres_down.inflight_request and f.get("error") is True
    ]
    assert errors, "no error frame before the terminal frame"


@pytest.mark.postgres
async def test_a_chat_refused_for_lack_of_database_is_reported_as_an_error(
    postgres_down: Outage,
) -> None:
    done = postgres_down.active_done
    assert done is not None
    assert done.get("error") is True or done.get("outcome") == "error", done


@pytest.mark.postgres
async def test_service_resumes_by_itself_when_postgres_is_back(
    pg_cluster: tuple[LocalCluster, PostgresServer, str], postgres_down: Outage
) -> None:
    await _assert_resumed(pg_cluster[0], postgres_down, set())


@pytest.mark.postgres
async def test_a_reply_that_streamed_to_the_end_is_stored_as_it_streamed(
    pg_cluster: tuple[LocalCluster, PostgresServer, str], postgres_down: Outage
) -> None:
    url = pg_cluster[0].urls[0]

    async def reply() -> dict[str, Any] | None:
        path = await get_messages(url, AGENT, postgres_down.inflight)
        return path[-1] if path and _text(path[-1]) == SLOW_TEXT else None

    stored = await eventually(reply, timeout=30, interval=0.2)
    assert stored["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": SLOW_TEXT, "state": "done"},
    ]


@pytest.mark.postgres
async def test_a_chat_reported_unavailable_does_not_run_later(
    pg_cluster: tuple[LocalCluster, PostgresServer, str],
) -> None:
    cluster, server, database = pg_cluster
    url = cluster.urls[0]
    name = f"db-hang-{time.time_ns()}"
    client = await WsClient.connect(url, AGENT, name)
    request = chat_request([user_message("while the database hangs")])
    rid = request["id"]
    # A database that hangs instead of refusing: queries on `conversations` wait.
    async with postgres_table_locked(server, database, "conversations"):
        await client.send(request)
        done = await client.wait_done(rid, timeout=2 * FORWARD_TIMEOUT + 10)
        assert done.get("error") is True and done.get("outcome") == "error", done
        told = len(client.frames)
    # Told it failed, the request must not run once the database answers again.
    try:
        late = await client.wait_for(
            lambda f: f.get("id") == rid and "seq" in f, timeout=8, after=told
        )
    except AssertionError:
        late = None
    await client.close()
    assert late is None, "the request reported as failed ran after all"
    assert await get_messages(url, AGENT, name) == []
