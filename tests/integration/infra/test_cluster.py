"""Membership, rendezvous ownership and leases on a real Redis."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from durachat_infra.cluster import (
    ClusterView,
    LeaseHeldError,
    Leases,
    ShardInfo,
    ShardRegistration,
    owner_of,
)
from durachat_infra.keys import ClusterKeys, ConversationKeys
from support.waiting import eventually


def test_rendezvous_moves_only_the_removed_shards_keys() -> None:
    shards = ["s1", "s2", "s3"]
    keys = [f"conv-{i}" for i in range(3000)]
    before = {k: owner_of(k, shards) for k in keys}
    counts = {s: sum(1 for o in before.values() if o == s) for s in shards}
    assert all(800 < c < 1200 for c in counts.values()), counts
    after = {k: owner_of(k, ["s1", "s3"]) for k in keys}
    moved = [k for k in keys if before[k] != after[k]]
    assert moved and all(before[k] == "s2" for k in moved)
    assert owner_of("x", []) is None


async def test_registration_heartbeat_and_expiry(redis: Redis, key_prefix: str) -> None:
    keys = ClusterKeys(key_prefix)
    info = ShardInfo(id="s1", pid=1, address="127.0.0.1:1", started_at=time.time(), agents=("a",))
    reg = ShardRegistration(redis, keys, info, interval=0.05, ttl=0.3, active=lambda: 7)
    view = ClusterView(redis, keys, refresh=0.05)
    await reg.start()
    shards = await view.refresh()
    assert shards["s1"].agents == ("a",)
    assert shards["s1"].active_conversations == 7
    await reg.stop()
    assert "s1" not in await view.refresh()
    # A shard that stops heartbeating without deregistering drops out within its TTL.
    reg2 = ShardRegistration(redis, keys, info, interval=10, ttl=0.2)
    await reg2.start()
    assert "s1" in await view.refresh()
    await eventually(lambda: _absent(view, "s1"), timeout=3)
    assert reg2._task is not None
    reg2._task.cancel()


async def _absent(view: ClusterView, shard_id: str) -> bool:
    return shard_id not in await view.refresh()


async def test_lease_epochs_fence_and_takeover(redis: Redis, key_prefix: str) -> None:
    cluster = ClusterKeys(key_prefix)
    conv = ConversationKeys(key_prefix, "c1")
    a = Leases(redis, cluster, "a", ttl=5)
    b = Leases(redis, cluster, "b", ttl=5)
    await redis.set(cluster.shard("a"), "{}", px=5000)
    first = await a.acquire(conv)
    assert first.fresh and first.epoch == 1
    again = await a.acquire(conv)
    assert not again.fresh and again.epoch == 1
    with pytest.raises(LeaseHeldError):
        await b.acquire(conv)
    # Shard a dies: its membership record is gone, so b takes over at once with a new epoch.
    await redis.delete(cluster.shard("a"))
    taken = await b.acquire(conv)
    assert taken.fresh and taken.epoch == 2
    assert not await a.renew(conv)
    assert await b.renew(conv)
    await b.release(conv)
    assert await redis.get(conv.lease) is None


async def test_epoch_can_move_past_what_the_database_saw(redis: Redis, key_prefix: str) -> None:
    cluster = ClusterKeys(key_prefix)
    conv = ConversationKeys(key_prefix, "lost")
    leases = Leases(redis, cluster, "a", ttl=5)
    grant = await leases.acquire(conv)
    assert grant.epoch == 1
    # Redis forgot: the database already saw epoch 7.
    assert await leases.advance_epoch(conv, 8) == 8
    assert await leases.advance_epoch(conv, 3) == 9
    other = Leases(redis, cluster, "b", ttl=5)
    with pytest.raises(LeaseHeldError):
        await other.advance_epoch(conv, 20)


async def test_a_lost_lease_is_taken_back_only_if_nobody_took_it(
    redis: Redis, key_prefix: str
) -> None:
    cluster = ClusterKeys(key_prefix)
    conv = ConversationKeys(key_prefix, "reclaim")
    a = Leases(redis, cluster, "a", ttl=5)
    b = Leases(redis, cluster, "b", ttl=5)
    grant = await a.acquire(conv)
    assert await a.reclaim(conv, grant.epoch)  # still held: renewed
    # It expired (Redis was away longer than the TTL); nobody took it meanwhile.
    await redis.delete(conv.lease)
    assert await a.reclaim(conv, grant.epoch)
    assert await redis.get(conv.lease) == "a"
    assert int(await redis.get(conv.epoch) or 0) == grant.epoch
    # Redis lost everything: the lease and the counter, which comes back at the epoch.
    await redis.delete(conv.lease, conv.epoch)
    assert await a.reclaim(conv, grant.epoch)
    assert int(await redis.get(conv.epoch) or 0) == grant.epoch
    # Someone else began a tenure meanwhile: never taken back, held or not.
    await redis.delete(conv.lease)
    taken = await b.acquire(conv)
    assert taken.epoch == grant.epoch + 1
    assert not await a.reclaim(conv, grant.epoch)
    await b.release(conv)
    assert not await a.reclaim(conv, grant.epoch)
    assert await redis.get(conv.lease) is None


async def test_a_batch_written_again_after_a_lost_reply_is_appended_once(
    redis: Redis, key_prefix: str
) -> None:
    """The writer sends a batch again when Redis' reply is lost (a connection cut after the
    script ran): the append script recognises its token and appends nothing, even once the
    lease is gone (it was applied under the lease)."""
    from durachat_infra.eventlog.scripts import APPEND

    keys = ConversationKeys(key_prefix, "twice")
    script = redis.register_script(APPEND)
    names = [keys.log, keys.state, keys.lease, keys.appended, keys.log_bytes]
    await redis.set(keys.lease, "me")
    entry = ["c", '{"n":1}', "*", "r", "", ""]
    first = await script(keys=names, args=["me", "100", "token-1", "0", *entry])
    await redis.delete(keys.lease)
    again = await script(keys=names, args=["me", "100", "token-1", "0", *entry])
    assert again == first and len(first) == 1
    assert await redis.xlen(keys.log) == 1
    # Another batch is fenced as ever.
    with pytest.raises(Exception, match="FENCED"):
        await script(keys=names, args=["me", "100", "token-2", "0", *entry])
