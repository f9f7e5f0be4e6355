"""Agents only the real-client compatibility suite (tests/compat) serves.

* `compat-live-tool-agent`: the scripted model with a streaming server tool. `tool:<city>` calls
  `getWeather`, an async generator: each value it yields reaches the client as a preliminary
  `tool-output-available`, a pause apart; the last one is also the final output, which the
  model then answers with `tool result: <output as JSON>`.
* `compat-data-agent`: a handwritten reply made of custom data parts around a text: a
  `data-progress` part updated in place (same type and id), a `data-note` with the same id but
  another type (its own part), `data-source` parts without an id (appended), and transient
  `data-status` parts (delivered live, never stored).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel

from durachat import Agent, Turn
from durachat.tools import ToolContext, tool
from durachat.types import UIChunk

LIVE_STEPS = ("finding weather stations", "reading 3 stations", "averaging")
"""The statuses `getWeather` yields as preliminary results before its final output."""
LIVE_PAUSE = 0.4
"""Seconds between two of its yields: long enough for a client to join mid-stream."""
DATA_PAUSE = 0.15
"""Seconds between the data chunks of `compat-data-agent` that a client should see live."""


class City(BaseModel):
    """Input of `getWeather`."""

    city: str


@tool(
    "getWeather",
    description="The weather in a city, with progress while it is looked up.",
    input=City,
)
async def get_weather_live(place: City, context: ToolContext) -> AsyncIterator[dict[str, object]]:
    for step, status in enumerate(LIVE_STEPS, start=1):
        yield {"city": place.city, "status": status, "step": step}
        await asyncio.sleep(LIVE_PAUSE)
        if context.abort is not None and context.abort.is_set():
            return
    yield {"city": place.city, "status": "done", "temperature": 21, "condition": "sunny"}


class CompatLiveToolAgent(Agent):
    """Served as `compat-live-tool-agent`."""

    tools = (get_weather_live,)


class CompatDataAgent(Agent):
    """Served as `compat-data-agent`: no model; the same reply whatever the user says."""

    async def on_chat_message(self, turn: Turn) -> AsyncIterator[UIChunk]:
        yield {"type": "start"}
        yield {"type": "data-status", "data": {"text": "working"}, "transient": True}
        for done in (1, 2):
            yield {"type": "data-progress", "id": "job", "data": {"done": done, "total": 3}}
            await asyncio.sleep(DATA_PAUSE)
            if turn.abort.is_set():
                return
        yield {"type": "data-note", "id": "job", "data": {"text": "same id, another type"}}
        yield {"type": "text-start", "id": "t"}
        for word in ("Report ", "done."):
            yield {"type": "text-delta", "id": "t", "delta": word}
        yield {"type": "text-end", "id": "t"}
        await asyncio.sleep(DATA_PAUSE)
        # After the text: replaces the first part in place, it does not move to the end.
        yield {"type": "data-progress", "id": "job", "data": {"done": 3, "total": 3}}
        yield {"type": "data-status", "data": {"text": "finishing"}, "transient": True}
        for title in ("A", "B"):
            yield {"type": "data-source", "data": {"title": title}}
        yield {"type": "finish"}
