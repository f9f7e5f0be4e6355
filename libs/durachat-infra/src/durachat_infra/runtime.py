"""Process-wide settings every durachat service applies once it has started up."""

from __future__ import annotations

import gc
import resource
from typing import Final

GC_GEN0_THRESHOLD: Final = 20_000
"""Allocations between young-generation collections (CPython's default is 700)."""


def settle_heap() -> None:
    """Keep the cyclic garbage collector's pauses short for the rest of the process's life.

    A process that has imported litellm, pydantic, SQLAlchemy and OpenTelemetry holds about a
    million long-lived objects. Each full collection walked all of them: ~0.4 s with the event
    loop stopped, often enough under load that leases and membership heartbeats expired and
    conversations moved between shards (docs/benchmarks.md, "Event loop stalls"). Everything
    allocated so far is moved out of the collector's reach (`gc.freeze`), and young
    collections run less often, so each collection only sees what the traffic allocated.
    Call it once start-up (imports, configuration, agents) is done.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; returns the limit now
    in force.

    Every client socket is a file descriptor, and a soft limit of 1,024 (a common default)
    would refuse a gateway's connections long before its memory runs out: 10,000 idle sockets
    take ~150 MiB (docs/benchmarks.md#idle-sockets). The hard limit is what the operator
    allows (`ulimit -Hn`, a container's `nofile`); children started afterwards inherit it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        # An unlimited hard limit cannot be the soft one on every system: the kernel's own
        # ceiling (fs.nr_open) is.
        wanted = hard if hard != resource.RLIM_INFINITY else _nr_open(soft)
        if wanted > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
                soft = wanted
            except (ValueError, OSError):
                pass
    return soft


def _nr_open(fallback: int) -> int:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return fallback
