"""The embedded Redis servers of local runs and tests: a node whose port another process took
between the probe and its start starts on another one; a server that cannot start says why."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from redis import Redis

from durachat_infra.local.redis_cluster import RedisClusterServers
from durachat_infra.local.redis_server import RedisServer, RedisStartError

pytestmark = pytest.mark.timeout(60)


def test_a_server_whose_port_is_taken_says_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = RedisServer(tmp_path, taken.getsockname()[1], persist=False)
        with pytest.raises(RedisStartError, match="in use"):
            server.start()


def test_a_cluster_node_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    servers = RedisClusterServers(tmp_path, masters=2)
    first = servers.servers[0].port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        try:
            servers.start()
            assert servers.servers[0].port != first
            with Redis.from_url(servers.url, decode_responses=True) as client:
                assert "cluster_state:ok" in str(client.execute_command("CLUSTER", "INFO"))
        finally:
            servers.stop()
