"""The Redis key layout: what keeps keys used together on one slot of a Redis Cluster."""

from __future__ import annotations

import uuid

import pytest
from redis.crc import key_slot

from durachat_infra.keys import (
    PARTITION_TAGS,
    PARTITIONS,
    ClusterKeys,
    ConversationKeys,
    JobKeys,
    TenantKeys,
    conversation_tag,
    partition_of,
)
from durachat_infra.redis_client import parse_nodes

SLOTS = 16384


def _slot(key: str) -> int:
    return key_slot(key.encode())


def test_partition_tags_sit_in_the_middle_of_equal_slot_ranges() -> None:
    span = SLOTS // PARTITIONS
    for i, tag in enumerate(PARTITION_TAGS):
        assert abs(_slot(f"{{{tag}}}") - (i * span + span // 2)) <= 8


@pytest.mark.parametrize("masters", [2, 3, 4, 8, 16])
def test_partitions_divide_evenly_among_masters_with_equal_slot_ranges(masters: int) -> None:
    per_master = [0] * masters
    for tag in PARTITION_TAGS:
        per_master[_slot(tag) * masters // SLOTS] += 1
    assert max(per_master) - min(per_master) <= 1


def test_every_key_of_a_conversation_is_on_its_partition_slot() -> None:
    keys = ConversationKeys("dc", conversation_tag("acme", "chat-agent", "a name"))
    names = [keys.log, keys.state, keys.lease, keys.epoch, keys.log_bytes, keys.appended]
    assert len(set(names)) == len(names)
    assert {_slot(name) for name in names} == {_slot(f"{{{keys.partition}}}")}


def test_conversations_spread_over_every_partition() -> None:
    seen: dict[str, int] = {}
    for i in range(3200):
        tag = conversation_tag("t", "a", f"c{i}")
        seen[partition_of(tag)] = seen.get(partition_of(tag), 0) + 1
    assert set(seen) == set(PARTITION_TAGS)
    assert min(seen.values()) > 3200 / PARTITIONS / 2


def test_a_log_key_found_by_scan_gives_back_its_conversation() -> None:
    keys = ConversationKeys("dc:x", conversation_tag("t", "a", "n"))
    assert ConversationKeys.from_log_key("dc:x", keys.log) == keys
    pattern = ConversationKeys.log_pattern("dc:x")
    assert pattern.startswith("dc:x:{") and pattern.endswith(":log")


def test_a_gateway_has_a_wake_stream_on_each_partition_slot() -> None:
    keys = ClusterKeys("dc")
    for tag in PARTITION_TAGS:
        assert _slot(keys.gateway_wake("gw-1", tag)) == _slot(f"{{{tag}}}")
    assert keys.gateway_wake("gw-1", PARTITION_TAGS[0]) != keys.gateway_wake("gw-2")


def test_membership_keys_share_a_slot() -> None:
    keys = ClusterKeys("dc")
    assert _slot(keys.shards) == _slot(keys.shard("a")) == _slot(keys.shard("b"))


def test_a_tenants_keys_share_a_slot() -> None:
    keys = TenantKeys("dc", "acme")
    assert len({_slot(keys.connections), _slot(keys.turns), _slot(keys.rate)}) == 1


@pytest.mark.parametrize("prefix", ["dc", "e1234abcd", "a:b"])
def test_every_key_of_the_job_queue_is_on_the_slot_of_arqs_own_key(prefix: str) -> None:
    keys = JobKeys(prefix)
    job = keys.job_id(uuid.uuid4().hex)
    cron_run = f"{keys.cron_name('sweep_membership')}:1796159368024"
    names = [
        keys.queue,
        f"{keys.queue}:health-check",
        f"arq:job:{job}",
        f"arq:in-progress:{job}",
        f"arq:result:{job}",
        f"arq:retry:{job}",
        f"arq:job:{cron_run}",
        "arq:abort",
    ]
    assert {_slot(name) for name in names} == {_slot("arq:abort")}
    assert JobKeys("other").queue != keys.queue


def test_cluster_nodes_are_parsed() -> None:
    assert parse_nodes("10.0.0.1:7000, redis-1:7001,[::1]:7002") == [
        ("10.0.0.1", 7000),
        ("redis-1", 7001),
        ("::1", 7002),
    ]
    for bad in ("", " , ", "redis-1", "redis-1:x", ":7000"):
        with pytest.raises(ValueError):
            parse_nodes(bad)
