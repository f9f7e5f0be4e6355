"""Quota counters on a real Redis: connections, concurrent turns, turns per minute, tokens per
day; atomic under concurrent callers, per tenant, forgotten with the tenant."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from durachat_infra.quotas import QuotaCounters, Quotas, Refusal, turn_member
from durachat_infra.settings import QuotaDefaults


def quotas(**overrides: int) -> Quotas:
    return Quotas.resolve(QuotaDefaults(), overrides)


def test_overrides_replace_the_defaults_and_unknown_names_are_ignored() -> None:
    resolved = Quotas.resolve(QuotaDefaults(connections=7), {"turns_per_minute": 3, "bogus": 1})

    assert resolved.connections == 7
    assert resolved.turns_per_minute == 3
    assert set(resolved.to_json()) >= {"tokens_per_day", "max_messages_per_request"}


async def test_connections_are_limited_across_callers(redis: Redis, key_prefix: str) -> None:
    counters = QuotaCounters(redis, key_prefix)

    results = await asyncio.gather(
        *(counters.open_connection("acme", f"gw:{i}", 3) for i in range(10))
    )

    assert sum(r is None for r in results) == 3
    assert {r for r in results if r is not None} == {Refusal("connections", 1)}
    assert await counters.open_connection("other", "gw:0", 3) is None
    admitted = [f"gw:{i}" for i, r in enumerate(results) if r is None]
    await counters.close_connection("acme", admitted[0])
    assert await counters.open_connection("acme", "gw:new", 3) is None
    # A member already holding a place keeps it.
    assert await counters.open_connection("acme", admitted[1], 3) is None
    await counters.renew_connections({"acme": admitted[1:]})
    usage = await counters.usage("acme", quotas())
    assert usage["connections"] == 3


async def test_concurrent_turns_are_limited_until_turns_end(redis: Redis, key_prefix: str) -> None:
    counters = QuotaCounters(redis, key_prefix)
    limits = quotas(concurrent_turns=2, turns_per_minute=0)
    members = [turn_member("agent", "c", f"r{i}") for i in range(5)]

    admissions = await asyncio.gather(*(counters.admit_turn("acme", m, limits) for m in members))
    results = [a.refusal for a in admissions]

    assert [r is None for r in results].count(True) == 2
    assert {r.quota for r in results if r is not None} == {"concurrent_turns"}
    assert sorted(a.running for a in admissions if a.refusal is None) == [1, 2]
    running = await counters.running_turns("acme")
    assert len(running) == 2
    await counters.end_turn("acme", running[0][0])
    assert (await counters.admit_turn("acme", members[4], limits)).refusal is None
    assert (await counters.usage("acme", limits))["concurrent_turns"] == 2


async def test_turns_per_minute_is_a_bucket_with_a_retry_after(
    redis: Redis, key_prefix: str
) -> None:
    counters = QuotaCounters(redis, key_prefix)
    limits = quotas(turns_per_minute=3, concurrent_turns=0)

    admissions = [await counters.admit_turn("acme", f"r{i}", limits) for i in range(4)]
    results = [a.refusal for a in admissions]

    assert results[:3] == [None, None, None]
    assert [round(a.turns_left or 0) for a in admissions[:3]] == [2, 1, 0]
    refused = results[3]
    assert refused is not None and refused.quota == "turns_per_minute"
    assert 1 <= refused.retry_after <= 20
    assert (await counters.usage("acme", limits))["turns_available"] == 0
    assert (await counters.admit_turn("other", "r0", limits)).refusal is None


async def test_tokens_per_day_stop_new_turns_once_used_up(redis: Redis, key_prefix: str) -> None:
    counters = QuotaCounters(redis, key_prefix)
    limits = quotas(tokens_per_day=100, concurrent_turns=0, turns_per_minute=0)

    first = await counters.admit_turn("acme", "r1", limits, tokens=60)
    assert first.refusal is None and first.tokens_today == 60 and first.turns_left is None
    await counters.add_tokens({"acme": 50})
    refused = (await counters.admit_turn("acme", "r2", limits, tokens=1)).refusal

    assert refused is not None and refused.quota == "tokens_per_day"
    assert refused.retry_after > 0
    assert (await counters.usage("acme", limits))["tokens_today"] == 110


async def test_forget_deletes_only_the_tenants_counters(redis: Redis, key_prefix: str) -> None:
    counters = QuotaCounters(redis, key_prefix)
    for tenant in ("acme", "other"):
        await counters.open_connection(tenant, "gw:1", 0)
        await counters.admit_turn(tenant, "r1", quotas(), tokens=5)

    assert await counters.forget("acme") == 4

    assert (await counters.usage("acme", quotas()))["connections"] == 0
    assert (await counters.usage("other", quotas()))["tokens_today"] == 5
