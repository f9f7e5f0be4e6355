"""A shard process: wires Redis, the store, membership and the internal API together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Iterator

import uvicorn

from durachat.agent import AgentRegistry
from durachat.models import warm_up
from durachat_infra.cluster import (
    ClusterView,
    Leases,
    ShardInfo,
    ShardRegistration,
    cluster_auth,
)
from durachat_infra.eventlog import LogWriter
from durachat_infra.events import DEFAULT_TENANT, EventPublisher
from durachat_infra.keys import ClusterKeys, EventKeys
from durachat_infra.metrics_server import serve_metrics
from durachat_infra.quotas import QuotaCounters
from durachat_infra.redis_client import connect_redis
from durachat_infra.runtime import settle_heap
from durachat_infra.settings import ShardSettings
from durachat_infra.store import Store, migrate
from durachat_infra.telemetry import configure_telemetry
from durachat_shard import metrics
from durachat_shard.api import build_api
from durachat_shard.health import health_router
from durachat_shard.hosting import Conversations
from durachat_shard.overload import Overload
from durachat_shard.usage import TokenMeter

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its signal handling: the shard decides when and how to shut down."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _false() -> bool:
    return False


async def _warm_up_models(configured: str | None, agents: AgentRegistry) -> None:
    """Warm up the model layer for every model the shard's agents call."""
    classes = [agents.get(name) for name in agents.names()]
    models = {configured} if configured else {c.model for c in classes if c is not None}
    for model in sorted(models):
        started = time.monotonic()
        if await warm_up(model):
            took = 1000 * (time.monotonic() - started)
            log.info("model layer ready for %s in %.0f ms", model, took)


async def serve(settings: ShardSettings) -> None:
    """Run a shard until SIGTERM/SIGINT."""
    agents = AgentRegistry()
    agents.load(settings.agents.split(","))
    if not agents.names():
        raise SystemExit(f"no agents found in {settings.agents!r}")

    shutdown_telemetry = configure_telemetry("durachat-shard", settings.shard_id)
    if settings.metrics_port is not None:
        serve_metrics(settings.metrics_host or settings.host, settings.metrics_port)
    if not settings.cluster_secret:
        log.warning("DURACHAT_CLUSTER_SECRET is not set: the internal API takes unsigned calls")
    await migrate(settings.database_url)
    store = Store.from_url(settings.database_url)
    redis = connect_redis(settings.redis_url, settings.redis_cluster_nodes)
    cluster_keys = ClusterKeys(settings.key_prefix)
    fenced: list[Conversations] = []
    writer = LogWriter(
        redis,
        owner=settings.shard_id,
        maxlen=settings.log_maxlen,
        max_bytes=settings.log_max_bytes,
        on_fenced=lambda keys: fenced[0].on_log_fenced(keys) if fenced else None,
        reclaim=lambda keys: fenced[0].reclaim(keys) if fenced else _false(),
    )
    view = ClusterView(redis, cluster_keys, refresh=settings.heartbeat_interval)
    leases = Leases(redis, cluster_keys, settings.shard_id, settings.lease_ttl)
    meter = TokenMeter(QuotaCounters(redis, settings.key_prefix))
    conversations = Conversations(
        shard_id=settings.shard_id,
        key_prefix=settings.key_prefix,
        agents=agents,
        model=settings.model,
        store=store,
        writer=writer,
        leases=leases,
        view=view,
        lease_ttl=settings.lease_ttl,
        idle_evict_after=settings.idle_evict_after,
        redis=redis,
        drain_timeout=settings.drain_timeout,
        turn_heartbeat_interval=settings.turn_heartbeat_interval,
        meter=meter,
        internal_auth=cluster_auth(settings.cluster_secret),
    )
    fenced.append(conversations)
    # Before the heap is settled and before the shard joins: its first turns do not wait for
    # litellm's start-up.
    await _warm_up_models(settings.model, agents)
    # Read at each scrape, on whichever listener serves it.
    metrics.ACTIVE_CONVERSATIONS.set_function(lambda: len(conversations))
    settle_heap()

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, settings.port))
    host, port = sock.getsockname()[:2]
    load = Overload(
        settings.max_loop_lag,
        settings.max_write_backlog,
        admission_wait=settings.max_admission_wait,
    )
    api = build_api(
        conversations,
        settings.shard_id,
        writer,
        cluster_secret=settings.cluster_secret,
        load=load,
    )
    api.include_router(health_router(redis, store, cluster_keys, settings.shard_id))
    config = uvicorn.Config(
        api,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
    server = _Server(config)
    registration = ShardRegistration(
        redis,
        cluster_keys,
        ShardInfo(
            id=settings.shard_id,
            pid=os.getpid(),
            address=f"{settings.advertise_host or host}:{port}",
            started_at=time.time(),
            agents=tuple(agents.names()),
        ),
        interval=settings.heartbeat_interval,
        ttl=settings.shard_ttl,
        active=lambda: len(conversations),
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    await registration.start()
    await view.start()
    await conversations.start()
    await meter.start()
    events = EventPublisher(
        redis,
        EventKeys(settings.key_prefix),
        process=f"shard:{settings.shard_id}",
        default_tenant=DEFAULT_TENANT,
        settings=settings.events,
    )
    events.start()
    load.start()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    log.info(
        "shard %s serving on %s:%s (agents: %s)", settings.shard_id, host, port, agents.names()
    )
    print(f"shard {settings.shard_id} ready on {host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        log.info("shard %s stopping", settings.shard_id)
        # First: chat requests waiting for the shard to catch up go on, to be sent to the
        # conversations' next owners like every request that reaches a draining shard.
        await load.stop()
        await registration.drain()
        await conversations.stop()
        await meter.stop()
        await registration.stop()
        await writer.close()
        await events.stop()
        server.should_exit = True
        await serving
        await view.stop()
        await redis.aclose()
        await store.close()
        shutdown_telemetry()
