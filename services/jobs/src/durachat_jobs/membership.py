"""Membership upkeep: the index of live shards."""

from __future__ import annotations

import logging
import time
from typing import Any

from durachat_jobs.deps import job_deps

log = logging.getLogger(__name__)


async def sweep_membership(ctx: dict[str, Any]) -> int:
    """Drop shard ids whose heartbeat record expired from the membership index.

    Gateways skip such ids already; sweeping keeps the index from growing with every restart.
    """
    deps = job_deps(ctx)
    cutoff = time.time() - deps.shard_ttl
    removed = 0
    for shard_id in await deps.redis.zrangebyscore(deps.keys.shards, "-inf", cutoff):
        if not await deps.redis.exists(deps.keys.shard(shard_id)):
            removed += int(await deps.redis.zrem(deps.keys.shards, shard_id))
    if removed:
        log.info("swept %d dead shard ids", removed)
    return removed
