"""`free_port`: the local processes of a cluster (its gateways, shards, metrics servers, Redis
and PostgreSQL servers) each get a port of their own, free when it is handed out, and out of
the range the system draws outgoing connections' ports from, so that none of those takes it
before the child process binds it."""

from __future__ import annotations

import random
import socket

import pytest

from durachat_infra.local import ports
from durachat_infra.local.ports import ephemeral_floor, free_port

pytestmark = pytest.mark.timeout(30)


def test_no_port_is_handed_out_twice() -> None:
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_a_handed_out_port_is_free() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", free_port()))


def test_ports_lie_below_the_ephemeral_range() -> None:
    assert all(free_port() < ephemeral_floor() for _ in range(200))


def test_a_port_with_an_offset_comes_with_that_one_free_and_below_the_range_too() -> None:
    ports = [free_port(with_offset=10000) for _ in range(200)]
    assert all(port + 10000 < ephemeral_floor() for port in ports)
    with socket.socket() as sock, socket.socket() as bus:
        sock.bind(("127.0.0.1", ports[-1]))
        bus.bind(("127.0.0.1", ports[-1] + 10000))
    # The offset port is claimed as well: never handed out on its own afterwards.
    assert not {port + 10000 for port in ports} & {free_port() for _ in range(2000)}


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        held = taken.getsockname()[1]
        other = free_port()
        # The draw comes to the port in use first, then to a free one (both were handed out
        # above: forget that).
        ports._HANDED_OUT.difference_update({held, other})
        draws = iter([held, other])
        monkeypatch.setattr(random, "randint", lambda low, high: next(draws))
        assert free_port() == other
