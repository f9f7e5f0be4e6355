"""Load shedding: a shard that falls behind refuses new turns.

Everything a shard does runs on one event loop, and every turn's writes go through its write
chains. When more chats stream than its CPU or its database can carry, the loop runs late or
the writes queue up; then leases lapse, conversations move mid-reply and forwarded requests
time out at the gateway (a request is answered once its turn is stored), for every
conversation at once (docs/benchmarks.md, "1,000 conversations at once"). Refusing new turns
while the shard is behind keeps the turns already running going: the refused client gets a
stable `overloaded` error and may retry (docs/operations.md#overload).

A chat request that arrives while the shard is behind waits, parked, for it to catch up (at
most `admission_wait`, `DURACHAT_MAX_ADMISSION_WAIT`, and never past its gateway's deadline):
a burst of requests arriving together (a thousand users pressing send in the same second) then
costs time to first chunk instead of refusals, while a shard that stays behind still refuses.
Once it is on time, the waiting requests are let in oldest first, `ADMITTED_PER_TICK` per
measurement, so they do not put it behind again all at once.

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
from collections import deque
from typing import Final

from durachat_shard import metrics
from durachat_shard.actor.writes import BACKLOG, Backlog

log = logging.getLogger(__name__)

INTERVAL: Final = 0.1
"""Seconds between the lag measurements."""

ADMITTED_PER_TICK: Final = 8
"""Waiting chat requests let in per measurement once the shard is on time (80 a second: ~40 %
of a core at a turn start's few milliseconds of CPU)."""


class Overload:
    """Measures how far behind the shard is, and says when that is too far.

    The shard is behind while the loop's lag stays over `loop_limit` for two measurements in a
    row (a burst of requests arriving together makes one late tick, which the loop then
    catches up: that is not overload), or while the oldest queued write has waited longer than
    `write_limit`. A limit of 0 turns that signal off. New turns wait in `admit` while it is.
    """

    def __init__(
        self,
        loop_limit: float,
        write_limit: float,
        *,
        interval: float = INTERVAL,
        backlog: Backlog = BACKLOG,
        admission_wait: float = 5.0,
        admitted_per_tick: int = ADMITTED_PER_TICK,
    ) -> None:
        self._loop_limit = loop_limit
        self._write_limit = write_limit
        self._interval = interval
        self._backlog = backlog
        self._due = 0.0
        self._lag = 0.0
        self._was_late = False
        """Whether the measurement before the last one was over `loop_limit`."""
        self._shedding = False
        self.admission_wait = admission_wait
        """Longest a chat request waits for the shard to catch up before it is refused."""
        self._admitted_per_tick = admitted_per_tick
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._task: asyncio.Task[None] | None = None
        self.measurements = 0
        """How many times the loop's lag has been measured."""

    def start(self) -> None:
        """Start measuring on the running loop."""
        if self._task is None:
            self._due = time.monotonic() + self._interval
            self._task = asyncio.get_running_loop().create_task(self._measure())

    async def stop(self) -> None:
        """Stop measuring, and let the requests still waiting through: a stopping shard
        answers them as a former owner, and their gateways take them to the next one."""
        self._let_in(len(self._waiting))
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
    def overloaded(self) -> bool:
        """Whether the shard is behind now (new turns wait in `admit`)."""
        shedding = self._loop_behind() or self._writes_behind()
        if shedding != self._shedding:
            self._shedding = shedding
            if shedding:
                log.warning(
                    "behind (event loop %.2f s, oldest queued write %.2f s): new turns wait",
                    self.loop_lag,
                    self.write_lag,
                )
            else:
                log.info("back on time: new turns start")
        return shedding

    @property
    def waiting(self) -> int:
        """Chat requests waiting to be admitted."""
        return len(self._waiting)

    async def admit(self, limit: float) -> bool:
        """Whether a new turn may start: at once while the shard is on time and nobody waits,
        or while the monitor is stopped; else once it has caught up and the requests that
        waited longer are in, if that is within `limit` seconds (at most `admission_wait`)."""
        limit = min(limit, self.admission_wait)
        if self._task is None or (not self._waiting and not self.overloaded):
            # Not measuring (stopped: the shard is draining) or on time.
            return True
        if limit <= 0:
            return False
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        metrics.TURNS_WAITING.set(len(self._waiting))
        try:
            await asyncio.wait_for(turn, limit)
            return True
        except TimeoutError:
            return False
        finally:
            if not turn.done() or turn.cancelled():
                with contextlib.suppress(ValueError):
                    self._waiting.remove(turn)
            metrics.TURNS_WAITING.set(len(self._waiting))

    def _let_in(self, count: int) -> None:
        """Admit the `count` requests that waited longest."""
        admitted = 0
        while self._waiting and admitted < count:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                admitted += 1
        metrics.TURNS_WAITING.set(len(self._waiting))

    def _loop_behind(self) -> bool:
        if self._loop_limit <= 0 or self._task is None:
            return False
        # Two late measurements in a row; the one under way counts once it is overdue enough.
        overdue = time.monotonic() - self._due > self._loop_limit
        return self._lag > self._loop_limit and (self._was_late or overdue)

    def _writes_behind(self) -> bool:
        return self._write_limit > 0 and self.write_lag > self._write_limit

    async def _measure(self) -> None:
        while True:
            await asyncio.sleep(max(0.0, self._due - time.monotonic()))
            now = time.monotonic()
            self._was_late = self._lag > self._loop_limit
            self._lag = now - self._due
            metrics.LOOP_LAG.observe(self._lag)
            metrics.WRITE_BACKLOG.set(self._backlog.age(now))
            self._due = now + self._interval
            self.measurements += 1
            if self._waiting and not self.overloaded:
                self._let_in(self._admitted_per_tick)
