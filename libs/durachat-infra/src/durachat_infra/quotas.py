"""Per-tenant quotas (docs/security.md#quotas): the limits in force for a tenant, and the
counters that enforce them across the cluster in Redis.

Every counter of a tenant lives under one hash tag (`TenantKeys`), and each check-and-count is
one Lua script, so two gateways admitting at the same moment can never both take the last
place. Scripts read Redis' own clock, so gateways whose clocks differ still agree.

* connections and concurrent turns are sorted sets of members scored by when they expire: a
  gateway that dies without closing its connections loses them after `CONNECTION_TTL`, and a
  turn whose end was missed is forgotten after `TURN_TTL`;
* turns per minute is a token bucket of `turns_per_minute` tokens refilled continuously;
* tokens per day is a counter per UTC day.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from durachat_infra.keys import ConversationKeys, TenantKeys
from durachat_infra.redis_client import RedisClient, register_script, run_script_many
from durachat_infra.settings import QuotaDefaults

__all__ = [
    "CONNECTION_TTL",
    "QUOTA_NAMES",
    "TURN_TTL",
    "Admission",
    "QuotaCounters",
    "Quotas",
    "Refusal",
    "estimate_tokens",
]

QUOTA_NAMES: Final = (
    "connections",
    "concurrent_turns",
    "turns_per_minute",
    "conversations",
    "tokens_per_day",
    "max_message_bytes",
    "max_messages_per_request",
)
"""Every quota, by the name the API and the errors use."""

CONNECTION_TTL: Final = 30.0
"""Seconds a connection's place lasts unless its gateway renews it (every third of that)."""

TURN_TTL: Final = 600.0
"""Seconds after which a turn whose end no gateway saw stops counting as running."""


def estimate_tokens(characters: int) -> int:
    """Model tokens estimated from text: four characters a token, rounded up."""
    return math.ceil(characters / 4) if characters > 0 else 0


@dataclass(frozen=True, slots=True)
class Quotas:
    """The quotas in force for one tenant; 0 means no limit."""

    connections: int
    concurrent_turns: int
    turns_per_minute: int
    conversations: int
    tokens_per_day: int
    max_message_bytes: int
    max_messages_per_request: int

    @classmethod
    def resolve(cls, defaults: QuotaDefaults, overrides: Mapping[str, int]) -> Quotas:
        """The defaults with a tenant's overrides applied (unknown names are ignored)."""
        values = {name: int(getattr(defaults, name)) for name in QUOTA_NAMES}
        values.update({k: int(v) for k, v in overrides.items() if k in values})
        return cls(**values)

    def to_json(self) -> dict[str, int]:
        """The quotas as the API shows them."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Admission:
    """What counting a chat request found.

    Attributes:
        refusal: the quota that refused it (nothing was counted), or None.
        running: the tenant's running turns, this one included.
        turns_left: what is left in the turns-per-minute bucket; None without a limit.
        tokens_today: the tenant's tokens of the day, this request's included.
    """

    refusal: Refusal | None
    running: int = 0
    turns_left: float | None = None
    tokens_today: int = 0


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request refused by a quota.

    Attributes:
        quota: which quota (one of `QUOTA_NAMES`).
        retry_after: seconds until trying again may succeed.
    """

    quota: str
    retry_after: int

    @property
    def message(self) -> str:
        """For humans."""
        return f"quota exceeded: {self.quota}"


# KEYS: connections. ARGV: member, limit (0: none), ttl. 1 if the member has its place.
_OPEN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local limit = tonumber(ARGV[2])
if limit > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= limit then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
return 1
"""

# KEYS: a sorted set. ARGV: ttl, members... Renews the members still there.
_RENEW = """
local t = redis.call('TIME')
local until_ = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', until_, ARGV[i])
end
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[1])) + 1)
return 1
"""

# KEYS: turns, rate, tokens of today. ARGV: member, turn ttl, concurrent limit, per-minute
# limit, tokens-per-day limit, tokens to count, seconds until the day ends. Checks the quotas
# in that order, counts nothing unless all pass; returns {quota refused, retry after}, or
# {'', 0, running turns, turns left in the bucket ('' without a limit), tokens used today}.
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local day_limit = tonumber(ARGV[5])
if day_limit > 0 and tonumber(redis.call('GET', KEYS[3]) or '0') >= day_limit then
  return {'tokens_per_day', tonumber(ARGV[7])}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local running = tonumber(ARGV[3])
if running > 0 and not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= running then
  return {'concurrent_turns', 1}
end
local rate = tonumber(ARGV[4])
local left = ''
if rate > 0 then
  local bucket = redis.call('HMGET', KEYS[2], 'tokens', 'at')
  local tokens = tonumber(bucket[1]) or rate
  local at = tonumber(bucket[2]) or now
  if now > at then tokens = math.min(rate, tokens + (now - at) * rate / 60) end
  if tokens < 1 then
    return {'turns_per_minute', math.ceil((1 - tokens) * 60 / rate)}
  end
  left = tostring(tokens - 1)
  redis.call('HSET', KEYS[2], 'tokens', left, 'at', tostring(now))
  redis.call('EXPIRE', KEYS[2], 120)
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
local add = tonumber(ARGV[6])
local used
if add > 0 then
  used = redis.call('INCRBY', KEYS[3], add)
  redis.call('EXPIRE', KEYS[3], 172800)
else
  used = tonumber(redis.call('GET', KEYS[3]) or '0')
end
return {'', 0, redis.call('ZCARD', KEYS[1]), left, used}
"""

# KEYS: connections, turns, rate. Live counts and the bucket's level now.
_USAGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local bucket = redis.call('HMGET', KEYS[3], 'tokens', 'at')
return {
  redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'),
  redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf'),
  bucket[1] or '', bucket[2] or '', tostring(now)
}
"""


def _day(moment: datetime | None = None) -> tuple[str, int]:
    """Today's key part (`YYYYMMDD`, UTC) and the seconds left of it."""
    now = moment or datetime.now(UTC)
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return now.strftime("%Y%m%d"), max(1, math.ceil((tomorrow - now).total_seconds()))


def turn_member(agent: str, name: str, request_id: str) -> str:
    """How a running turn is named in its tenant's set."""
    return json.dumps([agent, name, request_id], separators=(",", ":"), ensure_ascii=False)


def parse_turn_member(member: str) -> tuple[str, str, str] | None:
    """`(agent, name, request id)` of a member made by `turn_member`."""
    try:
        agent, name, request_id = json.loads(member)
    except (ValueError, TypeError):
        return None
    return str(agent), str(name), str(request_id)


class QuotaCounters:
    """The quota counters of every tenant in Redis."""

    def __init__(self, redis: RedisClient, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._open = register_script(redis, _OPEN)
        self._renew = register_script(redis, _RENEW)
        self._admit = register_script(redis, _ADMIT)
        self._usage = register_script(redis, _USAGE)

    def keys(self, tenant: str) -> TenantKeys:
        """The keys of a tenant's counters."""
        return TenantKeys(self._prefix, tenant)

    async def open_connection(self, tenant: str, member: str, limit: int) -> Refusal | None:
        """Take a place for a connection (`member`, unique in the cluster); a refusal if the
        tenant has `limit` already."""
        keys = self.keys(tenant)
        taken = await self._open(keys=[keys.connections], args=[member, limit, CONNECTION_TTL])
        return None if int(taken) else Refusal("connections", 1)

    async def close_connection(self, tenant: str, member: str) -> None:
        """Give a connection's place back."""
        await self._redis.zrem(self.keys(tenant).connections, member)

    async def renew_connections(self, members: Mapping[str, list[str]]) -> None:
        """Keep the places of open connections (`{tenant: [member, ...]}`), one round trip."""
        if not members:
            return
        calls = [
            ([self.keys(tenant).connections], [CONNECTION_TTL, *names])
            for tenant, names in members.items()
            if names
        ]
        await run_script_many(self._redis, self._renew, calls)

    async def admit_turn(
        self, tenant: str, member: str, quotas: Quotas, *, tokens: int = 0
    ) -> Admission:
        """Count a chat request against the tenant's turn quotas (concurrent turns, turns per
        minute, tokens per day) and its estimated input `tokens`; a refusal (and nothing
        counted) if one of them is used up, else the levels after counting it."""
        keys = self.keys(tenant)
        day, left = _day()
        answer = await self._admit(
            keys=[keys.turns, keys.rate, keys.tokens(day)],
            args=[
                member,
                TURN_TTL,
                quotas.concurrent_turns,
                quotas.turns_per_minute,
                quotas.tokens_per_day,
                tokens,
                left,
            ],
        )
        quota = str(answer[0])
        if quota:
            return Admission(Refusal(quota, int(answer[1])))
        _, _, running, turns_left, used = answer
        return Admission(
            None,
            running=int(running),
            turns_left=float(turns_left) if turns_left != "" else None,
            tokens_today=int(used),
        )

    async def end_turn(self, tenant: str, member: str) -> None:
        """A turn ended: it no longer counts as running."""
        await self._redis.zrem(self.keys(tenant).turns, member)

    async def running_turns(self, tenant: str) -> list[tuple[str, float]]:
        """The tenant's turns counted as running: `(member, when it expires)` (seconds since
        the epoch, by Redis' clock)."""
        rows = await self._redis.zrange(self.keys(tenant).turns, 0, -1, withscores=True)
        return [(str(member), float(score)) for member, score in rows]

    async def add_tokens(self, used: Mapping[str, int]) -> None:
        """Count model tokens used today (`{tenant: tokens}`), one round trip."""
        day, _ = _day()
        pipe = self._redis.pipeline(transaction=False)
        for tenant, tokens in used.items():
            if tokens > 0:
                key = self.keys(tenant).tokens(day)
                pipe.incrby(key, tokens)
                pipe.expire(key, 172_800)
        await pipe.execute()

    async def usage(self, tenant: str, quotas: Quotas) -> dict[str, Any]:
        """What the tenant uses now: open connections, running turns, turns left in the
        minute's bucket, tokens used today."""
        keys = self.keys(tenant)
        day, _ = _day()
        connections, turns, level, at, now = await self._usage(
            keys=[keys.connections, keys.turns, keys.rate]
        )
        tokens_today = int(await self._redis.get(keys.tokens(day)) or 0)
        rate = quotas.turns_per_minute
        available: float | None = None
        if rate:
            available = float(rate)
            if level:
                elapsed = max(0.0, float(now) - float(at))
                available = min(float(rate), float(level) + elapsed * rate / 60)
        return {
            "connections": int(connections),
            "concurrent_turns": int(turns),
            "turns_available": None if available is None else math.floor(available),
            "tokens_today": tokens_today,
        }

    async def has_log(self, keys: ConversationKeys) -> bool:
        """Whether a conversation has an event log (so it exists: a log is written from its
        first frame on and only ever trimmed, never deleted, while the conversation lives)."""
        return bool(await self._redis.exists(keys.log))

    async def forget(self, tenant: str) -> int:
        """Delete every counter of the tenant; returns how many keys went."""
        found = [key async for key in self._redis.scan_iter(match=self.keys(tenant).all_pattern())]
        return int(await self._redis.delete(*found)) if found else 0
