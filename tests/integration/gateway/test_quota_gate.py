"""The gateway's admission of chat requests on a real Redis: requests of a tenant far from its
limits go on before they are counted (headroom), yet every one is counted and given back, and
near a limit the limit holds exactly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from durachat_gateway.auth.directory import AuthDirectory
from durachat_gateway.quota_gate import QuotaGate
from durachat_infra.keys import ClusterKeys
from durachat_infra.quotas import QuotaCounters
from durachat_infra.settings import QuotaDefaults
from durachat_infra.store import ConversationKey
from durachat_infra.store.memory import MemoryStore
from support.waiting import eventually

KEY = ConversationKey("acme", "chat-agent", "c")

MakeGate = Callable[[dict[str, int]], Awaitable[QuotaGate]]


@pytest.fixture
async def make_gate(redis: Redis, key_prefix: str) -> AsyncIterator[MakeGate]:
    directories: list[AuthDirectory] = []

    async def make(quotas: dict[str, int]) -> QuotaGate:
        store = MemoryStore()
        await store.create_tenant("acme", quotas=quotas)
        directory = AuthDirectory(
            store,
            redis,
            ClusterKeys(key_prefix),
            admin_key="adm",
            defaults=QuotaDefaults(),
            refresh=10.0,
        )
        await directory.start()
        directories.append(directory)
        counters = QuotaCounters(redis, key_prefix)
        return QuotaGate(counters, directory, store, gateway_id="gw", key_prefix=key_prefix)

    yield make
    for directory in directories:
        await directory.stop()


def running_is(counters: QuotaCounters, expected: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return len(await counters.running_turns("acme")) == expected

    return probe


async def test_far_from_the_limits_requests_go_on_first_and_are_all_counted(
    make_gate: MakeGate, redis: Redis, key_prefix: str
) -> None:
    gate = await make_gate({"concurrent_turns": 100, "turns_per_minute": 60})
    counters = QuotaCounters(redis, key_prefix)

    for i in range(30):
        _, refusal = await gate.admit(KEY, f"r{i}", 100)
        assert refusal is None

    await eventually(running_is(counters, 30))
    await asyncio.gather(*(gate.release(KEY, f"r{i}") for i in range(30)))
    assert await running_is(counters, 0)()
    usage = await counters.usage("acme", gate.quotas("acme"))
    # The bucket refills a turn a second meanwhile.
    assert usage["turns_available"] <= 60 - 30 + 5


async def test_near_a_limit_every_request_is_counted_first(
    make_gate: MakeGate, redis: Redis, key_prefix: str
) -> None:
    gate = await make_gate({"concurrent_turns": 5})

    results = [(await gate.admit(KEY, f"r{i}", 100))[1] for i in range(8)]

    assert [r is None for r in results] == [True] * 5 + [False] * 3
    assert {r.quota for r in results if r is not None} == {"concurrent_turns"}
    await eventually(running_is(QuotaCounters(redis, key_prefix), 5))
