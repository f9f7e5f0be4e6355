"""Load shedding: a shard that falls behind refuses new turns.

Everything a shard does runs on one event loop, and every turn's writes go through its write
chains. When more chats stream than its CPU or its database can carry, the loop runs late or
the writes queue up; then leases lapse, conversations move mid-reply and forwarded requests
time out at the gateway (a request is answered once its turn is stored), for every
conversation at once (docs/benchmarks.md, "1,000 conversations at once"). Refusing new turns
while the shard is behind keeps the turns already running going: the refused client gets a
stable `overloaded` error and may retry (docs/operations.md#overload).

Behind is measured the way it is felt. The loop: a timer is due every `interval`, and how late
it runs is the loop's lag (a loop stuck on one long step cannot run the timer, so a request
handled right after counts how overdue it is as well). The database: how long the oldest write
still queued has waited (`actor.writes.BACKLOG`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final

from durachat_shard import metrics
from durachat_shard.actor.writes import BACKLOG, Backlog

log = logging.getLogger(__name__)

INTERVAL: Final = 0.1
"""Seconds between the lag measurements."""


class Overload:
    """Measures how far behind the shard is, and says when that is too far.

    `limit` is the lag (of the loop, or of the oldest queued write) past which new turns are
    refused (0: never); once over it the shard keeps refusing until it has been within it for
    `limit` seconds, so it does not accept a burst of turns the moment one measurement comes in
    under it.
    """

    def __init__(
        self, limit: float, *, interval: float = INTERVAL, backlog: Backlog = BACKLOG
    ) -> None:
        self._limit = limit
        self._interval = interval
        self._backlog = backlog
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
    def loop_lag(self) -> float:
        """Seconds the loop is behind: the last measurement, or more if the next one is
        already overdue."""
        if self._task is None:
            return 0.0
        return max(self._lag, time.monotonic() - self._due)

    @property
    def write_lag(self) -> float:
        """Seconds the oldest write still queued has waited."""
        return self._backlog.age(time.monotonic())

    @property
    def lag(self) -> float:
        """How far behind the shard is: the larger of the two."""
        return max(self.loop_lag, self.write_lag)

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
                log.warning(
                    "behind (event loop %.2f s, oldest queued write %.2f s): refusing new turns",
                    self.loop_lag,
                    self.write_lag,
                )
            else:
                log.info("back on time: accepting new turns")
        return shedding

    async def _measure(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._due - time.monotonic()))
            now = time.monotonic()
            self._lag = now - self._due
            metrics.LOOP_LAG.observe(self._lag)
            backlog = self._backlog.age(now)
            metrics.WRITE_BACKLOG.set(backlog)
            if self._limit > 0 and max(self._lag, backlog) > self._limit:
                self._over_until = now + self._limit
            self._due = now + self._interval
