"""Shard membership in Redis: registration with a heartbeat TTL, and the live view of it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from redis.exceptions import RedisError

from durachat_infra.cluster.rendezvous import owner_of
from durachat_infra.keys import ClusterKeys
from durachat_infra.redis_client import RedisClient
from durachat_infra.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """A live shard as it registered itself."""

    id: str
    pid: int
    address: str
    """`host:port` of its internal API."""
    started_at: float
    agents: tuple[str, ...] = ()
    """Names of the agents it serves."""
    active_conversations: int = 0
    draining: bool = False
    """Shutting down: it finishes what it holds but takes no conversation on."""

    def to_json(self) -> str:
        """Serialise for the registry."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> ShardInfo:
        """Parse a registry record."""
        data = json.loads(raw)
        data["agents"] = tuple(data.get("agents", ()))
        return cls(**data)


class ShardRegistration:
    """Keeps one shard registered while it runs.

    The shard's record has a TTL of `ttl` seconds and is refreshed every `interval`; a shard that
    stops heartbeating drops out of every view within `ttl`.
    """

    def __init__(
        self,
        redis: RedisClient,
        keys: ClusterKeys,
        info: ShardInfo,
        *,
        interval: float,
        ttl: float,
        active: Callable[[], int] = lambda: 0,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._info = info
        self._interval = interval
        self._ttl_ms = int(ttl * 1000)
        self._active = active
        self._task: asyncio.Task[None] | None = None
        self._draining = False

    async def start(self) -> None:
        """Register now and keep heartbeating."""
        await self._beat()
        self._task = asyncio.create_task(self._loop(), name="shard-heartbeat")

    async def drain(self) -> None:
        """Announce that this shard is shutting down.

        It stays registered, so nobody takes its leases over while it finishes, but routing
        leaves it at once.
        """
        self._draining = True
        await self._beat()

    async def stop(self) -> None:
        """Stop heartbeating and deregister at once."""
        await cancel_and_wait(self._task)
        try:
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(self._keys.shard(self._info.id))
            pipe.zrem(self._keys.shards, self._info.id)
            await pipe.execute()
        except RedisError as exc:
            log.warning("could not deregister: %s", exc)

    async def _beat(self) -> None:
        info = ShardInfo(
            id=self._info.id,
            pid=self._info.pid,
            address=self._info.address,
            started_at=self._info.started_at,
            agents=self._info.agents,
            active_conversations=self._active(),
            draining=self._draining,
        )
        pipe = self._redis.pipeline(transaction=False)
        pipe.set(self._keys.shard(self._info.id), info.to_json(), px=self._ttl_ms)
        pipe.zadd(self._keys.shards, {self._info.id: time.time()})
        await pipe.execute()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._beat()
            except RedisError as exc:
                log.warning("heartbeat failed: %s", exc)


class ClusterView:
    """A periodically refreshed view of the live shards."""

    def __init__(self, redis: RedisClient, keys: ClusterKeys, *, refresh: float) -> None:
        self._redis = redis
        self._keys = keys
        self._refresh = refresh
        self._shards: dict[str, ShardInfo] = {}
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def shards(self) -> dict[str, ShardInfo]:
        """Live shards by id."""
        return self._shards

    def owner(self, key: str) -> ShardInfo | None:
        """The live shard owning `key`, by rendezvous hashing over shards not draining."""
        shard_id = owner_of(key, (i for i, s in self._shards.items() if not s.draining))
        return None if shard_id is None else self._shards[shard_id]

    async def start(self) -> None:
        """Load the view now and keep it fresh."""
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name="cluster-view")

    async def stop(self) -> None:
        """Stop refreshing."""
        await cancel_and_wait(self._task)

    async def refresh(self) -> dict[str, ShardInfo]:
        """Re-read the live shards from Redis."""
        ids = await self._redis.zrange(self._keys.shards, 0, -1)
        if not ids:
            self._shards = {}
            return self._shards
        raws = await self._redis.mget([self._keys.shard(i) for i in ids])
        shards: dict[str, ShardInfo] = {}
        stale: list[str] = []
        for shard_id, raw in zip(ids, raws, strict=True):
            if raw is None:
                stale.append(shard_id)
            else:
                shards[shard_id] = ShardInfo.from_json(raw)
        if stale:
            # Expired records leave their ids behind in the index; tidy them up.
            await self._redis.zrem(self._keys.shards, *stale)
        if set(shards) != set(self._shards):
            self._changed.set()
        self._shards = shards
        return shards

    async def wait_changed(self, timeout: float) -> bool:
        """Wait until the set of live shards changes (or `timeout`)."""
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            try:
                await self.refresh()
            except RedisError as exc:
                log.warning("cluster view refresh failed: %s", exc)
