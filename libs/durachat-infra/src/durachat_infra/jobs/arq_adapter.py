"""The arq adapter of the jobs port."""

from __future__ import annotations

import json
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings


def arq_redis_settings(redis_url: str) -> RedisSettings:
    """arq connection settings for a `redis://` URL."""
    return RedisSettings.from_dsn(redis_url)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _loads(raw: bytes) -> Any:
    return json.loads(raw)


JOB_SERIALIZER = _dumps
JOB_DESERIALIZER = _loads
"""Jobs are JSON, never pickle: workers and producers of any version can read them."""


class ArqJobQueue:
    """Enqueues jobs on an arq queue."""

    def __init__(self, pool: ArqRedis, *, queue_name: str) -> None:
        self._pool = pool
        self._queue_name = queue_name

    @classmethod
    async def connect(cls, redis_url: str, *, queue_name: str) -> ArqJobQueue:
        """Connect to Redis."""
        pool = await create_pool(
            arq_redis_settings(redis_url),
            job_serializer=JOB_SERIALIZER,
            job_deserializer=JOB_DESERIALIZER,
            default_queue_name=queue_name,
        )
        return cls(pool, queue_name=queue_name)

    async def enqueue(self, name: str, *, job_id: str | None = None, **kwargs: Any) -> bool:
        """Queue job `name` (see `JobQueue.enqueue`)."""
        job = await self._pool.enqueue_job(
            name, _job_id=job_id, _queue_name=self._queue_name, **kwargs
        )
        return job is not None

    async def aclose(self) -> None:
        """Release connections."""
        await self._pool.aclose()
