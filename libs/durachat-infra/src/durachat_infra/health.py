"""Readiness checks the processes share, for orchestrators' probes.

Every process answers `GET /healthz` (alive: the process serves HTTP) and `GET /readyz` (ready:
what it needs is reachable). A readiness answer is 200 when every check passed and 503
otherwise, with each check's outcome in the body; docs/deployment.md lists what each process
checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from durachat_infra.cluster import ShardInfo
from durachat_infra.keys import ClusterKeys
from durachat_infra.redis_client import RedisClient

CHECK_TIMEOUT = 2.0
"""Seconds one check may take; probes time out after a few seconds, so checks must not hang."""


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one readiness check."""

    name: str
    ok: bool
    detail: str = ""


Probe = Callable[[], Awaitable[Check]]


async def run_checks(probes: list[Probe]) -> tuple[int, dict[str, Any]]:
    """Run `probes` concurrently; returns the HTTP status (200 or 503) and the JSON body."""
    checks = await asyncio.gather(*(probe() for probe in probes))
    ready = all(check.ok for check in checks)
    body = {
        "ready": ready,
        "checks": {
            c.name: {"ok": c.ok, **({"detail": c.detail} if c.detail else {})} for c in checks
        },
    }
    return (200 if ready else 503), body


async def redis_check(redis: RedisClient, name: str = "redis") -> Check:
    """Redis answers PING."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            await redis.ping()
    except (RedisError, OSError, TimeoutError) as exc:
        return Check(name, False, _describe(exc))
    return Check(name, True)


async def database_check(engine: AsyncEngine) -> Check:
    """The SQL database answers `SELECT 1`."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT), engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except (SQLAlchemyError, OSError, TimeoutError) as exc:
        return Check("database", False, _describe(exc))
    return Check("database", True)


async def registration_check(redis: RedisClient, keys: ClusterKeys, shard_id: str) -> Check:
    """The shard's membership record exists and does not say it is draining."""
    try:
        async with asyncio.timeout(CHECK_TIMEOUT):
            raw = await redis.get(keys.shard(shard_id))
    except (RedisError, OSError, TimeoutError) as exc:
        return Check("registered", False, _describe(exc))
    if raw is None:
        return Check("registered", False, "no membership record")
    if ShardInfo.from_json(raw).draining:
        return Check("registered", False, "draining")
    return Check("registered", True)


def live_shards_check(shards: dict[str, ShardInfo]) -> Check:
    """At least one live shard that is not draining, in a gateway's view of the cluster."""
    serving = sum(1 for shard in shards.values() if not shard.draining)
    if serving == 0:
        return Check("shards", False, "no live shard")
    return Check("shards", True, f"{serving} live")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {CHECK_TIMEOUT:g}s"
    return f"{type(exc).__name__}: {exc}"[:200]
