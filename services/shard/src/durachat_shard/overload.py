"""Load shedding: a shard whose event loop falls behind refuses new turns.

Everything a shard does runs on one event loop: streaming replies, renewing its conversations'
leases, answering gateways. When more chats stream than its CPU can carry, the loop runs late,
and past the lease TTL its leases lapse, conversations move mid-reply and forwarded requests
time out at the gateway, for every conversation at once (docs/benchmarks.md, "1,000
conversations at once"). Refusing new turns while the loop is late keeps the turns already
running on time: the refused client gets a stable `overloaded` error and may retry
(docs/protocol.md#errors).

Lateness is measured the way it is felt: a timer is due every `interval`; how late it runs is
the loop's lag. A loop stuck on one long step cannot run the timer, so a request handled right
after counts how overdue the timer is as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

from durachat_shard import metrics

log = logging.getLogger(__name__)

INTERVAL: Final = 0.1
"""Seconds between the lag measurements."""


class LoopLag:
    """Measures how late the running event loop is, and says when that is too late.

    `limit` is the lag past which new turns are refused (0: never); once over it the shard
    keeps refusing until the loop has been on time for `limit` seconds, so it does not accept
    a burst of turns the moment one measurement comes in under it.
    """

    def __init__(self, limit: float, *, interval: float = INTERVAL) -> None:
        self._limit = limit
        self._interval = interval
        self._due = 0.0
        self._lag = 0.0
        self._over_until = 0.0
        self._shedding = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start measuring on the running loop."""
        if self._task is None:
            self._due = time.monotonic() + self._interval
            self._task = asyncio.get_running_loop().create_task(self._measure())

    async def stop(self) -> None:
        """Stop measuring."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def lag(self) -> float:
        """Seconds the loop is behind: the last measurement, or more if the next one is
        already overdue."""
        if self._task is None:
            return 0.0
        return max(self._lag, time.monotonic() - self._due)

    @property
    def overloaded(self) -> bool:
        """Whether new turns should be refused now."""
        if self._limit <= 0:
            return False
        now = time.monotonic()
        if self.lag > self._limit:
            self._over_until = now + self._limit
        shedding = now < self._over_until
        if shedding != self._shedding:
            self._shedding = shedding
            if shedding:
                log.warning("event loop %.2f s behind: refusing new turns", self.lag)
            else:
                log.info("event loop back on time: accepting new turns")
        return shedding

    async def _measure(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._due - time.monotonic()))
            now = time.monotonic()
            self._lag = now - self._due
            metrics.LOOP_LAG.observe(self._lag)
            if self._limit > 0 and self._lag > self._limit:
                self._over_until = now + self._limit
            self._due = now + self._interval
