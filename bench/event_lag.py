"""The event feed's lag under load: an SSE subscriber on the target's gateway during the load
phase, measuring the time from each turn event's emission (its `time`) to its arrival
(docs/benchmarks.md#event-feed-lag)."""

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
        self._lags: list[tuple[float, float]] = []
        self._connected = threading.Event()
        self._stop = threading.Event()
        self._error: str | None = None
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
        self._stop.set()
        self._thread.join(15)
        start, end = self._window or (0.0, float("inf"))
        lags = [lag for at, lag in self._lags if start <= at <= end]
        return {
            **summary(lags),
            "events": len(lags),
            "error": self._error,
            "types": TYPES,
        }

    def _run(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.run(self._follow())

    async def _follow(self) -> None:
        timeout = httpx.Timeout(10.0, read=2.0)
        try:
            async with (
                httpx.AsyncClient(timeout=timeout) as http,
                http.stream("GET", self._url) as response,
            ):
                if response.status_code != 200:
                    self._error = f"HTTP {response.status_code}"
                    return
                self._connected.set()
                lines = response.aiter_lines()
                while not self._stop.is_set():
                    try:
                        line = await anext(lines)
                    except httpx.ReadTimeout:
                        continue
                    if line.startswith("data: "):
                        arrived = time.time()
                        event = json.loads(line[6:])
                        emitted = event["time"] / 1000
                        self._lags.append((emitted, (arrived - emitted) * 1000))
        except (httpx.HTTPError, StopAsyncIteration) as exc:
            self._error = self._error or f"{type(exc).__name__}: {exc}"
        finally:
            self._connected.set()
