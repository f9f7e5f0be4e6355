"""A shard whose event loop falls behind refuses new turns with `overloaded` (load shedding,
docs/operations.md#overload), and takes them again once it is on time."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.cluster import running_cluster
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

AGENT = "chat-agent"
LIMIT = 0.3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("overload"),
        redis_url,
        gateways=1,
        shards=1,
        env={"DURACHAT_MAX_LOOP_LAG": str(LIMIT)},
    ) as running:
        yield running


def _unread_bytes(port: int) -> int:
    """Bytes received on connections to local `port` that its process has not read yet."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                local, state, queues = fields[1], fields[3], fields[4]
                if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                    total += int(queues.split(":")[1], 16)
    return total


async def test_a_shard_that_fell_behind_refuses_new_turns_then_takes_them_again(
    cluster: LocalCluster,
) -> None:
    async with httpx.AsyncClient(base_url=cluster.urls[0]) as http:
        (shard,) = (await http.get("/v1/cluster")).json()["shards"]
    port = int(shard["address"].rsplit(":", 1)[1])
    process = next(p for p in cluster.processes if p.popen.pid == shard["pid"])
    client = await WsClient.connect(cluster.urls[0], AGENT, f"overload-{time.time_ns()}")
    try:
        first = chat_request([user_message("before")])
        await client.send(first)
        assert "outcome" not in await client.wait_done(first["id"])

        # The shard stops for twice the limit (as a loop stuck on CPU-bound work would),
        # with a chat request forwarded to it meanwhile.
        process.popen.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            refused = chat_request([user_message("while behind")])
            await client.send(refused)

            async def forwarded() -> bool:
                return _unread_bytes(port) > 0

            await eventually(forwarded)
            stall = 2 * LIMIT - (time.monotonic() - stopped)
            if stall > 0:
                await asyncio.sleep(stall)  # the stall under test, not synchronisation
        finally:
            process.popen.send_signal(signal.SIGCONT)

        done = await client.wait_done(refused["id"])
        assert done.get("outcome") == "error"
        error = await client.wait_for(lambda f: f.get("type") == "durachat_error")
        assert error["code"] == "overloaded"

        # Once on time again, a new turn runs.
        async def accepted() -> bool:
            request = chat_request([user_message("after")])
            after = len(client.frames)
            await client.send(request)
            final = await client.wait_done(request["id"], after=after)
            return "outcome" not in final

        await eventually(accepted, timeout=20, interval=0.1)
    finally:
        await client.close()
