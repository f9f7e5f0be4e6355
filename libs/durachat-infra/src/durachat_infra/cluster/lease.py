"""Per-conversation leases with a fencing epoch."""

from __future__ import annotations

from dataclasses import dataclass

from durachat_infra.keys import ClusterKeys, ConversationKeys
from durachat_infra.redis_client import RedisClient, register_script, run_script_many

# KEYS: lease, epoch. ARGV: shard id, ttl ms, whether the current holder may be displaced ("1"
# when its membership record is gone). Returns {epoch, acquired-now flag} or {-1, holder}.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {tonumber(redis.call('GET', KEYS[2]) or '0'), 0}
end
if holder and ARGV[3] ~= '1' then
  return {-1, holder}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {redis.call('INCR', KEYS[2]), 1}
"""

# KEYS: lease. ARGV: shard id, ttl ms. 1 if still held and renewed, 0 if lost.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: lease, epoch. ARGV: shard id, minimum epoch. Moves the epoch counter past a value the
# database has already seen (after Redis lost its data); only the lease holder may.
_ADVANCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
  return tonumber(ARGV[2])
end
return redis.call('INCR', KEYS[2])
"""

# KEYS: lease, epoch. ARGV: shard id, ttl ms, the holder's epoch. Takes back a lease its holder
# lost without anyone else taking it: it is vacant, and no tenure began after the holder's (the
# counter is still at its epoch, or was lost with Redis' data). 1 if held now, 0 if not.
_RECLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then return 0 end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current > tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """A held lease: the fencing epoch that every write of this tenure carries."""

    epoch: int
    fresh: bool
    """True when this call acquired the lease (as opposed to re-confirming it)."""


class LeaseHeldError(Exception):
    """Another live shard holds the lease."""

    def __init__(self, holder: str) -> None:
        super().__init__(f"lease held by {holder}")
        self.holder = holder


class Leases:
    """Acquire, renew and release conversation leases for one shard."""

    def __init__(self, redis: RedisClient, cluster: ClusterKeys, shard_id: str, ttl: float) -> None:
        self._redis = redis
        self._cluster = cluster
        self._shard_id = shard_id
        self._ttl_ms = str(int(ttl * 1000))
        self._acquire = register_script(redis, _ACQUIRE)
        self._renew = register_script(redis, _RENEW)
        self._release = register_script(redis, _RELEASE)
        self._advance = register_script(redis, _ADVANCE)
        self._reclaim = register_script(redis, _RECLAIM)

    async def acquire(self, keys: ConversationKeys) -> LeaseGrant:
        """Take the lease (or confirm it); raises `LeaseHeldError` if a live shard holds it.

        A holder whose membership record has expired is dead, and its lease is taken over at
        once: the new epoch fences out anything it might still try to write.
        """
        result = await self._acquire(
            keys=[keys.lease, keys.epoch], args=[self._shard_id, self._ttl_ms, "0"]
        )
        if int(result[0]) >= 0:
            return LeaseGrant(epoch=int(result[0]), fresh=bool(int(result[1])))
        holder = str(result[1])
        if await self._redis.exists(self._cluster.shard(holder)):
            raise LeaseHeldError(holder)
        result = await self._acquire(
            keys=[keys.lease, keys.epoch], args=[self._shard_id, self._ttl_ms, "1"]
        )
        return LeaseGrant(epoch=int(result[0]), fresh=bool(int(result[1])))

    async def advance_epoch(self, keys: ConversationKeys, at_least: int) -> int:
        """Take a fresh epoch of at least `at_least` for a held lease.

        Needed when the database has seen a higher epoch than Redis' counter, which happens
        after Redis lost its data. Raises `LeaseHeldError` if the lease was lost meanwhile.
        """
        epoch = int(
            await self._advance(keys=[keys.lease, keys.epoch], args=[self._shard_id, str(at_least)])
        )
        if epoch < 0:
            raise LeaseHeldError("another shard")
        return epoch

    async def renew(self, keys: ConversationKeys) -> bool:
        """Extend the lease; False if it was lost."""
        return bool(await self._renew(keys=[keys.lease], args=[self._shard_id, self._ttl_ms]))

    async def renew_many(self, many: list[ConversationKeys]) -> list[bool]:
        """Extend many leases in one round trip."""
        calls = [([keys.lease], [self._shard_id, self._ttl_ms]) for keys in many]
        return [bool(r) for r in await run_script_many(self._redis, self._renew, calls)]

    async def reclaim(self, keys: ConversationKeys, epoch: int) -> bool:
        """Take back a lease this shard held at `epoch` and lost (it expired while Redis was
        unreachable, or Redis lost its data), provided nobody took it meanwhile: it is vacant
        and no later epoch was handed out. The tenure goes on under the same epoch, so the
        database's fencing is unchanged; the counter is restored if it was lost. True if the
        lease is held now."""
        result = await self._reclaim(
            keys=[keys.lease, keys.epoch], args=[self._shard_id, self._ttl_ms, str(epoch)]
        )
        return bool(int(result))

    async def release(self, keys: ConversationKeys) -> None:
        """Give the lease up if still held."""
        await self._release(keys=[keys.lease], args=[self._shard_id])
