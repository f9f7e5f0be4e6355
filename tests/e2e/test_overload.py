"""A shard that falls behind holds new turns back (load shedding, docs/operations.md#overload):
a chat request waits for it to catch up and starts once it has, or is refused with
`overloaded` when it stays behind past the request's wait. Here its writes fall behind: the
test holds the SQLite write lock the shards share, as a database that cannot keep up would."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.waiting import eventually
from support.wsclient import Frame, WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
LIMIT = 0.5
WAIT = 3.0
"""`DURACHAT_MAX_ADMISSION_WAIT`: how long a request waits for the shard to catch up."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("overload"),
        redis_url,
        gateways=1,
        shards=1,
        env={"DURACHAT_MAX_WRITE_BACKLOG": str(LIMIT), "DURACHAT_MAX_ADMISSION_WAIT": str(WAIT)},
    ) as running:
        yield running


async def _gauge(base: str, name: str) -> float:
    """The shard's gauge `name`."""
    async with httpx.AsyncClient(base_url=base) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


async def _write_backlog(base: str) -> float:
    """The shard's `durachat_shard_write_backlog_seconds`."""
    return await _gauge(base, "durachat_shard_write_backlog_seconds")


async def _shard_metrics(cluster: LocalCluster) -> str:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        (shard,) = (await http.get("/v1/cluster")).json()["shards"]
    return f"http://{shard['address']}"


@contextlib.asynccontextmanager
async def two_conversations(cluster: LocalCluster) -> AsyncIterator[tuple[WsClient, WsClient]]:
    """Two conversations on the shard, each with a turn done."""
    busy = await WsClient.connect(cluster.urls[0], AGENT, f"busy-{time.time_ns()}")
    other = await WsClient.connect(cluster.urls[0], AGENT, f"other-{time.time_ns()}")
    try:
        for client in (busy, other):
            first = chat_request([user_message("before")])
            await client.send(first)
            assert "outcome" not in await client.wait_done(first["id"])
        yield busy, other
    finally:
        await busy.close()
        await other.close()


@contextlib.asynccontextmanager
async def writes_behind(
    cluster: LocalCluster, metrics: str, busy: WsClient
) -> AsyncIterator[Frame]:
    """Hold the write lock while `busy` runs a turn, until the shard's writes are behind;
    yields that turn's request. The lock is released on the way out."""
    lock = os.open(cluster.var_dir / "durachat.db.wlock", os.O_RDWR | os.O_CREAT)
    try:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        try:
            # Its turn is accepted (nothing waited yet) and streams; its writes wait.
            waiting = chat_request([user_message("stored late")])
            await busy.send(waiting)

            async def behind() -> bool:
                return await _write_backlog(metrics) > LIMIT

            await eventually(behind)
            yield waiting
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    finally:
        os.close(lock)


async def test_a_shard_whose_writes_stay_behind_refuses_new_turns_then_takes_them_again(
    cluster: LocalCluster,
) -> None:
    metrics = await _shard_metrics(cluster)
    async with two_conversations(cluster) as (busy, other):
        async with writes_behind(cluster, metrics, busy) as waiting:
            # Held past the request's wait.
            refused = chat_request([user_message("while behind")])
            await other.send(refused)
            done = await other.wait_done(refused["id"])
            assert done.get("outcome") == "error"
            error = await other.wait_for(lambda f: f.get("type") == "durachat_error")
            assert error["code"] == "overloaded"

        # The accepted turn completes once its writes go through, and new turns run again.
        assert "outcome" not in await busy.wait_done(waiting["id"])

        async def accepted() -> bool:
            request = chat_request([user_message("after")])
            after = len(other.frames)
            await other.send(request)
            final = await other.wait_done(request["id"], after=after)
            return "outcome" not in final

        await eventually(accepted, timeout=20, interval=0.1)


async def test_a_request_arriving_while_the_shard_is_behind_starts_once_it_catches_up(
    cluster: LocalCluster,
) -> None:
    metrics = await _shard_metrics(cluster)
    async with two_conversations(cluster) as (busy, other):
        async with writes_behind(cluster, metrics, busy) as waiting:
            held = chat_request([user_message("while behind")])
            await other.send(held)

            async def parked() -> bool:
                return await _gauge(metrics, "durachat_shard_turns_waiting") == 1

            await eventually(parked)
        # The shard catches up within the request's wait: it runs, nothing is refused.
        assert "outcome" not in await other.wait_done(held["id"])
        assert not [f for f in other.frames if f.get("type") == "durachat_error"]
        assert "outcome" not in await busy.wait_done(waiting["id"])
        assert await _gauge(metrics, "durachat_shard_turns_waiting") == 0
