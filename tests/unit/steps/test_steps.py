"""The multi-step loop over the real scripted model (through litellm, offline)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import BaseModel

from durachat.steps import stream_steps
from durachat.tools import ToolSet, tool
from durachat.types import UIChunk


class City(BaseModel):
    city: str


def _user(text: str) -> dict[str, object]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}


async def _collect(stream: AsyncIterator[UIChunk]) -> list[UIChunk]:
    return [chunk async for chunk in stream]


async def test_a_server_tool_runs_between_two_steps() -> None:
    calls: list[str] = []

    @tool(description="weather", input=City)
    def getWeather(place: City) -> dict[str, object]:  # noqa: N802
        calls.append(place.city)
        return {"city": place.city, "temperature": 21}

    chunks = await _collect(
        stream_steps("durachat/scripted", [_user("tool:Paris")], ToolSet([getWeather]))
    )
    types = [c["type"] for c in chunks]
    assert calls == ["Paris"]
    assert types.count("start-step") == 2 and types.count("finish-step") == 2
    assert types.count("finish") == 1 and types[-1] == "finish"
    assert chunks[-1]["finishReason"] == "stop"
    output = next(c for c in chunks if c["type"] == "tool-output-available")
    assert output["output"] == {"city": "Paris", "temperature": 21}
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text == 'tool result: {"city":"Paris","temperature":21}'


async def test_preliminary_results_stream_and_the_last_yield_is_final() -> None:
    @tool(description="weather", input=City)
    async def getWeather(place: City) -> AsyncIterator[dict[str, object]]:  # noqa: N802
        yield {"status": "looking"}
        yield {"city": place.city, "temperature": 21}

    chunks = await _collect(
        stream_steps("durachat/scripted", [_user("tool:Oslo")], ToolSet([getWeather]))
    )
    outputs = [c for c in chunks if c["type"] == "tool-output-available"]
    assert [o.get("preliminary") for o in outputs] == [True, True, None]
    assert outputs[-1]["output"] == {"city": "Oslo", "temperature": 21}


async def test_a_client_tool_ends_the_reply_waiting_for_the_client() -> None:
    client_tool = tool("getWeather", description="asks the browser", input=City)
    chunks = await _collect(
        stream_steps("durachat/scripted", [_user("tool:Rome")], ToolSet([client_tool]))
    )
    types = [c["type"] for c in chunks]
    assert "tool-input-available" in types and "tool-output-available" not in types
    assert types.count("start-step") == 1
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}


async def test_an_unknown_tool_gets_an_error_result_and_the_model_goes_on() -> None:
    chunks = await _collect(stream_steps("durachat/scripted", [_user("tool:Lima")], ToolSet([])))
    error = next(c for c in chunks if c["type"] == "tool-output-error")
    assert "getWeather" in error["errorText"]
    assert [c["type"] for c in chunks].count("start-step") == 2


async def test_the_step_limit_is_honoured() -> None:
    @tool(description="weather", input=City)
    def getWeather(place: City) -> dict[str, object]:  # noqa: N802
        return {"city": place.city}

    chunks = await _collect(
        stream_steps("durachat/scripted", [_user("tool:Bern")], ToolSet([getWeather]), max_steps=1)
    )
    assert [c["type"] for c in chunks].count("start-step") == 1
    assert any(c["type"] == "tool-output-available" for c in chunks)


async def test_abort_stops_the_loop_without_a_finish() -> None:
    abort = asyncio.Event()

    @tool(description="weather", input=City)
    def getWeather(place: City) -> dict[str, object]:  # noqa: N802
        abort.set()
        return {"city": place.city}

    chunks = await _collect(
        stream_steps("durachat/scripted", [_user("tool:Kyiv")], ToolSet([getWeather]), abort=abort)
    )
    types = [c["type"] for c in chunks]
    assert "finish" not in types and types.count("start-step") == 1


async def test_a_continuation_runs_approved_tools_then_the_model() -> None:
    ran: list[str] = []

    @tool(description="pay", input=City, needs_approval=True)
    def getWeather(place: City) -> dict[str, object]:  # noqa: N802
        ran.append(place.city)
        return {"city": place.city}

    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {
                "type": "tool-getWeather",
                "toolCallId": "c1",
                "state": "approval-responded",
                "input": {"city": "Oslo"},
                "approval": {"id": "ap1", "approved": True},
            },
        ],
    }
    chunks = await _collect(
        stream_steps(
            "durachat/scripted",
            [_user("tool:Oslo"), assistant],
            ToolSet([getWeather]),
            continuation=True,
        )
    )
    assert ran == ["Oslo"]
    assert chunks[0] == {
        "type": "tool-output-available",
        "toolCallId": "c1",
        "output": {"city": "Oslo"},
    }
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text == 'tool result: {"city":"Oslo"}'


async def test_a_denied_call_makes_the_model_say_so() -> None:
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {
                "type": "tool-processPayment",
                "toolCallId": "c1",
                "state": "output-denied",
                "input": {"amount": 42, "recipient": "bob"},
                "approval": {"id": "ap1", "approved": False},
            },
        ],
    }
    chunks = await _collect(
        stream_steps(
            "durachat/scripted", [_user("approve:bob"), assistant], ToolSet([]), continuation=True
        )
    )
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "tool denied"


async def test_an_approved_client_tool_waits_for_the_client() -> None:
    client_tool = tool("getWeather", description="in the browser", input=City, needs_approval=True)
    assistant = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {
                "type": "tool-getWeather",
                "toolCallId": "c1",
                "state": "approval-responded",
                "input": {"city": "Oslo"},
                "approval": {"id": "ap1", "approved": True},
            },
        ],
    }
    chunks = await _collect(
        stream_steps(
            "durachat/scripted",
            [_user("tool:Oslo"), assistant],
            ToolSet([client_tool]),
            continuation=True,
        )
    )
    # No unavailable-tool error, no model step: the client answers first.
    assert chunks == []
