"""Polling with a deadline instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 10.0, interval: float = 0.02
) -> T:
    """Call `probe` until it returns a truthy value (or stops raising AssertionError)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = await probe()
            if result:
                return result
            error: BaseException | None = None
        except AssertionError as exc:
            error = exc
        if time.monotonic() > deadline:
            if error is not None:
                raise error
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
