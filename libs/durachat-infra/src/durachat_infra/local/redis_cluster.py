"""An embedded Redis Cluster: several `redis-server` masters (`cluster-enabled yes`), the slot
space split evenly among them, for local runs, tests and benchmarks."""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

from durachat_infra.local.redis_server import DEFAULT_MAXMEMORY, RedisServer

SLOTS = 16384


def cluster_port() -> int:
    """A free port for a cluster node: its cluster bus listens 10,000 above it, so the port must
    be at most 55,535 and that one free too."""
    for _ in range(200):
        port = random.randint(20000, 50000)
        try:
            with socket.socket() as sock, socket.socket() as bus:
                sock.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


def _command(port: int, *args: str, timeout: float = 5.0) -> bytes:
    """Send one command (RESP) to the server on `port` and return its raw reply."""
    payload = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(arg.encode())}\r\n{arg}\r\n".encode() for arg in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        # Bulk replies ($<len>) may come in more than one read.
        if reply.startswith(b"$"):
            size = int(reply[1 : reply.index(b"\r\n")])
            while size >= 0 and len(reply) < reply.index(b"\r\n") + 2 + size + 2:
                reply += sock.recv(65536)
        return reply


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
            server.start()
        count = len(self.servers)
        for i, server in enumerate(self.servers):
            first, last = i * SLOTS // count, (i + 1) * SLOTS // count
            reply = _command(server.port, "CLUSTER", "ADDSLOTS", *map(str, range(first, last)))
            if not reply.startswith(b"+OK") and b"already busy" not in reply:
                raise RuntimeError(f"CLUSTER ADDSLOTS failed: {reply!r}")
        for server in self.servers[1:]:
            _command(server.port, "CLUSTER", "MEET", "127.0.0.1", str(self.servers[0].port))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._healthy(server.port) for server in self.servers):
                return
            time.sleep(0.05)
        raise RuntimeError("the Redis Cluster did not become healthy in time")

    def _healthy(self, port: int) -> bool:
        info = _command(port, "CLUSTER", "INFO").decode(errors="replace")
        return "cluster_state:ok" in info and f"cluster_known_nodes:{len(self.servers)}" in info

    def stop(self) -> None:
        """Stop every server."""
        for server in self.servers:
            server.stop()
