"""The arq worker of the jobs service."""

from __future__ import annotations

from typing import Any

from arq import cron
from arq.worker import Worker
from redis.asyncio import Redis

from durachat_infra.jobs.arq_adapter import JOB_DESERIALIZER, JOB_SERIALIZER, arq_redis_settings
from durachat_infra.keys import ClusterKeys
from durachat_infra.settings import ClusterTiming, JobsSettings
from durachat_jobs.tasks import sweep_membership


def queue_name(settings: JobsSettings) -> str:
    """The arq queue of this cluster."""
    return f"{settings.key_prefix}:jobs"


def build_worker(settings: JobsSettings, timing: ClusterTiming) -> Worker:
    """An arq worker with durachat's jobs and schedules."""

    async def startup(ctx: dict[str, Any]) -> None:
        ctx["durachat_redis"] = Redis.from_url(settings.redis_url, decode_responses=True)
        ctx["durachat_cluster_keys"] = ClusterKeys(settings.key_prefix)
        ctx["durachat_shard_ttl"] = timing.shard_ttl

    async def shutdown(ctx: dict[str, Any]) -> None:
        await ctx["durachat_redis"].aclose()

    return Worker(
        functions=[sweep_membership],
        cron_jobs=[cron(sweep_membership, second=set(range(0, 60, 10)), unique=True)],
        redis_settings=arq_redis_settings(settings.redis_url),
        queue_name=queue_name(settings),
        on_startup=startup,
        on_shutdown=shutdown,
        job_serializer=JOB_SERIALIZER,
        job_deserializer=JOB_DESERIALIZER,
        handle_signals=True,
    )
