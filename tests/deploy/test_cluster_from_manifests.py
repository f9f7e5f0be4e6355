"""The clusters the Helm chart and docker-compose.yml describe work, not only parse.

Each process's command and environment are taken from the rendered chart and from Docker
Compose's normalised model, and run as local processes against a real Redis (started from the
manifest's own `redis-server` command line) and the tests' PostgreSQL; `support.deploy_cluster`
says what is rewritten (host names, ports, the database name). Then: every probe passes, a chat
goes through the durachat CLI and Python client with a tenant's API key and through the real npm
client (`agents`, `@cloudflare/ai-chat`) with a client token, and a shard stopped with SIGTERM
finishes the reply it was streaming within the grace period its manifest gives.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from durachat.client import ChatClient
from support.cli import run_cli
from support.compat_driver import driver_missing, run_driver
from support.deploy_cluster import ManifestCluster, Running, provision_database
from support.deploy_manifests import (
    ROOT,
    chart_objects,
    chart_processes,
    compose_config,
    compose_processes,
    compose_project,
    load_json,
    render_chart,
)
from support.postgres import PostgresServer
from support.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(360)]

AGENT = "chat-agent"
SLOW_TEXT = "".join(f"s{i:02d} " for i in range(50))

CHART_VALUES: dict[str, Any] = {
    # A small install: fixed replica counts instead of HPAs (the defaults' in-cluster Redis and
    # PostgreSQL stay on, and stand for external ones the same way).
    "gateway": {"autoscaling": {"enabled": False}, "replicaCount": 1},
    "shard": {"autoscaling": {"enabled": False}, "replicaCount": 2},
}


@pytest.fixture
async def chart_cluster(
    tmp_path: Path, postgres_server: PostgresServer
) -> AsyncIterator[ManifestCluster]:
    specs = chart_processes(chart_objects(render_chart(CHART_VALUES)))
    assert sorted({s.kind for s in specs}) == ["gateway", "jobs", "migrate", "redis", "shard"]
    async with _Started(specs, tmp_path, postgres_server, {}) as cluster:
        yield cluster


@pytest.fixture
async def compose_cluster(
    tmp_path: Path, postgres_server: PostgresServer
) -> AsyncIterator[ManifestCluster]:
    secrets = {
        "DURACHAT_ADMIN_KEY": uuid.uuid4().hex,
        "DURACHAT_CLUSTER_SECRET": uuid.uuid4().hex,
        "POSTGRES_PASSWORD": uuid.uuid4().hex,
    }
    project = compose_project(tmp_path / "project", secrets)
    done = compose_config(project)
    assert done.returncode == 0, done.stderr
    model = load_json(done.stdout)
    specs = compose_processes(model)
    kinds = sorted(s.kind for s in specs)
    assert kinds == ["gateway"] * 2 + ["jobs", "migrate", "proxy", "redis"] + ["shard"] * 3
    mounts = {
        volume["target"]: str(ROOT / Path(volume["source"]).relative_to(project))
        for service in model["services"].values()
        for volume in service.get("volumes", [])
        if volume["type"] == "bind"
    }
    async with _Started(specs, tmp_path, postgres_server, mounts) as cluster:
        yield cluster


class _Started:
    """Provision the database a manifest names, start its processes, stop them at the end."""

    def __init__(
        self, specs: list[Any], tmp: Path, postgres: PostgresServer, mounts: dict[str, str]
    ) -> None:
        self.specs, self.tmp, self.postgres, self.mounts = specs, tmp, postgres, mounts
        self.cluster: ManifestCluster | None = None

    async def __aenter__(self) -> ManifestCluster:
        url = next(s.env["DATABASE_URL"] for s in self.specs if s.kind == "migrate")
        database = await provision_database(self.postgres, url)
        cluster = ManifestCluster(self.specs, self.tmp, self.postgres, database, self.mounts)
        self.cluster = cluster
        try:
            await asyncio.to_thread(cluster.start, 240.0)
        except BaseException:
            await asyncio.to_thread(cluster.stop)
            raise
        return cluster

    async def __aexit__(self, *exc: object) -> None:
        assert self.cluster is not None
        await asyncio.to_thread(self.cluster.stop)
        await self.postgres.drop_database(self.cluster.database)


async def test_the_chart_describes_a_working_cluster(chart_cluster: ManifestCluster) -> None:
    gateway = chart_cluster.of("gateway")[0]
    base = f"http://127.0.0.1:{gateway.local(8080)}"
    await _exercise(chart_cluster, base, admin_key=gateway.env["DURACHAT_ADMIN_KEY"])


async def test_the_compose_file_describes_a_working_cluster(
    compose_cluster: ManifestCluster,
) -> None:
    proxy = compose_cluster.of("proxy")[0]
    base = f"http://127.0.0.1:{proxy.local(8080)}"  # the one published port
    gateway = compose_cluster.of("gateway")[0]
    await _exercise(compose_cluster, base, admin_key=gateway.env["DURACHAT_ADMIN_KEY"])


async def _exercise(cluster: ManifestCluster, base: str, *, admin_key: str) -> None:
    assert admin_key, "auth must be on: the manifest sets no admin key"
    for running in cluster.running:
        if running.spec.kind not in ("redis", "migrate"):
            assert cluster.healthcheck_passes(running), running.spec.name
    # The admin key on the cluster's own routes too, in case they come to require it.
    admin = {"Authorization": f"Bearer {admin_key}"}
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=admin) as http:
        shards = (await http.get("/v1/cluster")).json()["shards"]
        assert len(shards) == len(cluster.of("shard"))
        headers, tenant = await _credentials(http, admin_key)
    await _chat(base, headers)
    await _drain_keeps_the_streaming_reply(cluster, base, headers, admin, tenant)


async def _credentials(http: httpx.AsyncClient, admin_key: str) -> tuple[dict[str, str], str]:
    """What a client presents, and its tenant: the key of a tenant made for the test with the
    admin API. Without credentials the gateway refuses the conversation's routes."""
    tenant = f"deploy-{uuid.uuid4().hex[:8]}"
    anonymous = await http.get(f"/agents/{AGENT}/x/get-messages", headers={"Authorization": ""})
    assert anonymous.status_code == 401, anonymous.text
    created = await http.post(
        "/v1/admin/tenants",
        json={"id": tenant},
        headers={"Authorization": f"Bearer {admin_key}"},
    )
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['api_key']}"}, tenant


async def _chat(base: str, headers: dict[str, str]) -> None:
    name = f"hello-{uuid.uuid4().hex[:8]}"
    # The documented quick start: `durachat chat --url ... MESSAGE`, with the tenant's key.
    key = headers["Authorization"].removeprefix("Bearer ")
    code, out, err = await run_cli(
        "chat", "--url", base, "--name", name, "hello there", env={"DURACHAT_API_KEY": key}
    )
    assert code == 0, err
    assert "echo: hello there" in out
    async with ChatClient.connect(base, AGENT, name + "-client", headers=headers) as client:
        reply = await client.send("hello there")
        assert await reply.text() == "echo: hello there"
    if driver_missing() is not None:
        return  # `make test-py` without the npm packages: the Python clients above only
    # A browser's way in: a client token its backend minted, in the socket's query.
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=headers) as http:
        minted = await http.post("/v1/tokens", json={"agent": AGENT, "name": name + "-npm"})
    assert minted.status_code == 201, minted.text
    run = await run_driver([base], "chat", AGENT, name + "-npm", token=minted.json()["token"])
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-2000:]}"


async def _drain_keeps_the_streaming_reply(
    cluster: ManifestCluster,
    base: str,
    headers: dict[str, str],
    admin: dict[str, str],
    tenant: str,
) -> None:
    name = f"drain-{uuid.uuid4().hex[:8]}"
    async with ChatClient.connect(base, AGENT, name, headers=headers) as client:
        reply = await client.send("slow reply, then the shard stops")
        chunks = aiter(reply)
        while not any(c.get("type") == "text-delta" for c in reply.chunks):
            await asyncio.wait_for(anext(chunks), 20)
        owner = await _owner(cluster, base, name, admin, tenant)
        took = asyncio.create_task(cluster.terminate(owner))

        # Draining: the shard answers 503 on /readyz while it finishes the reply.
        async def draining() -> bool:
            return await asyncio.to_thread(cluster.probe_status, owner) == 503

        await eventually(draining, timeout=10, interval=0.1)
        async with asyncio.timeout(60):
            async for _ in chunks:
                pass
        assert await reply.wait() == "completed"
        assert await reply.text() == SLOW_TEXT
        # Within the manifest's grace period (terminate() fails past it).
        assert await took <= (owner.spec.grace or 0)


async def _owner(
    cluster: ManifestCluster, base: str, name: str, admin: dict[str, str], tenant: str
) -> Running:
    params = {"agent": AGENT, "name": name, "tenant": tenant}
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=admin) as http:
        found = await http.get("/v1/cluster/owner", params=params)
    pid = found.json()["pid"]
    return next(r for r in cluster.of("shard") if r.popen.pid == pid)
