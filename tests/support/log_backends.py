"""Backends of the event log port for its conformance suite (`tests/integration/infra`).

A `LogBackend` opens writers, readers, followers and the upkeep of one backend (`memory`, or
`redis`: the session's real Redis) under a key prefix of the test's own, and sets leases the way
the cluster's lease script does. Everything it opens is closed by `close()`.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Protocol

from durachat_infra.eventlog import LogMaintenance, LogReader, LogReads, LogWriter
from durachat_infra.eventlog.memory import (
    MemoryEventLog,
    MemoryLogMaintenance,
    MemoryLogReader,
    MemoryLogReads,
    MemoryLogWriter,
)
from durachat_infra.eventlog.port import (
    LogFollowerPort,
    LogMaintenancePort,
    LogReadsPort,
    LogWriterPort,
)
from durachat_infra.keys import ClusterKeys, ConversationKeys
from durachat_infra.redis_client import RedisClient, connect_redis

OnFenced = Callable[[ConversationKeys], None]
Reclaim = Callable[[ConversationKeys], Awaitable[bool]]


class LogBackend(Protocol):
    """Opens the parts of one event log backend under one key prefix."""

    name: str
    """`memory`, `redis` or `redis-cluster`."""
    prefix: str
    """The key prefix of this test."""

    def keys(self, tag: str) -> ConversationKeys:
        """The keys of conversation `tag` under this test's prefix."""
        ...

    def writer(
        self,
        *,
        owner: str = "",
        maxlen: int = 10_000,
        max_bytes: int = 0,
        on_fenced: OnFenced | None = None,
        reclaim: Reclaim | None = None,
    ) -> LogWriterPort:
        """A writer (flushed when the test ends)."""
        ...

    def reads(self) -> LogReadsPort:
        """One-shot reads."""
        ...

    def follower(self, *, block_ms: int = 5000) -> LogFollowerPort:
        """A follower, not started yet (stopped when the test ends)."""
        ...

    def maintenance(self) -> LogMaintenancePort:
        """The upkeep of every log under this test's prefix."""
        ...

    async def set_lease(self, keys: ConversationKeys, holder: str | None) -> None:
        """Give the conversation's lease to `holder` (`None`: free it)."""
        ...

    async def close(self) -> None:
        """Flush the writers and stop the followers opened."""
        ...


class MemoryLogBackend:
    """A fresh `MemoryEventLog`."""

    name = "memory"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.log = MemoryEventLog()
        self._writers: list[LogWriterPort] = []
        self._followers: list[LogFollowerPort] = []

    def keys(self, tag: str) -> ConversationKeys:
        return ConversationKeys(self.prefix, tag)

    def writer(
        self,
        *,
        owner: str = "",
        maxlen: int = 10_000,
        max_bytes: int = 0,
        on_fenced: OnFenced | None = None,
        reclaim: Reclaim | None = None,
    ) -> LogWriterPort:
        writer = MemoryLogWriter(
            self.log,
            owner=owner,
            maxlen=maxlen,
            max_bytes=max_bytes,
            on_fenced=on_fenced,
            reclaim=reclaim,
        )
        self._writers.append(writer)
        return writer

    def reads(self) -> LogReadsPort:
        return MemoryLogReads(self.log)

    def follower(self, *, block_ms: int = 5000) -> LogFollowerPort:
        follower = MemoryLogReader(self.log)
        self._followers.append(follower)
        return follower

    def maintenance(self) -> LogMaintenancePort:
        return MemoryLogMaintenance(self.log, self.prefix)

    async def set_lease(self, keys: ConversationKeys, holder: str | None) -> None:
        self.log.set_lease(keys, holder)

    async def close(self) -> None:
        for writer in self._writers:
            await writer.close()
        for follower in self._followers:
            await follower.stop()


class RedisLogBackend:
    """The session's Redis (`redis`), or its Redis Cluster (`redis-cluster`, seeded by
    `nodes`); `redis` is a client of it."""

    def __init__(self, redis: RedisClient, url: str, prefix: str, nodes: str | None = None) -> None:
        self.name = "redis-cluster" if nodes else "redis"
        self.prefix = prefix
        self._redis = redis
        self._url = url
        self._nodes = nodes
        self._writers: list[LogWriterPort] = []
        self._followers: list[LogFollowerPort] = []
        self._blocking: list[RedisClient] = []

    def keys(self, tag: str) -> ConversationKeys:
        return ConversationKeys(self.prefix, tag)

    def writer(
        self,
        *,
        owner: str = "",
        maxlen: int = 10_000,
        max_bytes: int = 0,
        on_fenced: OnFenced | None = None,
        reclaim: Reclaim | None = None,
    ) -> LogWriterPort:
        writer = LogWriter(
            self._redis,
            owner=owner,
            maxlen=maxlen,
            max_bytes=max_bytes,
            on_fenced=on_fenced,
            reclaim=reclaim,
        )
        self._writers.append(writer)
        return writer

    def reads(self) -> LogReadsPort:
        return LogReads(self._redis)

    def follower(self, *, block_ms: int = 5000) -> LogFollowerPort:
        blocking = connect_redis(self._url, self._nodes, single_connection_client=True)
        self._blocking.append(blocking)
        wake_key = functools.partial(
            ClusterKeys(self.prefix).gateway_wake, f"follower-{len(self._followers)}"
        )
        follower = LogReader(self._redis, blocking, wake_key, block_ms=block_ms)
        self._followers.append(follower)
        return follower

    def maintenance(self) -> LogMaintenancePort:
        return LogMaintenance(self._redis, self.prefix)

    async def set_lease(self, keys: ConversationKeys, holder: str | None) -> None:
        if holder is None:
            await self._redis.delete(keys.lease)
        else:
            await self._redis.set(keys.lease, holder)

    async def close(self) -> None:
        for writer in self._writers:
            await writer.close()
        for follower in self._followers:
            await follower.stop()
        for blocking in self._blocking:
            await blocking.aclose()
