"""Reading event logs on Redis: one-shot reads (`LogReads`) and the gateway's follower
(`LogReader`), which follows many conversations with few connections: one blocking read on a
single server, one per partition on Redis Cluster (docs/operations.md#redis-cluster)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from durachat.protocol import MAIN_BRANCH
from durachat_infra.eventlog.entries import LogEntry
from durachat_infra.eventlog.port import EntryHandler
from durachat_infra.eventlog.scripts import SNAPSHOT
from durachat_infra.eventlog.state import StreamState
from durachat_infra.keys import PARTITION_TAGS, ConversationKeys
from durachat_infra.redis_client import RedisClient, is_cluster, register_script
from durachat_infra.tasks import cancel_and_wait

log = logging.getLogger(__name__)

__all__ = ["EntryHandler", "LogReader", "LogReads", "read_range", "read_state", "read_states"]


async def read_range(
    redis: RedisClient, keys: ConversationKeys, start: str = "-", *, page: int = 1000
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
    redis: RedisClient, keys: ConversationKeys, branch: str = MAIN_BRANCH
) -> StreamState:
    """The stream state of a conversation's branch as the owner left it."""
    return (await read_states(redis, keys)).get(branch) or StreamState()


async def read_states(redis: RedisClient, keys: ConversationKeys) -> dict[str, StreamState]:
    """The stream state of every branch of a conversation as the owner left it."""
    fields: dict[str, str] = await redis.hgetall(keys.state)  # type: ignore[misc]
    return StreamState.all_from_hash(fields)


class LogReads:
    """One-shot reads of conversation logs and their stream state on Redis (the read part of
    the event log port, `LogReadsPort`)."""

    def __init__(self, redis: RedisClient) -> None:
        self._redis = redis
        self._snapshot = register_script(redis, SNAPSHOT)

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
    On Redis Cluster a read may only name keys of one slot, so there is such a read per
    partition that has followed logs (`keys.PARTITIONS` at most), each with its own wake
    stream. Handlers are called in entry order, synchronously, on the event loop.
    """

    def __init__(
        self,
        redis: RedisClient,
        blocking: RedisClient,
        wake_key: Callable[[str], str],
        *,
        block_ms: int = 5000,
        coalesce: float = 0.001,
        read_bytes: int = 4 * 1024 * 1024,
    ):
        """`blocking`: the client of the blocking reads (a single connection on one server; on
        a cluster, a client of its own whose pool gives each read a connection). `wake_key`:
        the wake stream of a partition. `read_bytes`: about how many bytes of entries one read
        may bring (the count asked for follows the size of the entries read last), so a burst
        of large entries is not pulled into memory all at once."""
        super().__init__(redis)
        self._blocking = blocking
        self._wake_key = wake_key
        self._per_partition = is_cluster(blocking)
        self._options = _ReadOptions(block_ms, coalesce, read_bytes)
        self._follows: dict[str, _Follow] = {}
        """By log key: every followed log, with the read that covers it."""
        self._reads: dict[str, _BlockingRead] = {}
        """By partition (`""` for the one read on a single server)."""
        self._started = False
        self.observer: Callable[[str, list[LogEntry]], None] | None = None
        """Also handed every entry read (with the key of its log), after the conversation's
        handler: the gateway sees the ends of turns with it."""

    async def start(self) -> None:
        """Start following (call once)."""
        self._started = True
        if not self._per_partition:
            self._read_for("")
        for read in self._reads.values():
            read.start()

    async def stop(self) -> None:
        """Stop following everything."""
        self._started = False
        reads, self._reads = list(self._reads.values()), {}
        for read in reads:
            await read.stop()

    def follow(self, keys: ConversationKeys, after: str, handler: EntryHandler) -> None:
        """Deliver every entry after `after` of `keys.log` to `handler`."""
        read = self._read_for(keys.partition if self._per_partition else "")
        self._follows[keys.log] = _Follow(after, handler, read)
        read.logs.add(keys.log)
        if self._started and read.task is None:
            read.start()
        elif read.task is not None:
            read.wake()

    def unfollow(self, keys: ConversationKeys) -> None:
        """Stop delivering entries of `keys.log`."""
        follow = self._follows.pop(keys.log, None)
        if follow is not None:
            follow.read.logs.discard(keys.log)

    def _read_for(self, partition: str) -> _BlockingRead:
        read = self._reads.get(partition)
        if read is None:
            wake = self._wake_key(partition or PARTITION_TAGS[0])
            read = _BlockingRead(self, wake, self._options)
            self._reads[partition] = read
        return read

    def _deliver(self, key: str, rows: list[Any]) -> None:
        follow = self._follows.get(key)
        if follow is None:
            return
        follow.after = rows[-1][0]
        entries = [LogEntry.from_fields(rid, fields) for rid, fields in rows]
        try:
            follow.handler(entries)
            if self.observer is not None:
                self.observer(key, entries)
        except Exception:
            log.exception("event log handler failed for %s", key)


@dataclass(slots=True)
class _Follow:
    after: str
    handler: EntryHandler
    read: _BlockingRead


@dataclass(frozen=True, slots=True)
class _ReadOptions:
    block_ms: int
    coalesce: float
    read_bytes: int


class _BlockingRead:
    """One blocking `XREAD` loop over some followed logs (all of them, or one partition's)
    and its wake stream."""

    def __init__(self, reader: LogReader, wake_key: str, options: _ReadOptions) -> None:
        self._reader = reader
        self._redis = reader._redis
        self._blocking = reader._blocking
        self._wake_key = wake_key
        self._options = options
        self.logs: set[str] = set()
        self._count = MAX_READ_COUNT
        self._largest = 0.0
        """The largest entry read lately (halved at each read of smaller ones)."""
        self._wake_id = "$"
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(
                self._run(), name=f"log-reader:{self._wake_key}"
            )

    async def stop(self) -> None:
        task, self.task = self.task, None
        await cancel_and_wait(task)
        try:
            await self._redis.delete(self._wake_key)
        except RedisError as exc:
            log.warning("could not delete the wake stream: %s", exc)

    def wake(self) -> None:
        async def wake() -> None:
            try:
                await self._redis.xadd(self._wake_key, {"w": "1"}, maxlen=16)
            except RedisError as exc:
                log.warning("could not wake the log reader: %s", exc)

        asyncio.get_running_loop().create_task(wake())

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
        fit = int(self._options.read_bytes / max(self._largest, 1.0))
        return max(1, min(MAX_READ_COUNT, fit))

    async def _run(self) -> None:
        # The id to read the wake stream after, resolved before the first read: a read asking
        # for "$" would miss a wake written while it was on its way.
        try:
            await self._redis.xadd(self._wake_key, {"w": "1"}, maxlen=16)
            last = await self._redis.xrevrange(self._wake_key, count=1)
        except RedisError as exc:
            log.warning("could not start reading event logs: %s", exc)
            last = []
        self._wake_id = last[0][0] if last else "0-0"
        await self._loop()

    async def _loop(self) -> None:
        delay = 0.05
        follows = self._reader._follows
        while True:
            streams: dict[Any, Any] = {self._wake_key: self._wake_id}
            for key in self.logs:
                streams[key] = follows[key].after
            try:
                result = await self._blocking.xread(
                    streams, block=self._options.block_ms, count=self._count
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
                if key in self.logs:
                    self._reader._deliver(key, rows)
            if self._options.coalesce and not behind and _logs_in(result, self._wake_key) > 1:
                # Under load every read would return a few entries of a few logs, and each read
                # names every followed log. Waiting a moment lets entries gather, so one read
                # carries many; a read that found one conversation's entries is not a load, and
                # reads again at once (its next chunk is not held back; an idle log blocks).
                await asyncio.sleep(self._options.coalesce)


def _logs_in(result: Any, wake_key: str) -> int:
    """How many followed logs an `XREAD` reply brought entries of."""
    return sum(1 for key, rows in result or () if rows and key != wake_key)
