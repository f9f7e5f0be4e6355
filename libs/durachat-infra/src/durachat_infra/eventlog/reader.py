"""Reading event logs on Redis: one-shot reads (`LogReads`) and the gateway's follower
(`LogReader`), which follows many conversations with few connections."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from durachat.protocol import MAIN_BRANCH
from durachat_infra.eventlog.entries import LogEntry
from durachat_infra.eventlog.port import EntryHandler
from durachat_infra.eventlog.scripts import SNAPSHOT
from durachat_infra.eventlog.state import StreamState
from durachat_infra.keys import ConversationKeys
from durachat_infra.tasks import cancel_and_wait

log = logging.getLogger(__name__)

__all__ = ["EntryHandler", "LogReader", "LogReads", "read_range", "read_state", "read_states"]


async def read_range(
    redis: Redis, keys: ConversationKeys, start: str = "-", *, page: int = 1000
) -> list[LogEntry]:
    """Every entry of a conversation's log from `start` (inclusive) to the end."""
    out: list[LogEntry] = []
    cursor = start
    while True:
        rows = await redis.xrange(keys.log, min=cursor, count=page)
        out.extend(LogEntry.from_fields(rid, fields) for rid, fields in rows)
        if len(rows) < page:
            return out
        cursor = "(" + rows[-1][0]


async def read_state(
    redis: Redis, keys: ConversationKeys, branch: str = MAIN_BRANCH
) -> StreamState:
    """The stream state of a conversation's branch as the owner left it."""
    return (await read_states(redis, keys)).get(branch) or StreamState()


async def read_states(redis: Redis, keys: ConversationKeys) -> dict[str, StreamState]:
    """The stream state of every branch of a conversation as the owner left it."""
    fields: dict[str, str] = await redis.hgetall(keys.state)  # type: ignore[misc]
    return StreamState.all_from_hash(fields)


class LogReads:
    """One-shot reads of conversation logs and their stream state on Redis (the read part of
    the event log port, `LogReadsPort`)."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._snapshot = redis.register_script(SNAPSHOT)

    async def read_range(
        self, keys: ConversationKeys, start: str = "-", *, page: int = 1000
    ) -> list[LogEntry]:
        """Every entry from `start` (inclusive) to the end of the log."""
        return await read_range(self._redis, keys, start, page=page)

    async def read_states(self, keys: ConversationKeys) -> dict[str, StreamState]:
        """The stream state of every branch of the conversation."""
        return await read_states(self._redis, keys)

    async def read_state(self, keys: ConversationKeys, branch: str = MAIN_BRANCH) -> StreamState:
        """The stream state of one branch of the conversation."""
        return await read_state(self._redis, keys, branch)

    async def snapshot(self, keys: ConversationKeys) -> tuple[dict[str, StreamState], str]:
        """Read the stream state of every branch of a conversation and the id of the newest
        entry of its log, atomically."""
        raw: Any = await self._snapshot(keys=[keys.log, keys.state])
        flat, last_id = raw
        fields = {str(flat[i]): str(flat[i + 1]) for i in range(0, len(flat), 2)}
        return StreamState.all_from_hash(fields), str(last_id)

    async def first_id(self, keys: ConversationKeys) -> str | None:
        """Id of the oldest entry still in a log (None when it is empty)."""
        rows = await self._redis.xrange(keys.log, count=1)
        return str(rows[0][0]) if rows else None

    async def last_id(self, keys: ConversationKeys) -> str:
        """Id of the newest entry of a log ("0-0" when empty)."""
        rows = await self._redis.xrevrange(keys.log, count=1)
        return str(rows[0][0]) if rows else "0-0"


MAX_READ_COUNT = 8
"""Most entries of one log a gateway reads at once. Plenty for a live stream (a read comes
every millisecond or so while entries arrive, and each read covers every followed log), and
it bounds what one read brings when large entries follow small ones: 8 entries."""


class LogReader(LogReads):
    """Follows the event logs of every conversation a gateway's clients watch.

    One blocking `XREAD` covers all followed logs plus a private wake stream; following a new
    log writes to the wake stream so the blocked read returns and picks the new key up at once.
    Handlers are called in entry order, synchronously, on the event loop.
    """

    def __init__(
        self,
        redis: Redis,
        blocking: Redis,
        wake_key: str,
        *,
        block_ms: int = 5000,
        coalesce: float = 0.001,
        read_bytes: int = 4 * 1024 * 1024,
    ):
        """`read_bytes`: about how many bytes of entries one read may bring (the count asked
        for follows the size of the entries read last), so a burst of large entries is not
        pulled into memory all at once."""
        super().__init__(redis)
        self._read_bytes = read_bytes
        self._count = MAX_READ_COUNT
        self._largest = 0.0
        """The largest entry read lately (halved at each read of smaller ones)."""
        self._blocking = blocking
        self._wake_key = wake_key
        self._block_ms = block_ms
        self._coalesce = coalesce
        self._follows: dict[str, tuple[str, EntryHandler]] = {}
        self._wake_id = "$"
        self._task: asyncio.Task[None] | None = None
        self.observer: Callable[[str, list[LogEntry]], None] | None = None
        """Also handed every entry read (with the key of its log), after the conversation's
        handler: the gateway sees the ends of turns with it."""

    async def start(self) -> None:
        """Start following (call once)."""
        await self._redis.xadd(self._wake_key, {"w": "1"}, maxlen=16)
        last = await self._redis.xrevrange(self._wake_key, count=1)
        self._wake_id = last[0][0] if last else "0-0"
        self._task = asyncio.create_task(self._loop(), name="log-reader")

    async def stop(self) -> None:
        """Stop following everything."""
        await cancel_and_wait(self._task)
        await self._redis.delete(self._wake_key)

    def follow(self, keys: ConversationKeys, after: str, handler: EntryHandler) -> None:
        """Deliver every entry after `after` of `keys.log` to `handler`."""
        self._follows[keys.log] = (after, handler)
        self._wake()

    def unfollow(self, keys: ConversationKeys) -> None:
        """Stop delivering entries of `keys.log`."""
        self._follows.pop(keys.log, None)

    def _next_count(self, result: Any) -> int:
        """How many entries per log the next read asks for: as many of the largest size read
        lately as fit in `read_bytes` (XREAD's count applies to each log)."""
        sizes = [
            sum(len(value) for value in fields.values())
            for key, found in result or []
            if key != self._wake_key
            for _, fields in found
        ]
        if not sizes:
            return self._count
        self._largest = max(float(max(sizes)), self._largest / 2)
        return max(1, min(MAX_READ_COUNT, int(self._read_bytes / max(self._largest, 1.0))))

    def _wake(self) -> None:
        async def wake() -> None:
            try:
                await self._redis.xadd(self._wake_key, {"w": "1"}, maxlen=16)
            except RedisError as exc:
                log.warning("could not wake the log reader: %s", exc)

        asyncio.get_running_loop().create_task(wake())

    async def _loop(self) -> None:
        delay = 0.05
        while True:
            streams: dict[Any, Any] = {self._wake_key: self._wake_id}
            for key, (after, _) in self._follows.items():
                streams[key] = after
            try:
                result = await self._blocking.xread(
                    streams, block=self._block_ms, count=self._count
                )
            except RedisError as exc:
                log.warning("event log read failed, retrying: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            asked = self._count
            self._count = self._next_count(result)
            # A log that filled the count has more waiting: read again at once.
            behind = any(len(rows) >= asked for key, rows in result or [] if key != self._wake_key)
            for key, rows in result or []:
                if not rows:
                    continue
                if key == self._wake_key:
                    self._wake_id = rows[-1][0]
                    continue
                follow = self._follows.get(key)
                if follow is None:
                    continue
                _, handler = follow
                self._follows[key] = (rows[-1][0], handler)
                entries = [LogEntry.from_fields(rid, fields) for rid, fields in rows]
                try:
                    handler(entries)
                    if self.observer is not None:
                        self.observer(key, entries)
                except Exception:
                    log.exception("event log handler failed for %s", key)
            if result and self._coalesce and not behind:
                # Under load every read would return a few entries of a few logs, and each read
                # names every followed log. Waiting a moment lets entries gather, so one read
                # carries many; an idle log still wakes the read at once.
                await asyncio.sleep(self._coalesce)
