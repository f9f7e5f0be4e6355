"""`LoopLag`: a shard's event loop that runs late is overloaded until it has been on time for a
while. The loop is blocked for real (`time.sleep` on it: the blocked loop is what is tested)."""

from __future__ import annotations

import time

import pytest

from durachat_shard.overload import LoopLag
from support.waiting import eventually

pytestmark = pytest.mark.timeout(10)


async def test_a_blocked_loop_is_overloaded_until_it_has_been_on_time_for_the_limit() -> None:
    load = LoopLag(0.2, interval=0.02)
    load.start()
    try:

        async def on_time() -> bool:
            return not load.overloaded

        await eventually(on_time)
        time.sleep(0.4)  # noqa: ASYNC251 - blocks the loop on purpose: what is measured
        # Nothing has run since: the overdue measurement counts.
        assert load.lag >= 0.35
        assert load.overloaded
        began = time.monotonic()
        await eventually(on_time, timeout=5)
        # Not the moment one measurement came in under the limit: `limit` seconds after.
        assert time.monotonic() - began >= 0.15
    finally:
        await load.stop()


async def test_without_a_limit_nothing_is_refused() -> None:
    load = LoopLag(0, interval=0.02)
    load.start()
    try:
        time.sleep(0.2)  # noqa: ASYNC251 - blocks the loop on purpose
        assert load.lag >= 0.15
        assert not load.overloaded
    finally:
        await load.stop()


async def test_a_stopped_monitor_reports_no_lag() -> None:
    load = LoopLag(0.1)
    assert load.lag == 0.0 and not load.overloaded
