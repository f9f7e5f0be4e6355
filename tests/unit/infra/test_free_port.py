"""`free_port`: the local processes of a cluster (its gateways, shards, metrics servers) each get
a port of their own. The system offers a closed probe's port again often enough (about 30 times
in 1,000 calls on a Linux test machine) that two processes of one cluster were once given the
same port."""

from __future__ import annotations

import socket

import pytest

from durachat_infra.local.redis_server import free_port

pytestmark = pytest.mark.timeout(30)


def test_no_port_is_handed_out_twice() -> None:
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_a_handed_out_port_is_free() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))
