"""The jobs service's tasks against a real Redis, and the jobs port over arq."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from durachat_infra.jobs import ArqJobQueue
from durachat_infra.keys import ClusterKeys
from durachat_jobs.tasks import JobDeps, sweep_membership


async def test_sweep_removes_only_dead_shards(redis: Redis, key_prefix: str) -> None:
    keys = ClusterKeys(key_prefix)
    now = time.time()
    await redis.zadd(keys.shards, {"dead": now - 60, "alive": now - 60, "fresh": now})
    await redis.set(keys.shard("alive"), "{}", px=5000)
    ctx = {"durachat": JobDeps(redis=redis, keys=keys, shard_ttl=2.0)}
    assert await sweep_membership(ctx) == 1
    assert set(await redis.zrange(keys.shards, 0, -1)) == {"alive", "fresh"}


async def test_jobs_are_enqueued_once_per_id(redis_url: str, key_prefix: str) -> None:
    queue = await ArqJobQueue.connect(redis_url, queue_name=f"{key_prefix}:jobs")
    try:
        assert await queue.enqueue("sweep_membership", job_id="sweep-1")
        assert not await queue.enqueue("sweep_membership", job_id="sweep-1")
    finally:
        await queue.aclose()
