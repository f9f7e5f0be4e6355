"""A durachat cluster on a Redis Cluster whose slots move while it runs
(docs/operations.md#redis-cluster): a conversation's partition and the jobs queue move to other
masters, the way `redis-cli --cluster reshard` moves them, and chat, broadcast across gateways
and the jobs worker carry on."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from durachat_infra.keys import ConversationKeys, JobKeys, conversation_tag
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.redis_cluster import RedisClusterServers
from support.cluster import running_cluster
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

AGENT = "chat-agent"
PREFIX = f"rs{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    # A cluster of this module's own: its slots are moved.
    servers = RedisClusterServers(tmp_path_factory.mktemp("resharded-redis"), masters=3)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, servers: RedisClusterServers
) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("resharded"),
        servers.url,
        env={"REDIS_CLUSTER_NODES": servers.nodes, "DURACHAT_KEY_PREFIX": PREFIX},
    ) as running:
        yield running


def _slot(tag: str) -> int:
    return key_slot(tag.strip("{}").encode())


async def _chat(client: WsClient, text: str) -> str:
    request = chat_request([user_message(text)])
    await client.send(request)
    await client.wait_done(request["id"], timeout=30)
    return client.text(request["id"])


async def _scheduled_run_after(servers: RedisClusterServers, index: int, since_ms: int) -> bool:
    """Whether master `index` holds the keys of a scheduled run (arq keeps a scheduled job's
    in-progress key past the run) later than `since_ms`."""
    node = Redis.from_url(servers.servers[index].url, decode_responses=True)
    try:
        tag = JobKeys(PREFIX).tag
        async for key in node.scan_iter(match="arq:*"):
            name = str(key)
            ran_at = name.rsplit(":", 1)[1]
            if tag in name and "sweep_membership:" in name and int(ran_at) > since_ms:
                return True
    finally:
        await node.aclose()
    return False


async def test_chat_broadcast_and_jobs_survive_their_slots_moving(
    cluster: LocalCluster, servers: RedisClusterServers
) -> None:
    name = f"moving-{uuid.uuid4().hex[:8]}"
    partition = ConversationKeys(PREFIX, conversation_tag("default", AGENT, name)).partition
    a = await WsClient.connect(cluster.urls[0], AGENT, name)
    b = await WsClient.connect(cluster.urls[1], AGENT, name)
    await b.wait_for(lambda f: f.get("type") == "cf_agent_mcp_servers")
    assert await _chat(a, "before the move") == "echo: before the move"
    await b.wait_for(lambda f: f.get("type") == "cf_agent_chat_messages")

    conversation_slot = _slot(partition)
    queue_slot = _slot(JobKeys(PREFIX).tag)
    moved_at_ms = int(time.time() * 1000)
    for slot in {conversation_slot, queue_slot}:
        servers.move_slot(slot, (servers.owner_of_slot(slot) + 1) % len(servers.servers))

    # The owner's writes, both gateways' reads (one was blocked on the old master) follow.
    mark = len(b.frames)
    assert await _chat(a, "after the move") == "echo: after the move"
    request_id = a.frames[-1]["id"]
    await b.wait_done(str(request_id), timeout=30, after=mark)
    assert b.text(str(request_id)) == "echo: after the move"
    # The history is whole: nothing of the log or the transcript was lost in the move.
    history = await get_messages(cluster.urls[1], AGENT, name)
    texts = [p.get("text") for m in history for p in m["parts"] if "text" in p]
    assert texts == [
        "before the move",
        "echo: before the move",
        "after the move",
        "echo: after the move",
    ]
    # The jobs worker found the queue's new master and runs its schedule there.
    owner = servers.owner_of_slot(queue_slot)
    await eventually(lambda: _scheduled_run_after(servers, owner, moved_at_ms), timeout=60)
    for client in (a, b):
        await client.close()
