"""The jobs service's tasks against a real Redis, and the jobs port over arq."""

from __future__ import annotations

import json
import time
from pathlib import Path

from redis.asyncio import Redis

from durachat_infra.jobs import ArqJobQueue
from durachat_infra.keys import ClusterKeys, ConversationKeys, JobKeys
from durachat_infra.store import ConversationKey, Store, migrate
from durachat_jobs.deps import JobDeps
from durachat_jobs.membership import sweep_membership
from durachat_jobs.retention import close_abandoned_streams, sweep_incidents, trim_logs

# redis-py types its hash commands as `Awaitable[T] | T` even on the asyncio client, so each
# awaited one carries `type: ignore[misc]` (as in the source that calls them).


async def test_sweep_removes_only_dead_shards(redis: Redis, key_prefix: str) -> None:
    keys = ClusterKeys(key_prefix)
    now = time.time()
    await redis.zadd(keys.shards, {"dead": now - 60, "alive": now - 60, "fresh": now})
    await redis.set(keys.shard("alive"), "{}", px=5000)
    ctx = {"durachat": JobDeps(redis=redis, keys=keys, shard_ttl=2.0)}
    assert await sweep_membership(ctx) == 1
    assert set(await redis.zrange(keys.shards, 0, -1)) == {"alive", "fresh"}


async def test_jobs_are_enqueued_once_per_id(
    redis_url: str, redis_cluster_nodes: str | None, key_prefix: str
) -> None:
    queue = await ArqJobQueue.connect(
        redis_url, JobKeys(key_prefix), cluster_nodes=redis_cluster_nodes
    )
    try:
        assert await queue.enqueue("sweep_membership", job_id="sweep-1")
        assert not await queue.enqueue("sweep_membership", job_id="sweep-1")
    finally:
        await queue.aclose()


async def _log(redis: Redis, keys: ConversationKeys, *ids: str) -> None:
    for entry_id in ids:
        await redis.xadd(keys.log, {"k": "c", "f": "{}", "t": "*", "r": "r1"}, id=entry_id)


def _keys(prefix: str, tag: str) -> ConversationKeys:
    return ConversationKeys(prefix, tag)


async def test_trim_keeps_the_window_and_open_streams(redis: Redis, key_prefix: str) -> None:
    now_ms = int(time.time() * 1000)
    old, recent = f"{now_ms - 120_000}-0", f"{now_ms - 1_000}-0"
    done, streaming = _keys(key_prefix, "done"), _keys(key_prefix, "open")
    await _log(redis, done, old, recent)
    await _log(redis, streaming, old, recent)
    await redis.hset(done.state, mapping={"status": "done", "start": old})  # type: ignore[misc]
    await redis.hset(streaming.state, mapping={"status": "streaming", "start": old})  # type: ignore[misc]
    deps = JobDeps(redis=redis, keys=ClusterKeys(key_prefix), shard_ttl=2.0, log_retention=60.0)
    assert await trim_logs({"durachat": deps}) == 1
    assert [e[0] for e in await redis.xrange(done.log)] == [recent]
    # The stream still open keeps every entry since its start.
    assert [e[0] for e in await redis.xrange(streaming.log)] == [old, recent]


async def test_abandoned_streams_are_closed_unless_a_shard_holds_them(
    redis: Redis, key_prefix: str
) -> None:
    now_ms = int(time.time() * 1000)
    stale = f"{now_ms - 120_000}-0"
    abandoned, held = _keys(key_prefix, "abandoned"), _keys(key_prefix, "held")
    for keys in (abandoned, held):
        await _log(redis, keys, stale)
        await redis.hset(keys.state, mapping={"status": "streaming", "req": "r1", "start": stale})  # type: ignore[misc]
    await redis.set(held.lease, "shard-x", px=10_000)
    deps = JobDeps(
        redis=redis, keys=ClusterKeys(key_prefix), shard_ttl=2.0, abandoned_stream_after=60.0
    )
    assert await close_abandoned_streams({"durachat": deps}) == 1
    assert await redis.hget(abandoned.state, "status") == "done"  # type: ignore[misc]
    last = (await redis.xrevrange(abandoned.log, count=1))[0][1]
    assert last["k"] == "d"
    assert json.loads(last["f"]) == {
        "body": "",
        "done": True,
        "id": "r1",
        "type": "cf_agent_use_chat_response",
        "outcome": "aborted",
    }
    assert await redis.hget(held.state, "status") == "streaming"  # type: ignore[misc]


async def test_open_streams_of_other_branches_are_kept_and_closed_too(
    redis: Redis, key_prefix: str
) -> None:
    now_ms = int(time.time() * 1000)
    old, recent = f"{now_ms - 120_000}-0", f"{now_ms - 90_000}-0"
    keys = _keys(key_prefix, "branches")
    await _log(redis, keys, old, recent)
    # main is done; branch 57 still streams a reply that started at `old`.
    await redis.hset(  # type: ignore[misc]
        keys.state,
        mapping={"status": "done", "req": "r0", "57|status": "streaming", "57|req": "r2"},
    )
    await redis.hset(keys.state, mapping={"57|start": old})  # type: ignore[misc]
    deps = JobDeps(
        redis=redis,
        keys=ClusterKeys(key_prefix),
        shard_ttl=2.0,
        log_retention=60.0,
        abandoned_stream_after=60.0,
    )
    assert await trim_logs({"durachat": deps}) == 0
    assert [e[0] for e in await redis.xrange(keys.log)] == [old, recent]

    assert await close_abandoned_streams({"durachat": deps}) == 1
    state = await redis.hgetall(keys.state)  # type: ignore[misc]
    assert (state["status"], state["57|status"]) == ("done", "done")
    last = (await redis.xrevrange(keys.log, count=1))[0][1]
    # The terminal frame goes to the branch's viewers, and their gateways mark it done.
    assert (last["b"], last["r"], json.loads(last["s"])) == ("57", "r2", {"57|status": "done"})
    assert json.loads(last["f"])["outcome"] == "aborted"


async def test_stale_incidents_are_swept(tmp_path: Path, redis: Redis, key_prefix: str) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    await migrate(url)
    async with Store.from_url(url) as store:
        conversation = await store.get_or_create_conversation(ConversationKey("default", "a", "c"))
        await store.claim(conversation.id, 1)
        async with store.transaction(conversation.id, 1) as tx:
            await tx.save_incident("r1:u1", request_id="r1", status="completed", attempt=1, data={})
        deps = JobDeps(
            redis=redis,
            keys=ClusterKeys(key_prefix),
            shard_ttl=2.0,
            store=store,
            incident_retention=3600.0,
        )
        assert await sweep_incidents({"durachat": deps}) == 0
        deps.incident_retention = -1.0
        assert await sweep_incidents({"durachat": deps}) == 1
        assert await store.get_incident(conversation.id, "r1:u1") is None
