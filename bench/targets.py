"""The two systems under test: a durachat local cluster and the bare relay baseline."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.baseline import ECHO_INTERVAL
from bench.procs import Cleanup, Proc, child_env, spawn, terminate
from durachat_infra.local.cluster import LocalCluster
from durachat_infra.local.ports import free_port
from durachat_infra.local.redis_server import RedisServer


@dataclass(slots=True)
class Target:
    """A running system the load generator can talk to."""

    name: str
    host: str
    port: int
    agent: str
    front: Proc
    """The process clients connect to (gateway / relay): its RSS per idle connection."""
    procs: list[Proc] = field(default_factory=list)
    log_dir: Path | None = None
    stop: Callable[[], None] | None = None
    redis_url: str | None = None
    query: str = ""
    """Extra query parameters of every client socket (`token=…` for a cluster in auth mode)."""
    otlp_endpoint: str | None = None
    """The local OTLP receiver of a traced cluster (its `/stats` counts what it received)."""
    ports: list[int] = field(default_factory=list)
    """Every port clients may connect to (a cluster's gateways); empty means `port` only."""

    def client_ports(self) -> list[int]:
        """The ports load generators spread their conversations over (the front's first)."""
        return self.ports or [self.port]

    def exported(self) -> dict[str, int] | None:
        """What the OTLP receiver of a traced cluster received so far (requests, spans)."""
        if self.otlp_endpoint is None:
            return None
        with urllib.request.urlopen(self.otlp_endpoint + "/stats", timeout=10) as response:
            stats: dict[str, int] = json.load(response)
            return stats


class BenchCluster(LocalCluster):
    """A LocalCluster that can start chosen roles under cProfile (`bench.profiled`)."""

    profile_roles: frozenset[str] = frozenset()
    profile_dir: Path | None = None

    def _spawn(self, role: str, name: str, module: str, extra: dict[str, str]):  # type: ignore[no-untyped-def]
        if role in self.profile_roles and self.profile_dir is not None:
            extra = {
                **extra,
                "BENCH_PROFILE_MODULE": module,
                "BENCH_PROFILE_OUT": str(self.profile_dir / f"{name}.prof"),
            }
            module = "bench.profiled"
        return super()._spawn(role, name, module, extra)


def cluster_env(delta_interval: float = ECHO_INTERVAL) -> dict[str, str]:
    """What LocalCluster children need on top of os.environ (it cannot unset variables), the
    scripted model's deltas `delta_interval` seconds apart."""
    env = child_env({"DURACHAT_AGENTS": "durachat.demo,bench.agents"})
    return {
        "PYTHONPATH": env["PYTHONPATH"],
        "PYTHONPYCACHEPREFIX": env["PYTHONPYCACHEPREFIX"],
        "PYTHONDONTWRITEBYTECODE": "",  # empty means unset
        "LITELLM_LOCAL_MODEL_COST_MAP": env["LITELLM_LOCAL_MODEL_COST_MAP"],
        "DURACHAT_AGENTS": env["DURACHAT_AGENTS"],
        # The scripted model's pacing (docs/configuration.md).
        "DURACHAT_SCRIPTED_DELAY_SCALE": repr(delta_interval / ECHO_INTERVAL),
    }


BENCH_ADMIN_KEY = "bench-admin-key"


def start_otlp_sink(var_dir: Path, cleanup: Cleanup) -> tuple[str, Proc]:
    """A local OTLP/HTTP receiver (`bench.otlp_sink`); returns its endpoint and process."""
    port = free_port()
    sink = spawn(
        ["-m", "bench.otlp_sink", "--port", str(port)],
        env=child_env(),
        log=var_dir / "logs" / "otlp-sink.log",
    )
    cleanup.add(f"otlp sink {port}", lambda: terminate(sink))
    _wait_http(f"http://127.0.0.1:{port}/stats", 60, [sink])
    return f"http://127.0.0.1:{port}", Proc("otlp-sink", "otlp-sink", sink.pid)


def start_durachat(
    var_dir: Path,
    cleanup: Cleanup,
    *,
    profile: frozenset[str],
    profile_dir: Path,
    auth: bool = False,
    traced: bool = False,
    redis_masters: int = 0,
    shards: int = 2,
    gateways: int = 1,
    delta_interval: float = ECHO_INTERVAL,
) -> Target:
    """Start `gateways` gateways (1), `shards` shards (2) and 1 jobs worker with an embedded
    Redis (with
    `redis_masters`, an embedded Redis Cluster of that many masters), the scripted model's
    deltas `delta_interval` seconds apart; with `auth`, in auth
    mode (docs/security.md), every client socket carrying a client token of a tenant without
    quota limits, as a browser app's would; with `traced`, every turn traced (100 % sampling)
    and exported over OTLP/HTTP to a local receiver (docs/observability.md#traces)."""
    env = cluster_env(delta_interval)
    if auth:
        env["DURACHAT_ADMIN_KEY"] = BENCH_ADMIN_KEY
    sink: Proc | None = None
    endpoint = ""
    if traced:
        endpoint, sink = start_otlp_sink(var_dir, cleanup)
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        env["OTEL_TRACES_SAMPLER"] = "always_on"
    cluster = BenchCluster(
        var_dir=var_dir,
        port=free_port(),
        gateways=gateways,
        shards=shards,
        jobs=1,
        # The embedded SQLite by default; BENCH_DATABASE_URL measures another database.
        database_url=os.environ.get("BENCH_DATABASE_URL") or None,
        env=env,
        log_dir=var_dir / "logs",
        redis_masters=redis_masters,
    )
    cluster.profile_roles = profile
    cluster.profile_dir = profile_dir
    cleanup.add("durachat cluster", cluster.stop)
    cluster.start(timeout=240)
    procs = [Proc(p.role, p.name, p.pid) for p in cluster.processes]
    servers = cluster.redis_cluster.servers if cluster.redis_cluster else [cluster.redis]
    for i, server in enumerate(servers):
        assert server is not None and server.process is not None
        procs.append(Proc("redis", "redis" if i == 0 else f"redis-{i + 1}", server.process.pid))
    if sink is not None:
        procs.append(sink)
    gateway = next(p for p in procs if p.role == "gateway")
    name = "durachat-auth" if auth else "durachat-traced" if traced else "durachat"
    return Target(
        f"{name}-redis-cluster" if redis_masters else name,
        "127.0.0.1",
        cluster.gateway_ports[0],
        "bench-agent",
        gateway,
        procs,
        var_dir / "logs",
        cluster.stop,
        # Command statistics are read from a single server only.
        None if redis_masters else cluster.redis_url,
        query=f"token={_bench_token(cluster.urls[0])}" if auth else "",
        otlp_endpoint=endpoint if traced else None,
        ports=list(cluster.gateway_ports),
    )


def _bench_token(url: str) -> str:
    """A tenant without quota limits, and a client token for every conversation of the
    benchmark's agent."""
    limits = dict.fromkeys(
        ("connections", "concurrent_turns", "turns_per_minute", "conversations"), 0
    )
    created = _post(url, "/v1/admin/tenants", {"id": "bench", "quotas": limits}, BENCH_ADMIN_KEY)
    minted = _post(
        url,
        "/v1/tokens",
        {"agent": "bench-agent", "name_prefix": "", "ttl_s": 86_400},
        created["api_key"],
    )
    return str(minted["token"])


def _post(url: str, path: str, body: dict[str, object], credential: str) -> dict[str, Any]:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {credential}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.load(response)
        return answer


def _wait_http(url: str, timeout: float, popens: list[object]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for popen in popens:
            if popen.poll() is not None:  # type: ignore[attr-defined]
                raise RuntimeError(f"baseline process exited with {popen.returncode}")  # type: ignore[attr-defined]
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not ready within {timeout}s") from None
            time.sleep(0.1)


def _baseline_args(
    role: str, args: list[str], profile: frozenset[str], out: Path
) -> tuple[list[str], dict[str, str]]:
    if role not in profile:
        return ["-m", "bench.baseline", role, *args], {}
    env = {"BENCH_PROFILE_MODULE": "bench.baseline", "BENCH_PROFILE_OUT": str(out / f"{role}.prof")}
    return ["-m", "bench.profiled", role, *args], env


def start_baseline(
    var_dir: Path,
    cleanup: Cleanup,
    *,
    profile: frozenset[str] = frozenset(),
    profile_dir: Path | None = None,
    delta_interval: float = ECHO_INTERVAL,
) -> Target:
    """Start a Redis (configured like the cluster's), the producer (`delta_interval` seconds
    between deltas) and the relay."""
    redis = RedisServer(var_dir / "redis")
    cleanup.add("baseline redis", redis.stop)
    redis.start()
    assert redis.process is not None
    prefix = f"bb{secrets.token_hex(3)}"
    logs = var_dir / "logs"
    out = profile_dir or var_dir
    args, extra = _baseline_args(
        "producer",
        ["--redis", redis.url, "--prefix", prefix, "--delta-interval", str(delta_interval)],
        profile,
        out,
    )
    producer = spawn(args, env=child_env(extra), log=logs / "producer.log")
    cleanup.add("baseline producer", lambda: terminate(producer))
    port = free_port()
    args, extra = _baseline_args(
        "relay", ["--redis", redis.url, "--prefix", prefix, "--port", str(port)], profile, out
    )
    relay = spawn(args, env=child_env(extra), log=logs / "relay.log")
    cleanup.add("baseline relay", lambda: terminate(relay))
    _wait_http(f"http://127.0.0.1:{port}/healthz", 60, [producer, relay])
    relay_proc = Proc("relay", "relay", relay.pid)
    procs = [
        relay_proc,
        Proc("producer", "producer", producer.pid),
        Proc("redis", "redis", redis.process.pid),
    ]

    def stop() -> None:
        terminate(relay)
        terminate(producer)
        redis.stop()

    return Target(
        "baseline", "127.0.0.1", port, "bench-agent", relay_proc, procs, logs, stop, redis.url
    )


def remove_tree(path: Path) -> None:
    """Delete a run directory (best effort)."""
    shutil.rmtree(path, ignore_errors=True)
