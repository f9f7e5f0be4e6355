"""Upkeep of every event log under a key prefix on Redis: listing, trimming, and closing
streams whose owner vanished (the jobs service's side of the event log)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from durachat_infra.eventlog.entries import branch_tag
from durachat_infra.eventlog.reader import LogReads
from durachat_infra.eventlog.scripts import CLOSE_ABANDONED, RECOUNT_BYTES
from durachat_infra.eventlog.state import StreamState, state_fields, state_prefix
from durachat_infra.keys import ConversationKeys
from durachat_infra.redis_client import RedisClient, register_script

__all__ = ["LogMaintenance"]


class LogMaintenance(LogReads):
    """The event logs of every conversation under `prefix` (`LogMaintenancePort` on Redis)."""

    def __init__(self, redis: RedisClient, prefix: str) -> None:
        super().__init__(redis)
        self._prefix = prefix
        self._close = register_script(redis, CLOSE_ABANDONED)
        self._recount = register_script(redis, RECOUNT_BYTES)

    async def logs(self) -> AsyncIterator[ConversationKeys]:
        """The keys of every conversation that has a log (a `SCAN` over the stream keys)."""
        pattern = ConversationKeys.log_pattern(self._prefix)
        async for log_key in self._redis.scan_iter(match=pattern, count=500, _type="STREAM"):
            yield ConversationKeys.from_log_key(self._prefix, str(log_key))

    async def trim(self, keys: ConversationKeys, min_id: str) -> int:
        """Delete the entries older than `min_id` (exactly, not `~`); returns how many."""
        removed = int(await self._redis.xtrim(keys.log, minid=min_id, approximate=False))
        if removed:
            # The log's byte count (which bounds it, see the append script) follows.
            await self._recount(keys=[keys.log, keys.log_bytes])
        return removed

    async def close_abandoned(
        self, keys: ConversationKeys, *, branch: str, request: str, frame: str, cutoff_ms: int
    ) -> bool:
        """End the open stream of `request` on `branch` with `frame` if nobody holds the
        conversation and its log has been quiet since `cutoff_ms` (one script call)."""
        change = json.dumps(
            state_fields(branch, StreamState.change_ended(streamed=True)), separators=(",", ":")
        )
        closed = await self._close(
            keys=[keys.log, keys.state, keys.lease],
            args=[
                request,
                frame,
                cutoff_ms,
                state_prefix(branch),
                branch_tag(branch),
                change,
            ],
        )
        return bool(int(closed))
