"""Every Redis key durachat uses, in one place.

Keys used together share a hash tag, so on Redis Cluster they live on one slot and one script or
read can name them all (docs/operations.md#redis-cluster). A conversation's keys carry the tag of
its *partition*: one of `PARTITIONS` tags chosen so their slots are spread evenly over the slot
space, so a gateway following many conversations needs one read per partition, not one per
conversation, and the partitions divide evenly among masters holding equal slot ranges.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from dataclasses import dataclass

from redis.crc import key_slot

PARTITION_TAGS = (
    "p01284",
    "p1552",
    "p24962",
    "p3944",
    "p44868",
    "p52690",
    "p62742",
    "p71825",
    "p81496",
    "p93846",
    "pa3917",
    "pb91",
    "pc2499",
    "pd2115",
    "pe3489",
    "pf685",
)
"""Hash tags of the partitions: the slot of tag `i` is the middle of the `i`-th sixteenth of the
16,384 slots (checked by the unit tests). Part of the key layout: never reorder or change."""

PARTITIONS = len(PARTITION_TAGS)
"""How many partitions conversations are spread over (and so how many Redis Cluster masters
share the event logs evenly, at most)."""


def partition_of(tag: str) -> str:
    """The partition hash tag of the conversation whose tag is `tag`."""
    return PARTITION_TAGS[zlib.crc32(tag.encode()) % PARTITIONS]


def conversation_tag(tenant: str, agent: str, name: str) -> str:
    """Stable short tag of a conversation identity (names may contain any character)."""
    raw = f"{tenant}\x00{agent}\x00{name}".encode()
    return hashlib.blake2b(raw, digest_size=10).hexdigest()


@dataclass(frozen=True, slots=True)
class ConversationKeys:
    """Keys of one conversation: `{prefix}:{<partition>}:<tag>:<name>`."""

    prefix: str
    tag: str

    @property
    def partition(self) -> str:
        """The hash tag of the conversation's partition (all its keys are on its slot)."""
        return partition_of(self.tag)

    def _key(self, name: str) -> str:
        return f"{self.prefix}:{{{partition_of(self.tag)}}}:{self.tag}:{name}"

    @property
    def log(self) -> str:
        """Redis Stream: the conversation's event log (replay and broadcast)."""
        return self._key("log")

    @property
    def state(self) -> str:
        """Hash: the stream state gateways need for the resume handshake."""
        return self._key("state")

    @property
    def lease(self) -> str:
        """String: the id of the shard holding the conversation (with a TTL)."""
        return self._key("lease")

    @property
    def epoch(self) -> str:
        """Counter: the fencing epoch, incremented on every lease acquisition."""
        return self._key("epoch")

    @property
    def log_bytes(self) -> str:
        """String: about how many bytes the log's entries hold (their values), so the append
        script can bound the log in bytes as well as in entries."""
        return self._key("logbytes")

    @property
    def appended(self) -> str:
        """Hash (with a TTL): the token and entry ids of the last batch appended to the log,
        so a batch written again after a lost reply is not appended twice."""
        return self._key("appended")

    @staticmethod
    def log_pattern(prefix: str) -> str:
        """A `SCAN` pattern matching the log key of every conversation under `prefix`."""
        return f"{prefix}:{{*}}:*:log"

    @classmethod
    def from_log_key(cls, prefix: str, log_key: str) -> ConversationKeys:
        """The keys of the conversation whose log key is `log_key` (found by `log_pattern`)."""
        tagged = log_key[len(prefix) + 1 : -len(":log")]
        return cls(prefix, tagged.rsplit(":", 1)[-1])


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """Keys of cluster membership."""

    prefix: str

    @property
    def _members(self) -> str:
        # One hash tag for the index and the descriptors, so one MGET reads them all.
        return f"{self.prefix}:{{{self.prefix}:members}}"

    @property
    def shards(self) -> str:
        """Sorted set of shard ids, scored by their last heartbeat (epoch seconds)."""
        return f"{self._members}:shards"

    def shard(self, shard_id: str) -> str:
        """String with a TTL: the JSON descriptor of a live shard."""
        return f"{self._members}:shard:{shard_id}"

    def gateway_wake(self, gateway_id: str, partition: str = PARTITION_TAGS[0]) -> str:
        """Stream a gateway writes to itself to wake its blocked read of the logs of one
        partition (on Redis Cluster a read names only keys of one slot)."""
        return f"{self.prefix}:{{{partition}}}:gw:{gateway_id}:wake"

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


ARQ_FIXED_KEY = "arq:abort"
"""The one key arq names without a job id (its set of aborted jobs), touched by the same
transaction as the job's own keys when a job finishes."""


@functools.cache
def _queue_tag(prefix: str) -> str:
    """A hash tag, made from `prefix`, on the slot of `ARQ_FIXED_KEY`."""
    want = key_slot(ARQ_FIXED_KEY.encode())
    n = 0
    while key_slot(f"{prefix}:jobs:{n}".encode()) != want:
        n += 1
    return f"{prefix}:jobs:{n}"


@dataclass(frozen=True, slots=True)
class JobKeys:
    """Names that place every key of the job queue on one slot, so arq's transactions work on
    Redis Cluster. arq's keys are its own (`arq:job:<id>`, `arq:in-progress:<id>`, …, the
    queue, and `arq:abort`): the queue's name and every job id carry a hash tag chosen to fall
    on the slot of `arq:abort`."""

    prefix: str

    @property
    def tag(self) -> str:
        """The hash tag of the queue's slot."""
        return f"{{{_queue_tag(self.prefix)}}}"

    @property
    def queue(self) -> str:
        """The arq queue (a sorted set; its health-check key follows its name)."""
        return f"{self.tag}:queue"

    def job_id(self, job_id: str) -> str:
        """The id arq stores a job under (`job_id` made by the caller or at random)."""
        return f"{self.tag}{job_id}"

    def cron_name(self, name: str) -> str:
        """The name of a scheduled job: arq makes a scheduled run's id from it."""
        return f"{self.tag}{name}"
