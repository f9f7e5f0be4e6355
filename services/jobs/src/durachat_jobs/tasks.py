"""The jobs the worker runs."""

from __future__ import annotations

import logging
import time
from typing import Any

from redis.asyncio import Redis

from durachat_infra.keys import ClusterKeys

log = logging.getLogger(__name__)


async def sweep_membership(ctx: dict[str, Any]) -> int:
    """Drop shard ids whose heartbeat record expired from the membership index.

    Gateways skip such ids already; sweeping keeps the index from growing with every restart.
    """
    redis: Redis = ctx["durachat_redis"]
    keys: ClusterKeys = ctx["durachat_cluster_keys"]
    ttl: float = ctx["durachat_shard_ttl"]
    cutoff = time.time() - ttl
    removed = 0
    for shard_id in await redis.zrangebyscore(keys.shards, "-inf", cutoff):
        if not await redis.exists(keys.shard(shard_id)):
            removed += int(await redis.zrem(keys.shards, shard_id))
    if removed:
        log.info("swept %d dead shard ids", removed)
    return removed
