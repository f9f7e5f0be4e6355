"""The readiness checks and the jobs worker's listener, against a real Redis, a real SQLite
database and real sockets: each check passes when its dependency answers and says why not
otherwise."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from durachat_infra.cluster import ShardInfo
from durachat_infra.health import (
    Check,
    database_check,
    live_shards_check,
    redis_check,
    registration_check,
    run_checks,
)
from durachat_infra.keys import ClusterKeys
from durachat_infra.local.ports import free_port
from durachat_infra.store import Store, migrate
from durachat_jobs.health import HealthServer


def _shard(shard_id: str, *, draining: bool = False) -> ShardInfo:
    return ShardInfo(shard_id, 1, "127.0.0.1:1", time.time(), ("a",), draining=draining)


async def test_redis_and_database_checks(redis: Redis, tmp_path: Path) -> None:
    assert await redis_check(redis) == Check("redis", True)
    down = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        check = await redis_check(down)
    finally:
        await down.aclose()
    assert not check.ok and "Connection" in check.detail
    url = f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}"
    await migrate(url)
    async with Store.from_url(url) as store:
        assert await database_check(store.engine) == Check("database", True)
    unreachable = Store.from_url(f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    try:
        check = await database_check(unreachable.engine)
    finally:
        await unreachable.close()
    assert not check.ok and check.name == "database"


async def test_a_shard_is_ready_while_registered_and_not_draining(
    redis: Redis, key_prefix: str
) -> None:
    keys = ClusterKeys(key_prefix)
    assert await registration_check(redis, keys, "s1") == Check(
        "registered", False, "no membership record"
    )
    await redis.set(keys.shard("s1"), _shard("s1").to_json(), px=5000)
    assert (await registration_check(redis, keys, "s1")).ok
    await redis.set(keys.shard("s1"), _shard("s1", draining=True).to_json(), px=5000)
    assert await registration_check(redis, keys, "s1") == Check("registered", False, "draining")


def test_a_gateway_needs_a_shard_that_is_not_draining() -> None:
    assert not live_shards_check({}).ok
    assert not live_shards_check({"s1": _shard("s1", draining=True)}).ok
    check = live_shards_check({"s1": _shard("s1", draining=True), "s2": _shard("s2")})
    assert check == Check("shards", True, "1 live")


async def test_readiness_is_503_with_the_failing_check() -> None:
    async def good() -> Check:
        return Check("a", True)

    async def bad() -> Check:
        return Check("b", False, "down")

    assert await run_checks([good]) == (200, {"ready": True, "checks": {"a": {"ok": True}}})
    status, body = await run_checks([good, bad])
    assert status == 503 and body["checks"]["b"] == {"ok": False, "detail": "down"}


async def test_the_jobs_listener_serves_health_readiness_and_metrics() -> None:
    state: dict[str, Any] = {"ready": False}

    async def readiness() -> tuple[int, dict[str, Any]]:
        return (200, {"ready": True}) if state["ready"] else (503, {"ready": False})

    server = HealthServer("127.0.0.1", 0, readiness)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}") as http:
            alive = await http.get("/healthz")
            assert alive.status_code == 200 and alive.json()["ok"] is True
            assert (await http.get("/readyz")).status_code == 503
            state["ready"] = True
            assert (await http.get("/readyz?verbose=1")).json() == {"ready": True}
            metrics = await http.get("/metrics")
            assert metrics.status_code == 200 and "process_cpu_seconds_total" in metrics.text
            assert (await http.get("/nothing")).status_code == 404
            assert (await http.post("/readyz")).status_code == 405
            head = await http.head("/healthz")
            assert head.status_code == 200 and head.content == b""
        # A client that never finishes its request does not hold the listener up.
        _, writer = await asyncio.open_connection("127.0.0.1", server.port)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{server.port}/healthz")).status_code == 200
        writer.close()
    finally:
        await server.stop()
