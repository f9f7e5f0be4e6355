"""An embedded Redis Cluster: several `redis-server` masters (`cluster-enabled yes`), the slot
space split evenly among them, for local runs, tests and benchmarks."""

from __future__ import annotations

import time
from pathlib import Path

from redis import Redis

from durachat_infra.local.ports import free_port
from durachat_infra.local.redis_server import (
    DEFAULT_MAXMEMORY,
    RedisServer,
    RedisStartError,
)

SLOTS = 16384
BUS_OFFSET = 10000
"""A node's cluster bus listens this far above its port (fixed in Redis 6)."""
START_ATTEMPTS = 5
"""A node whose port another process took after the probe starts again on another one."""


def cluster_port() -> int:
    """A free port for a cluster node whose cluster bus (`BUS_OFFSET` above it) is free too."""
    return free_port(with_offset=BUS_OFFSET)


def _node(port: int) -> Redis:
    """A client of one node (cluster administration is per node)."""
    return Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=10)


class RedisClusterServers:
    """`masters` Redis servers on 127.0.0.1 joined into one Redis Cluster (no replicas)."""

    def __init__(
        self,
        data_dir: Path,
        masters: int = 3,
        *,
        persist: bool = False,
        maxmemory: str = DEFAULT_MAXMEMORY,
    ) -> None:
        self.data_dir = data_dir
        self.servers = [
            RedisServer(
                data_dir / f"node-{i + 1}",
                cluster_port(),
                persist=persist,
                maxmemory=maxmemory,
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ],
            )
            for i in range(masters)
        ]

    @property
    def nodes(self) -> str:
        """`REDIS_CLUSTER_NODES` of the cluster: every master's `host:port`."""
        return ",".join(f"127.0.0.1:{server.port}" for server in self.servers)

    @property
    def url(self) -> str:
        """A `redis://` URL of the first master (what `REDIS_URL` carries besides the nodes)."""
        return self.servers[0].url

    def start(self, timeout: float = 30.0) -> None:
        """Start the servers, assign the slots (an equal range each), introduce them to one
        another and wait until every one of them reports the cluster healthy."""
        for server in self.servers:
            self._start_node(server)
        count = len(self.servers)
        for i, server in enumerate(self.servers):
            first, last = i * SLOTS // count, (i + 1) * SLOTS // count
            with _node(server.port) as node:
                node.execute_command("CLUSTER", "ADDSLOTS", *range(first, last))
        with _node(self.servers[0].port) as first_node:
            for server in self.servers[1:]:
                first_node.execute_command("CLUSTER", "MEET", "127.0.0.1", server.port)
        self._wait_healthy(timeout)

    @staticmethod
    def _start_node(server: RedisServer) -> None:
        for attempt in range(START_ATTEMPTS):
            try:
                server.start()
                return
            except RedisStartError:
                if attempt == START_ATTEMPTS - 1:
                    raise
                server.port = cluster_port()

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._healthy(server.port) for server in self.servers):
                return
            time.sleep(0.05)
        raise RuntimeError("the Redis Cluster did not become healthy in time")

    def _healthy(self, port: int) -> bool:
        with _node(port) as node:
            info = str(node.execute_command("CLUSTER", "INFO"))
        return "cluster_state:ok" in info and f"cluster_known_nodes:{len(self.servers)}" in info

    def owner_of_slot(self, slot: int) -> int:
        """Index (in `servers`) of the master serving `slot`."""
        with _node(self.servers[0].port) as node:
            for first, last, master, *_ in node.execute_command("CLUSTER", "SLOTS"):
                if int(first) <= slot <= int(last):
                    port = int(master[1])
                    return next(i for i, s in enumerate(self.servers) if s.port == port)
        raise LookupError(f"no master serves slot {slot}")

    def move_slot(self, slot: int, to: int, timeout: float = 30.0) -> None:
        """Move `slot` with its keys to master `to` (an index in `servers`), the way
        `redis-cli --cluster reshard` does: mark it migrating and importing, `MIGRATE` its keys,
        then tell every master its new owner."""
        source = self.servers[self.owner_of_slot(slot)]
        target = self.servers[to]
        if source is target:
            return
        with _node(source.port) as src, _node(target.port) as dst:
            source_id = str(src.execute_command("CLUSTER", "MYID"))
            target_id = str(dst.execute_command("CLUSTER", "MYID"))
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            for server in self.servers:
                with _node(server.port) as node:
                    node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self._wait_healthy(timeout)

    def stop(self) -> None:
        """Stop every server."""
        for server in self.servers:
            server.stop()
