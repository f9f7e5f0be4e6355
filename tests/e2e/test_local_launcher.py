"""`durachat-local` (what `make run` starts): a whole cluster, supervised, stopped as one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import psutil
import pytest
from redis.asyncio import Redis

from durachat_infra.local.ports import free_port
from durachat_infra.local.redis_cluster import RedisClusterServers
from support.waiting import eventually
from support.wsclient import WsClient, chat_request, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]


def _launch(tmp_path: Path, port: int, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    """`durachat-local` as `make run` starts it, on `port`, its data under `tmp_path`. Its
    output and its children's (they share it) go to a file, which `_stop` reads: a pipe read
    only at the end fills up and blocks every process that logs."""
    env = {**os.environ, "PORT": str(port), "DURACHAT_VAR_DIR": str(tmp_path / "var"), **extra}
    env.pop("REDIS_URL", None)
    env.pop("DATABASE_URL", None)
    with open(tmp_path / "launcher.log", "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "durachat_infra.local"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _stop(launcher: subprocess.Popen[bytes], tmp_path: Path) -> str:
    """Stop the launcher as Ctrl-C would and return everything it and its children wrote."""
    launcher.send_signal(signal.SIGTERM)
    launcher.wait(timeout=60)
    return (tmp_path / "launcher.log").read_text(errors="replace")


async def _shards(url: str) -> dict[str, int]:
    try:
        async with httpx.AsyncClient(base_url=url, timeout=2) as http:
            body = (await http.get("/v1/cluster")).json()
    except httpx.HTTPError:
        return {}
    return {s["id"]: s["pid"] for s in body["shards"]}


async def test_make_run_cluster_restarts_crashed_children_and_stops_all(tmp_path: Path) -> None:
    port = free_port()
    launcher = _launch(
        tmp_path, port, {"DURACHAT_HEARTBEAT_INTERVAL": "0.2", "DURACHAT_SHARD_TTL": "1.0"}
    )
    url = f"http://127.0.0.1:{port}"
    try:
        shards = await eventually(lambda: _two_shards(url), timeout=90)
        # The embedded defaults: a private Redis and a SQLite file under the var dir.
        assert (tmp_path / "var" / "durachat.db").exists()
        client = await WsClient.connect(url, "chat-agent", "launcher")
        request = chat_request([user_message("hi")])
        await client.send(request)
        await client.wait_done(request["id"])
        assert client.text(request["id"]) == "echo: hi"
        await client.close()
        # A crashed shard comes back, as Kubernetes would restart it.
        victim, pid = sorted(shards.items())[0]
        os.kill(pid, signal.SIGKILL)
        await eventually(lambda: _replaced(url, victim, pid), timeout=60)
        children = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
        assert len(children) >= 5  # redis, 2 shards, jobs, gateway
    finally:
        text = _stop(launcher, tmp_path)
        print(text)  # the launcher's and its children's logs, shown if the test fails
    assert f"durachat is running at {url}" in text
    assert "restarted" in text
    assert launcher.returncode == 0
    still = [
        pid
        for pid in children
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
    ]
    assert still == []


async def _two_shards(url: str) -> dict[str, int]:
    shards = await _shards(url)
    return shards if len(shards) == 2 else {}


async def _replaced(url: str, shard_id: str, old_pid: int) -> bool:
    shards = await _shards(url)
    return shards.get(shard_id) not in (None, old_pid)


async def test_make_run_on_a_redis_cluster_spreads_conversations_over_its_masters(
    tmp_path: Path, redis_cluster_servers: RedisClusterServers
) -> None:
    port = free_port()
    prefix = f"l{uuid.uuid4().hex[:8]}"
    launcher = _launch(
        tmp_path,
        port,
        {"DURACHAT_KEY_PREFIX": prefix, "REDIS_CLUSTER_NODES": redis_cluster_servers.nodes},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: _two_shards(url), timeout=90)
        # No Redis of its own: the launcher's children are the gateway, 2 shards and jobs.
        children = psutil.Process(launcher.pid).children()
        assert not any("redis-server" in " ".join(c.cmdline()) for c in children)
        for i in range(8):
            client = await WsClient.connect(url, "chat-agent", f"spread-{i}")
            request = chat_request([user_message(f"hi {i}")])
            await client.send(request)
            await client.wait_done(request["id"])
            assert client.text(request["id"]) == f"echo: hi {i}"
            await client.close()
        holding = 0
        for server in redis_cluster_servers.servers:
            plain = Redis.from_url(server.url, decode_responses=True)
            try:
                found = [k async for k in plain.scan_iter(match=f"{prefix}:*:log")]
            finally:
                await plain.aclose()
            holding += bool(found)
        assert holding >= 2
    finally:
        text = _stop(launcher, tmp_path)
    assert f"redis: cluster {redis_cluster_servers.nodes}" in text
    assert launcher.returncode == 0
