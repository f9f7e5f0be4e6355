"""Process-wide settings every durachat service applies once it has started up."""

from __future__ import annotations

import gc
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
