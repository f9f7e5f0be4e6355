"""Ports for the processes of a local cluster (`make run`, the tests, the benchmarks).

A port is chosen by the parent and bound by a child that may take seconds to start. Ports are
drawn below the system's ephemeral range, so no outgoing connection (the system picks their
local ports from that range) can take one in the meantime; within a process no port is handed
out twice.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST_PORT = 10000
"""Ports below this are left to the machine's own services."""
_MIN_CHOICES = 1000
"""With fewer ports than this below the ephemeral range, draw from the whole range instead."""
_HIGHEST_PORT = 65535
_ATTEMPTS = 500

_HANDED_OUT: set[int] = set()


def ephemeral_floor() -> int:
    """The lowest port the system gives outgoing connections (and `bind` to port 0)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(*ports: int) -> bool:
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sock = socket.socket()
            sockets.append(sock)
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    finally:
        for sock in sockets:
            sock.close()
    return True


def free_port(*, with_offset: int = 0) -> int:
    """A TCP port on 127.0.0.1 that is free now, below the ephemeral range where the machine
    leaves room, and not handed out by this process before. With `with_offset`, the port that
    far above it is free (and claimed) too: a Redis Cluster node's bus listens 10,000 above
    its port."""
    highest = ephemeral_floor() - 1 - with_offset
    if highest - LOWEST_PORT < _MIN_CHOICES:
        highest = _HIGHEST_PORT - with_offset
    for _ in range(_ATTEMPTS):
        port = random.randint(LOWEST_PORT, highest)
        pair = (port, port + with_offset) if with_offset else (port,)
        if any(p in _HANDED_OUT for p in pair) or not _bindable(*pair):
            continue
        _HANDED_OUT.update(pair)
        return port
    raise RuntimeError("no free port on 127.0.0.1")
