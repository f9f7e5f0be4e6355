"""The event feed's lag under load: an SSE subscriber on the target's gateway during the load
phase, measuring the time from each turn event's emission (its `time`) to its arrival
(docs/benchmarks.md#event-feed-lag). The lag is also split at the moment Redis stored the
event (the millisecond part of its stream id): publishing (emit to Redis) and delivery (Redis to
the subscriber)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from typing import Any

import httpx

from bench.stats import summary
from bench.targets import Target

TYPES = "chat:turn:started,chat:turn:finished"


class EventLag:
    """Follows `/v1/events` in a thread of its own while the load runs."""

    def __init__(self, target: Target) -> None:
        query = f"?types={TYPES}" + (f"&{target.query}" if target.query else "")
        self._url = f"http://{target.host}:{target.port}/v1/events{query}"
        # (emitted at, total lag ms, publish lag ms, delivery lag ms)
        self._samples: list[tuple[float, float, float, float]] = []
        self._connected = threading.Event()
        self._error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._run, name="event-lag", daemon=True)
        self._window: tuple[float, float] | None = None

    def start(self) -> None:
        """Subscribe (returns once the gateway has opened the subscription, or after 10 s)."""
        self._thread.start()
        self._connected.wait(10)

    def mark(self, label: str) -> None:
        """The load's measuring window (`measure-start`, `measure-end`)."""
        now = time.time()
        if label == "measure-start":
            self._window = (now, float("inf"))
        elif label == "measure-end" and self._window is not None:
            self._window = (self._window[0], now)

    def stop(self) -> dict[str, Any]:
        """Unsubscribe; the lags (ms) of the events emitted inside the window."""
        if self._loop is not None and self._task is not None:
            # The subscription may have ended already (the gateway dropped it under overload),
            # and its loop closed with it.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(15)
        start, end = self._window or (0.0, float("inf"))
        inside = [s for s in self._samples if start <= s[0] <= end]
        return {
            **summary([s[1] for s in inside]),
            "publish_ms": summary([s[2] for s in inside]),
            "delivery_ms": summary([s[3] for s in inside]),
            "events": len(inside),
            "error": self._error,
            "types": TYPES,
        }

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow()

        asyncio.run(main())

    async def _follow(self) -> None:
        # Heartbeats come every 15 s at the latest, so a read that waits longer is a dead feed.
        timeout = httpx.Timeout(10.0, read=60.0)
        try:
            async with (
                httpx.AsyncClient(timeout=timeout) as http,
                http.stream("GET", self._url) as response,
            ):
                if response.status_code != 200:
                    self._error = f"HTTP {response.status_code}"
                    return
                self._connected.set()
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        arrived = time.time()
                        event = json.loads(line[6:])
                        emitted = event["time"] / 1000
                        stored = int(event["id"].split("-")[0]) / 1000
                        self._samples.append(
                            (
                                emitted,
                                (arrived - emitted) * 1000,
                                (stored - emitted) * 1000,
                                (arrived - stored) * 1000,
                            )
                        )
        except httpx.HTTPError as exc:
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            self._connected.set()
