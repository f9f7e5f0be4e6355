"""The demo agent `chat-agent` that `make run` serves, driven by the built-in scripted model."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from durachat.agent import Agent
from durachat.tools import Tool, tool


class City(BaseModel):
    """Input of `getWeather`."""

    city: str


@tool(description="The current weather in a city.", input=City)
def getWeather(place: City) -> dict[str, object]:  # noqa: N802 - the tool's wire name
    """Always mild and sunny: a demo tool with a deterministic answer."""
    return {"city": place.city, "temperature": 21, "condition": "sunny"}


class Payment(BaseModel):
    """Input of `processPayment`."""

    amount: int
    recipient: str


@tool(
    description="Pay someone. A person must approve every payment.",
    input=Payment,
    needs_approval=True,
)
def processPayment(payment: Payment) -> dict[str, object]:  # noqa: N802 - the tool's wire name
    """Pretends to pay: approval is the point of this demo tool."""
    return {"ok": True, "amount": payment.amount, "recipient": payment.recipient}


class NoInput(BaseModel):
    """A tool without arguments."""


get_location = tool(
    "getLocation", description="The user's location, which only the browser knows.", input=NoInput
)
"""A client tool: no server execute; the client answers with `cf_agent_tool_result`."""


class ChatAgent(Agent):
    """Answers with the configured model (the offline scripted model by default)."""

    tools: Sequence[Tool] = (getWeather, processPayment, get_location)
