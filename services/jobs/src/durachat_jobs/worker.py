"""The arq worker of the jobs service."""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx
from arq import cron
from arq.typing import WorkerCoroutine
from arq.worker import Function, Worker, func

from durachat_infra.cluster import ClusterView, cluster_auth
from durachat_infra.events import DEFAULT_TENANT, EventPublisher
from durachat_infra.health import Check, database_check, redis_check, run_checks
from durachat_infra.jobs.arq_adapter import JOB_DESERIALIZER, JOB_SERIALIZER, arq_redis_settings
from durachat_infra.keys import ClusterKeys, EventKeys, JobKeys
from durachat_infra.redis_client import connect_redis
from durachat_infra.settings import ClusterTiming, JobsSettings
from durachat_infra.store import Store, migrate
from durachat_jobs.deps import JobDeps
from durachat_jobs.health import HealthServer
from durachat_jobs.membership import sweep_membership as _sweep_membership
from durachat_jobs.metrics import metered
from durachat_jobs.recovery import recover_orphans as _recover_orphans
from durachat_jobs.retention import close_abandoned_streams as _close_abandoned_streams
from durachat_jobs.retention import sweep_incidents as _sweep_incidents
from durachat_jobs.retention import trim_logs as _trim_logs
from durachat_jobs.webhooks import (
    JOB_NAME,
    WebhookDelivery,
    WebhookDispatcher,
    deliver_webhook,
)

# Each job counted and timed (docs/observability.md#metrics), under its own name.
sweep_membership = metered(_sweep_membership)
recover_orphans = metered(_recover_orphans)
trim_logs = metered(_trim_logs)
close_abandoned_streams = metered(_close_abandoned_streams)
sweep_incidents = metered(_sweep_incidents)


def job_keys(settings: JobsSettings) -> JobKeys:
    """The names of this cluster's arq queue and jobs."""
    return JobKeys(settings.key_prefix)


def listener_port(settings: JobsSettings) -> int | None:
    """The port of the worker's health and metrics listener: `DURACHAT_JOBS_PORT`, else
    `DURACHAT_METRICS_PORT` (the listener serves `/metrics` too)."""
    return settings.health_port if settings.health_port is not None else settings.metrics_port


def _every(seconds: int) -> set[int]:
    """Cron seconds (or minutes) for a job that runs every `seconds` (1-60) seconds."""
    step = max(1, min(60, seconds))
    return set(range(0, 60, step))


async def build_worker(settings: JobsSettings, timing: ClusterTiming) -> Worker:
    """An arq worker with durachat's jobs and schedules, to run under `supervise` (which
    handles signals and starts a new worker when Redis was away)."""
    jobs = job_keys(settings)

    async def startup(ctx: dict[str, Any]) -> None:
        port = listener_port(settings)
        if port is not None:
            # Before the migration, so liveness probes are answered while it runs.
            health = HealthServer(settings.health_host, port, lambda: _ready(ctx))
            await health.start()
            ctx["health"] = health
        await migrate(settings.database_url)
        redis = connect_redis(settings.redis_url, settings.redis_cluster_nodes)
        keys = ClusterKeys(settings.key_prefix)
        view = ClusterView(redis, keys, refresh=timing.heartbeat_interval)
        try:
            await view.start()
        except BaseException:
            # Redis went away meanwhile: the supervisor starts a new worker later.
            await view.stop()
            await redis.aclose()
            raise
        events = EventPublisher(
            redis,
            EventKeys(settings.key_prefix),
            process=f"jobs:{socket.gethostname()}:{os.getpid()}",
            default_tenant=DEFAULT_TENANT,
            settings=settings.events,
        )
        events.start()
        ctx["events"] = events
        store = Store.from_url(settings.database_url)
        event_keys = EventKeys(settings.key_prefix)
        ctx["webhooks"] = WebhookDelivery(
            redis=redis,
            store=store,
            keys=event_keys,
            settings=settings.webhooks,
            # Not the cluster's signed client: deliveries leave the cluster.
            http=httpx.AsyncClient(
                timeout=httpx.Timeout(settings.webhooks.timeout, connect=5.0),
                follow_redirects=False,
            ),
        )
        dispatcher = WebhookDispatcher(
            redis=redis,
            queue=ctx["redis"],
            store=store,
            keys=event_keys,
            jobs=jobs,
            consumer=f"{socket.gethostname()}:{os.getpid()}",
        )
        dispatcher.start()
        ctx["webhook_dispatcher"] = dispatcher
        ctx["durachat"] = JobDeps(
            redis=redis,
            keys=keys,
            shard_ttl=timing.shard_ttl,
            store=store,
            view=view,
            http=httpx.AsyncClient(
                timeout=httpx.Timeout(10.0, connect=1.0), auth=cluster_auth(settings.cluster_secret)
            ),
            turn_stale_after=settings.turn_stale_after,
            log_retention=settings.log_retention,
            abandoned_stream_after=settings.abandoned_stream_after,
            incident_retention=settings.incident_retention,
        )

    async def shutdown(ctx: dict[str, Any]) -> None:
        if "health" in ctx:
            await ctx["health"].stop()
        if "webhook_dispatcher" in ctx:
            await ctx["webhook_dispatcher"].stop()
        if "webhooks" in ctx:
            await ctx["webhooks"].http.aclose()
        if "events" in ctx:
            await ctx["events"].stop()
        deps: JobDeps = ctx["durachat"]
        if deps.view is not None:
            await deps.view.stop()
        if deps.http is not None:
            await deps.http.aclose()
        if deps.store is not None:
            await deps.store.close()
        await deps.redis.aclose()

    retention = max(1, settings.retention_interval)
    retention_cron: dict[str, Any] = (
        {"second": {0}, "minute": _every(retention // 60)}
        if retention >= 60
        else {"second": _every(retention)}
    )
    functions: list[Function | WorkerCoroutine] = [
        sweep_membership,
        recover_orphans,
        trim_logs,
        close_abandoned_streams,
        sweep_incidents,
        func(
            deliver_webhook,
            name=JOB_NAME,
            max_tries=settings.webhooks.max_attempts,
            keep_result=600,
        ),
    ]
    return Worker(
        functions=functions,
        cron_jobs=[
            # Named with the queue's hash tag: arq makes each run's job id from the name.
            cron(
                sweep_membership,
                name=jobs.cron_name("sweep_membership"),
                second=_every(10),
                unique=True,
            ),
            cron(
                recover_orphans,
                name=jobs.cron_name("recover_orphans"),
                second=_every(settings.orphan_scan_interval),
                unique=True,
                run_at_startup=True,
            ),
            cron(trim_logs, name=jobs.cron_name("trim_logs"), unique=True, **retention_cron),
            cron(
                close_abandoned_streams,
                name=jobs.cron_name("close_abandoned_streams"),
                unique=True,
                **retention_cron,
            ),
            cron(
                sweep_incidents,
                name=jobs.cron_name("sweep_incidents"),
                unique=True,
                **retention_cron,
            ),
        ],
        redis_settings=await arq_redis_settings(
            settings.redis_url, jobs, settings.redis_cluster_nodes
        ),
        queue_name=jobs.queue,
        on_startup=startup,
        on_shutdown=shutdown,
        job_serializer=JOB_SERIALIZER,
        job_deserializer=JOB_DESERIALIZER,
        handle_signals=False,
        poll_delay=0.1,
    )


async def _ready(ctx: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Readiness of the worker: started (migrated), its queue connection, Redis and the
    database answer."""
    deps: JobDeps | None = ctx.get("durachat")
    if deps is None or deps.store is None:
        return await run_checks([_starting])
    store = deps.store
    return await run_checks(
        [
            lambda: redis_check(ctx["redis"], "queue"),
            lambda: redis_check(deps.redis),
            lambda: database_check(store.engine),
        ]
    )


async def _starting() -> Check:
    return Check("started", False, "starting up (migrating the database)")
