"""The `events` behaviour (`EventFeedUser`): a subscriber of durachat's event feed
(docs/observability.md#subscribing-to-events), following `/v1/events` for `--durachat-idle-hold`
seconds while the other users chat, and recording how late each event arrives."""

from __future__ import annotations

import json
import random
import time
from typing import ClassVar

import httpx
from locust import User, between, task

from durachat.loadtest.metrics import Recorder
from durachat.loadtest.settings import Settings


class EventFeedUser(User):
    """Follows the event feed (durachat only; needs an API key or the admin key in auth mode).

    Each event is recorded as `EVENT lag`: its emission time (`time`) to its arrival, so the
    clocks of the server and the load generator must agree. A feed that cannot be opened, or
    that drops before the hold ends, is recorded as `EVENT subscribe` with its failure.
    """

    wait_time = between(0, 1)
    types: ClassVar[str] = "chat:turn:*,chat:recovery:*"
    """The event types followed."""

    settings: Settings
    recorder: Recorder

    def on_start(self) -> None:
        """Read the settings (sent by the master with each spawn message)."""
        self.settings = Settings.from_options(self.environment.parsed_options)
        self.recorder = Recorder(self.environment)

    @task
    def follow(self) -> None:
        """Follow the feed for a while."""
        hold = random.uniform(*self.settings.idle_hold_s)
        headers = {"Accept": "text/event-stream"}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        url = f"{(self.host or '').rstrip('/')}/v1/events"
        started = time.perf_counter()
        timeout = httpx.Timeout(self.settings.connect_timeout_s, read=30.0)
        try:
            with (
                httpx.Client(timeout=timeout, headers=headers) as http,
                http.stream("GET", url, params={"types": self.types}) as response,
            ):
                if response.status_code != 200:
                    self.recorder.event(
                        "EVENT", "subscribe", _ms(started), f"http_{response.status_code}"
                    )
                    return
                self.recorder.event("EVENT", "subscribe", _ms(started))
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self._record(line[6:])
                    if time.perf_counter() - started >= hold:
                        return
        except httpx.HTTPError as exc:
            self.recorder.event("EVENT", "subscribe", _ms(started), type(exc).__name__)

    def _record(self, data: str) -> None:
        try:
            emitted = float(json.loads(data)["time"]) / 1000
        except (ValueError, KeyError, TypeError):
            self.recorder.event("EVENT", "lag", 0.0, "bad_event")
            return
        self.recorder.event("EVENT", "lag", (time.time() - emitted) * 1000)


def _ms(since: float) -> float:
    return (time.perf_counter() - since) * 1000
