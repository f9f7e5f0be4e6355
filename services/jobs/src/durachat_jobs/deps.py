"""The dependencies the jobs share (`JobDeps`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from durachat_infra.cluster import ClusterView
from durachat_infra.keys import ClusterKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.store import ConversationKey, Store


@dataclass(slots=True)
class JobDeps:
    """What the jobs share, built once by the worker (`ctx["durachat"]`)."""

    redis: RedisClient
    keys: ClusterKeys
    shard_ttl: float
    store: Store | None = None
    view: ClusterView | None = None
    http: httpx.AsyncClient | None = None
    turn_stale_after: float = 10.0
    log_retention: float = 86_400.0
    abandoned_stream_after: float = 600.0
    incident_retention: float = 3_600.0
    backoff: dict[ConversationKey, tuple[float, float]] = field(default_factory=dict)
    """Conversations whose owner did not take them: (next try, current delay)."""
    scanning: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the orphan scan running now (scans never overlap)."""


def job_deps(ctx: dict[str, Any]) -> JobDeps:
    """The jobs' shared dependencies from an arq job context."""
    deps: JobDeps = ctx["durachat"]
    return deps
