"""`Overload`: a shard whose event loop runs late, or whose writes queue up, is overloaded until
it has been on time for a while. The loop is blocked for real (`time.sleep` on it: the blocked
loop is what is tested); the writes are real write chains whose transactions are held."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from durachat_shard.actor.writes import BACKLOG, Backlog, WriteChain
from durachat_shard.overload import Overload
from support.waiting import eventually

pytestmark = pytest.mark.timeout(10)

T = TypeVar("T")


def shedding(load: Overload) -> bool:
    """`load.overloaded`, read afresh (a property mypy would otherwise take as unchanged)."""
    return load.overloaded


async def ticks(load: Overload, count: int) -> None:
    """Wait until the monitor has measured `count` more times."""
    target = load.measurements + count

    async def measured() -> bool:
        return load.measurements >= target

    await eventually(measured)


@dataclass
class Behind:
    """A started `Overload` behind on one write of `backlog` (`handle`)."""

    load: Overload
    backlog: Backlog
    handle: int

    def catch_up(self) -> None:
        """Commit the write it is behind on."""
        self.backlog.done(self.handle)


@contextlib.asynccontextmanager
async def behind_on_writes(**options: Any) -> AsyncIterator[Behind]:
    """An `Overload` (writes limited to 50 ms, measured every 20 ms, `options` on top) that
    is behind on a write; stopped on the way out."""
    backlog = Backlog()
    load = Overload(0, 0.05, interval=0.02, backlog=backlog, **options)
    load.start()
    try:
        handle = backlog.add(time.monotonic())

        async def behind() -> bool:
            return load.overloaded

        await eventually(behind)
        yield Behind(load, backlog, handle)
        backlog.done(handle)
    finally:
        await load.stop()


async def waiting(load: Overload, count: int) -> None:
    """Wait until `count` turns wait to be admitted."""

    async def queued() -> bool:
        return load.waiting == count

    await eventually(queued)


async def test_a_loop_late_twice_in_a_row_is_overloaded_until_it_is_on_time() -> None:
    load = Overload(0.2, 0, interval=0.02, backlog=Backlog())
    load.start()
    try:
        await ticks(load, 2)
        assert not shedding(load)
        time.sleep(0.4)  # noqa: ASYNC251 - blocks the loop on purpose: what is measured
        # One late tick (a burst arriving together) is not overload, even while it is overdue.
        assert load.loop_lag >= 0.35
        assert not shedding(load)
        await ticks(load, 1)
        assert not shedding(load)
        time.sleep(0.4)  # noqa: ASYNC251 - and again, before the next measurement
        assert shedding(load)
        await ticks(load, 1)
        assert shedding(load)
        await ticks(load, 1)
        assert not shedding(load)
    finally:
        await load.stop()


async def test_without_a_limit_nothing_is_refused() -> None:
    load = Overload(0, 0, interval=0.02)
    load.start()
    try:
        for _ in range(2):
            time.sleep(0.2)  # noqa: ASYNC251 - blocks the loop on purpose
            await ticks(load, 1)
        assert not load.overloaded
    finally:
        await load.stop()


async def test_a_stopped_monitor_reports_no_lag() -> None:
    load = Overload(0.1, 0)
    assert load.loop_lag == 0.0 and not load.overloaded


async def test_writes_waiting_too_long_overload_the_shard_until_they_are_done() -> None:
    async with behind_on_writes() as shard:
        load = shard.load
        assert load.write_lag > 0.05 and load.loop_lag < load.write_lag
        shard.catch_up()

        async def on_time() -> bool:
            return not load.overloaded

        await eventually(on_time)
        assert load.write_lag == 0.0


async def test_a_queued_write_is_in_the_backlog_until_it_is_committed() -> None:
    release = asyncio.Event()

    async def held(work: Callable[[object], Awaitable[T]]) -> T:
        await release.wait()
        return await work(None)

    chain: WriteChain[object] = WriteChain(held, on_failure=lambda exc: None)
    before = len(BACKLOG)
    queued = chain.behind(lambda tx: asyncio.sleep(0))
    assert len(BACKLOG) == before + 1
    release.set()
    await queued
    assert len(BACKLOG) == before


async def test_a_write_cancelled_before_it_ran_leaves_the_backlog() -> None:
    before = len(BACKLOG)

    async def never(work: Callable[[object], Awaitable[T]]) -> T:
        await asyncio.Event().wait()
        return await work(None)

    chain: WriteChain[object] = WriteChain(never, on_failure=lambda exc: None)
    queued = chain.behind(lambda tx: asyncio.sleep(0))
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert len(BACKLOG) == before


async def test_a_shard_on_time_admits_a_turn_at_once() -> None:
    load = Overload(0.2, 0.1, interval=0.02, backlog=Backlog())
    load.start()
    try:
        assert await load.admit(0.0)
        assert load.waiting == 0
    finally:
        await load.stop()


async def test_turns_arriving_while_behind_wait_and_start_oldest_first_a_few_per_tick() -> None:
    async with behind_on_writes(admitted_per_tick=2) as shard:
        load = shard.load
        admitted: list[int] = []
        measured_at: list[int] = []

        async def arrive(i: int) -> None:
            if await load.admit(5.0):
                admitted.append(i)
                measured_at.append(load.measurements)

        turns = [asyncio.create_task(arrive(i)) for i in range(5)]
        await waiting(load, 5)
        await ticks(load, 3)
        assert admitted == []  # still behind: nobody starts
        # A request arriving now queues behind those that waited longer.
        turns.append(asyncio.create_task(arrive(5)))
        await waiting(load, 6)
        shard.catch_up()
        await asyncio.gather(*turns)
        assert admitted == [0, 1, 2, 3, 4, 5]
        assert len(set(measured_at)) == 3  # two per measurement
        assert load.waiting == 0


async def test_a_turn_is_refused_when_the_shard_stays_behind_past_its_wait() -> None:
    async with behind_on_writes() as shard:
        started = time.monotonic()
        assert not await shard.load.admit(0.2)
        assert time.monotonic() - started >= 0.2
        assert shard.load.waiting == 0  # it left the queue
        assert not await shard.load.admit(0.0)  # no wait allowed: refused at once


@pytest.mark.parametrize("admission_wait", [0.0, 0.2])
async def test_the_shards_admission_wait_caps_every_wait(admission_wait: float) -> None:
    async with behind_on_writes(admission_wait=admission_wait) as shard:
        started = time.monotonic()
        assert not await asyncio.wait_for(shard.load.admit(math.inf), 5)
        assert time.monotonic() - started >= admission_wait


async def test_a_waiting_turn_whose_request_is_cancelled_leaves_the_queue() -> None:
    async with behind_on_writes() as shard:
        waiter = asyncio.create_task(shard.load.admit(5.0))
        await waiting(shard.load, 1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert shard.load.waiting == 0


async def test_requests_still_waiting_when_the_shard_stops_go_on() -> None:
    # A stopping shard answers them as a former owner; their gateways take them on.
    async with behind_on_writes() as shard:
        waiter = asyncio.create_task(shard.load.admit(5.0))
        await waiting(shard.load, 1)
        await shard.load.stop()
        assert await asyncio.wait_for(waiter, 1)
        assert shard.load.waiting == 0
        assert await shard.load.admit(5.0)  # and those arriving after it, at once
