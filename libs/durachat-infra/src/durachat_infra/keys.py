"""Every Redis key durachat uses, in one place.

A conversation's keys share a hash tag derived from its identity, so in Redis Cluster they live
on one slot and can be used together in scripts and transactions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


def conversation_tag(tenant: str, agent: str, name: str) -> str:
    """Stable short tag of a conversation identity (names may contain any character)."""
    raw = f"{tenant}\x00{agent}\x00{name}".encode()
    return hashlib.blake2b(raw, digest_size=10).hexdigest()


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """Keys of one conversation."""

    prefix: str
    tag: str

    @property
    def log(self) -> str:
        """Redis Stream: the conversation's event log (replay and broadcast)."""
        return f"{self.prefix}:{{{self.tag}}}:log"

    @property
    def state(self) -> str:
        """Hash: the stream state gateways need for the resume handshake."""
        return f"{self.prefix}:{{{self.tag}}}:state"

    @property
    def lease(self) -> str:
        """String: the id of the shard holding the conversation (with a TTL)."""
        return f"{self.prefix}:{{{self.tag}}}:lease"

    @property
    def epoch(self) -> str:
        """Counter: the fencing epoch, incremented on every lease acquisition."""
        return f"{self.prefix}:{{{self.tag}}}:epoch"

    @property
    def log_bytes(self) -> str:
        """String: about how many bytes the log's entries hold (their values), so the append
        script can bound the log in bytes as well as in entries."""
        return f"{self.prefix}:{{{self.tag}}}:logbytes"

    @property
    def appended(self) -> str:
        """Hash (with a TTL): the token and entry ids of the last batch appended to the log,
        so a batch written again after a lost reply is not appended twice."""
        return f"{self.prefix}:{{{self.tag}}}:appended"


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """Keys of cluster membership."""

    prefix: str

    @property
    def shards(self) -> str:
        """Sorted set of shard ids, scored by their last heartbeat (epoch seconds)."""
        return f"{self.prefix}:shards"

    def shard(self, shard_id: str) -> str:
        """String with a TTL: the JSON descriptor of a live shard."""
        return f"{self.prefix}:shard:{shard_id}"

    def gateway_wake(self, gateway_id: str) -> str:
        """Stream a gateway writes to itself to wake its blocked log readers."""
        return f"{self.prefix}:gw:{gateway_id}:wake"

    @property
    def auth_version(self) -> str:
        """Counter raised whenever tenants or their keys change: gateways reload what they
        check credentials against when it moves (docs/security.md)."""
        return f"{self.prefix}:auth:version"


@dataclass(frozen=True, slots=True)
class TenantKeys:
    """Keys of one tenant's quota counters (docs/security.md#quotas). They share a hash tag, so
    one script can check them all."""

    prefix: str
    tenant: str

    @property
    def _base(self) -> str:
        return f"{self.prefix}:{{tenant:{self.tenant}}}"

    @property
    def connections(self) -> str:
        """Sorted set: the tenant's open WebSockets, scored by when their entry expires."""
        return f"{self._base}:connections"

    @property
    def turns(self) -> str:
        """Sorted set: the tenant's chat requests not answered yet, scored by expiry."""
        return f"{self._base}:turns"

    @property
    def rate(self) -> str:
        """Hash: the token bucket of the tenant's turns per minute (`tokens`, `at`)."""
        return f"{self._base}:rate"

    def tokens(self, day: str) -> str:
        """Counter: model tokens used on a UTC day (`YYYYMMDD`)."""
        return f"{self._base}:tokens:{day}"

    def all_pattern(self) -> str:
        """A SCAN pattern matching every key of the tenant."""
        return f"{self.prefix}:{{tenant:{self.tenant}}}:*"


@dataclass(frozen=True, slots=True)
class EventKeys:
    """Keys of the event feed (docs/observability.md#subscribing-to-events). A tenant's stream
    shares the hash tag of its quota counters, so deleting the tenant's keys deletes it too."""

    prefix: str

    def tenant(self, tenant: str) -> str:
        """Stream: the events of one tenant's conversations."""
        return f"{self.prefix}:{{tenant:{tenant}}}:events"

    @property
    def all(self) -> str:
        """Stream: the events of every tenant (the operator's feed, and the webhooks')."""
        return f"{self.prefix}:events:all"

    @property
    def webhook_group(self) -> str:
        """Consumer group of the jobs workers on `all`, delivering events to webhooks."""
        return "webhooks"

    def dead_letters(self, tenant: str, webhook_id: str) -> str:
        """List: the deliveries to a webhook that failed their last try, newest first."""
        return f"{self.prefix}:{{tenant:{tenant}}}:webhook:{webhook_id}:dead"
