"""Tools: a plain server tool, a streaming tool, a tool that asks for approval, a client tool.

Serve it (from the repository root) and talk to it with the scripted model's directives::

    DURACHAT_AGENTS=durachat.demo,examples.weather_agent make run

    .venv/bin/durachat chat --agent weather-agent "tool:Paris"        # getWeather runs
    .venv/bin/durachat chat --agent live-weather-agent "tool:Paris"   # the tool streams progress
    .venv/bin/durachat chat --agent weather-agent "approve:alice"     # trusted: paid at once
    .venv/bin/durachat chat --agent weather-agent "approve:bob"       # waits for an approval

The scripted model calls the tools by fixed names: `tool:<city>` calls `getWeather` with
`{"city": <city>}`, `approve:<name>` calls `processPayment` with
`{"amount": 42, "recipient": <name>}`, and `client-tool:` calls `getLocation` with `{}`. After a
tool result it answers `tool result: <the output as JSON>`. With a real model
(`DURACHAT_MODEL=openai/gpt-4o-mini`, say) the same agents work unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel, Field

from durachat import Agent
from durachat.tools import ToolContext, tool


class City(BaseModel):
    """Input of `getWeather`. Field descriptions end up in the JSON schema the model sees."""

    city: str = Field(description="The city, e.g. Paris")


class Weather(BaseModel):
    """What `getWeather` returns (a pydantic model is sent as its JSON dump)."""

    city: str
    temperature: int
    condition: str


def look_up(city: str) -> Weather:
    """A stand-in for a weather service: always mild and sunny."""
    return Weather(city=city, temperature=21, condition="sunny")


# A plain function is a server tool: the shard runs it and streams its return value as the
# tool's output. The name given first is the name the model calls.
@tool("getWeather", description="The current weather in a city.", input=City)
def get_weather(place: City) -> Weather:
    return look_up(place.city)


# An async generator streams: every value it yields reaches the client at once as a
# preliminary result, and the last one is also the final output the model sees. Taking a
# second parameter gives it the ToolContext (call id, abort event, ...).
@tool(
    "getWeather",
    description="The current weather in a city, with progress while it is looked up.",
    input=City,
)
async def get_weather_live(place: City, context: ToolContext) -> AsyncIterator[dict[str, object]]:
    yield {"city": place.city, "status": "finding weather stations"}
    await asyncio.sleep(0.05)  # pretend to wait for a slow service
    if context.abort is not None and context.abort.is_set():
        return  # the user cancelled the turn: stop before the next piece of work
    yield {"city": place.city, "status": "reading 3 stations"}
    await asyncio.sleep(0.05)
    yield {"status": "done", **look_up(place.city).model_dump()}


class Payment(BaseModel):
    """Input of `processPayment`."""

    amount: int = Field(description="Amount in euros")
    recipient: str


TRUSTED_RECIPIENTS = frozenset({"alice"})


def needs_sign_off(payment: Payment) -> bool:
    """Payments to anyone not on the trusted list wait for the user's approval.

    The check gets the validated input; it may also be `async`. `needs_approval=True` asks
    for every call.
    """
    return payment.recipient.lower() not in TRUSTED_RECIPIENTS


# An async function is a server tool too. With `needs_approval`, a call the check flags is not
# run: the reply ends with an approval request, and the call runs in the continuation once the
# user approves it (`addToolApprovalResponse` in the browser).
@tool(
    "processPayment",
    description="Pay someone. Payments to new recipients need the user's approval.",
    input=Payment,
    needs_approval=needs_sign_off,
)
async def process_payment(payment: Payment) -> dict[str, object]:
    await asyncio.sleep(0)  # a real tool would call the payment provider here
    return {"paid": True, "amount": payment.amount, "recipient": payment.recipient}


class NoInput(BaseModel):
    """A tool without arguments."""


# No execute: a client tool. The model may call it; the browser answers (`onToolCall` +
# `addToolOutput`), and the reply continues once it has.
get_location = tool(
    "getLocation", description="The user's location, which only the browser knows.", input=NoInput
)


class WeatherAgent(Agent):
    """Served as `weather-agent`: the model streams, and calls these tools as it sees fit."""

    system_prompt = "You help with the weather and pay people. Ask before paying strangers."
    tools = (get_weather, process_payment, get_location)
    max_steps = 3  # at most three model calls per reply (each tool round trip is one)


class LiveWeatherAgent(Agent):
    """Served as `live-weather-agent`: the same, with the streaming weather tool.

    It has no `getLocation`: a browser that can locate the user declares it itself, as a
    dynamic client tool (`clientTools` in the chat request).
    """

    system_prompt = WeatherAgent.system_prompt
    tools = (get_weather_live, process_payment)
