"""A server tool called by the model, run on the shard, between two model steps."""

from __future__ import annotations

import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

AGENT = "chat-agent"
WEATHER = {"city": "Paris", "temperature": 21, "condition": "sunny"}


async def test_the_demo_weather_tool_runs_and_the_reply_is_one_message(
    cluster: LocalCluster, conversation: str
) -> None:
    a = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    b = await WsClient.connect(cluster.urls[1], AGENT, conversation)
    request = chat_request([user_message("tool:Paris")])
    await a.send(request)
    await a.wait_done(request["id"])
    await b.wait_done(request["id"])
    chunks = a.chunks(request["id"])
    types = [c["type"] for c in chunks]
    assert types[0] == "start"
    assert types.index("tool-input-available") < types.index("tool-output-available")
    assert types.count("start-step") == 2 and types.count("finish") == 1
    output = next(c for c in chunks if c["type"] == "tool-output-available")
    assert output["output"] == WEATHER
    assert a.text(request["id"]) == (
        'tool result: {"city":"Paris","temperature":21,"condition":"sunny"}'
    )
    # The other tab saw the same frames.
    assert [f for f in b.frames if f.get("id") == request["id"]] == [
        f for f in a.frames if f.get("id") == request["id"]
    ]
    history = await get_messages(cluster.urls[0], AGENT, conversation)
    assert [m["role"] for m in history] == ["user", "assistant"]
    parts = history[1]["parts"]
    tool_part = next(p for p in parts if p["type"] == "tool-getWeather")
    assert tool_part["state"] == "output-available"
    assert tool_part["input"] == {"city": "Paris"}
    assert tool_part["output"] == WEATHER
    assert [p["type"] for p in parts].count("step-start") == 2
    assert parts[-1]["text"].startswith("tool result: ")
    await a.close()
    await b.close()
