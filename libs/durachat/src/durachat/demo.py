"""The demo agent `chat-agent` that `make run` serves, driven by the built-in scripted model."""

from __future__ import annotations

from pydantic import BaseModel

from durachat.agent import Agent
from durachat.tools import tool


class City(BaseModel):
    """Input of `getWeather`."""

    city: str


@tool(description="The current weather in a city.", input=City)
def getWeather(place: City) -> dict[str, object]:  # noqa: N802 - the tool's wire name
    """Always mild and sunny: a demo tool with a deterministic answer."""
    return {"city": place.city, "temperature": 21, "condition": "sunny"}


class ChatAgent(Agent):
    """Answers with the configured model (the offline scripted model by default)."""

    tools = (getWeather,)
