"""The arq adapter of the jobs port."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from durachat_infra.keys import JobKeys
from durachat_infra.redis_client import connect_redis, node_of


async def arq_redis_settings(
    redis_url: str, keys: JobKeys, cluster_nodes: str | None = None
) -> RedisSettings:
    """arq connection settings: the server at `redis_url`, or on a Redis Cluster the master
    that serves the queue's slot (every key of the queue is on it, see `JobKeys`). arq talks
    to one server; when the slot moves, the worker fails and is started again on the new
    master (docs/operations.md#redis-cluster)."""
    settings = RedisSettings.from_dsn(redis_url)
    if not cluster_nodes:
        return settings
    client = connect_redis(redis_url, cluster_nodes)
    try:
        found = await node_of(client, keys.queue)
    finally:
        await client.aclose()
    assert found is not None
    host, port = found
    return dataclasses.replace(settings, host=host, port=port, database=0)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _loads(raw: bytes) -> Any:
    return json.loads(raw)


JOB_SERIALIZER = _dumps
JOB_DESERIALIZER = _loads
"""Jobs are JSON, never pickle: workers and producers of any version can read them."""


class ArqJobQueue:
    """Enqueues jobs on an arq queue."""

    def __init__(self, pool: ArqRedis, keys: JobKeys) -> None:
        self._pool = pool
        self._keys = keys

    @classmethod
    async def connect(
        cls, redis_url: str, keys: JobKeys, *, cluster_nodes: str | None = None
    ) -> ArqJobQueue:
        """Connect to Redis (the queue's master on a cluster)."""
        pool = await create_pool(
            await arq_redis_settings(redis_url, keys, cluster_nodes),
            job_serializer=JOB_SERIALIZER,
            job_deserializer=JOB_DESERIALIZER,
            default_queue_name=keys.queue,
        )
        return cls(pool, keys)

    async def enqueue(self, name: str, *, job_id: str | None = None, **kwargs: Any) -> bool:
        """Queue job `name` (see `JobQueue.enqueue`)."""
        job = await self._pool.enqueue_job(
            name,
            _job_id=self._keys.job_id(job_id or uuid.uuid4().hex),
            _queue_name=self._keys.queue,
            **kwargs,
        )
        return job is not None

    async def aclose(self) -> None:
        """Release connections."""
        await self._pool.aclose()
