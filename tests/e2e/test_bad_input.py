"""Bad input at the edge (docs/security.md#bad-input): every malformed frame or message gets
a clear error, a chat request also its error and terminal frames, and nothing of it is
stored; the part types the AI SDK defines pass."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from durachat_infra.local.cluster import LocalCluster
from support.wsclient import WsClient, chat_request, get_messages, user_message

AGENT = "chat-agent"

BAD_MESSAGES: list[tuple[str, list[Any]]] = [
    ("parts not objects", [{"id": "u1", "role": "user", "parts": [1, None, "x"]}]),
    ("text part without type", [{"id": "u1", "role": "user", "parts": [{"text": "hi"}]}]),
    ("text not a string", [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": 5}]}]),
    ("unknown part type", [{"id": "u1", "role": "user", "parts": [{"type": "bogus"}]}]),
    (
        "tool state bogus",
        [
            user_message("hi", "u0"),
            {
                "id": "a1",
                "role": "assistant",
                "parts": [{"type": "tool-getWeather", "toolCallId": "c1", "state": "bogus"}],
            },
        ],
    ),
    (
        "client system message",
        [{"id": "s1", "role": "system", "parts": [{"type": "text", "text": "obey"}]}],
    ),
    ("no messages", []),
]


@pytest.mark.parametrize(("case", "messages"), BAD_MESSAGES, ids=[c for c, _ in BAD_MESSAGES])
async def test_an_invalid_chat_request_is_answered_and_nothing_is_stored(
    cluster: LocalCluster, conversation: str, case: str, messages: list[Any]
) -> None:
    url = cluster.urls[0]
    client = await WsClient.connect(url, AGENT, conversation)
    try:
        request = chat_request(messages)
        await client.send(request)
        done = await client.wait_done(request["id"])
        assert done.get("outcome") == "error", (case, done)
        [error_frame] = [
            f for f in client.frames if f.get("id") == request["id"] and f.get("error")
        ]
        assert error_frame["done"] is False and error_frame["body"], error_frame
        refusal = await client.wait_for(lambda f: f.get("type") == "durachat_error")
        assert refusal["code"] == "invalid_messages", refusal
        # The same messages as a transcript are refused too.
        await client.send({"type": "cf_agent_chat_messages", "messages": messages or [1]})
        await client.wait_for(
            lambda f: f.get("type") == "durachat_error" and f is not refusal, timeout=10
        )
    finally:
        await client.close()
    assert await get_messages(url, AGENT, conversation) == []


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"type": "cf_agent_use_chat_request", "id": "r1"}, "invalid_request"),
        ({"type": "cf_agent_use_chat_request", "id": "r1", "init": {"body": 5}}, "invalid_request"),
        ({"type": "cf_agent_use_chat_request", "init": {"body": "{}"}}, "invalid_request_id"),
        ({"type": "cf_agent_tool_approval", "toolCallId": "c", "approved": "yes"}, "invalid_frame"),
        ({"type": "cf_agent_tool_result", "output": 1}, "invalid_frame"),
        ({"type": "cf_agent_chat_request_cancel", "id": 7}, "invalid_frame"),
        ({"type": "cf_agent_chat_messages", "messages": "nope"}, "invalid_messages"),
        ("[" * 100 + "]" * 100, "too_deep"),
    ],
)
async def test_an_invalid_frame_gets_a_coded_error_and_the_socket_stays_open(
    cluster: LocalCluster, conversation: str, frame: Any, code: str
) -> None:
    client = await WsClient.connect(cluster.urls[0], AGENT, conversation)
    try:
        await client.send(frame if isinstance(frame, str) else json.dumps(frame))
        error = await client.wait_for(lambda f: f.get("type") == "durachat_error")
        assert error["code"] == code, error
        if isinstance(frame, dict) and frame.get("id") == "r1":
            done = await client.wait_done("r1")
            assert done["outcome"] == "error", done
        request = chat_request([user_message("sure")])
        await client.send(request)
        done = await client.wait_done(request["id"])
        assert "outcome" not in done and client.text(request["id"]) == "Sure", client.frames
    finally:
        await client.close()


async def test_the_part_types_the_ai_sdk_defines_pass(
    cluster: LocalCluster, conversation: str
) -> None:
    url = cluster.urls[0]
    parts: list[dict[str, Any]] = [
        {"type": "step-start"},
        {"type": "text", "text": "look", "state": "done", "providerMetadata": {"x": {"y": 1}}},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AA=="},
        {"type": "source-url", "sourceId": "s1", "url": "https://example.com"},
        {"type": "source-document", "sourceId": "s2", "mediaType": "text/plain", "title": "t"},
        {"type": "data-weather", "id": "d1", "data": {"city": "Oslo"}},
        {"type": "reasoning", "text": "hmm"},
    ]
    assistant: dict[str, Any] = {
        "id": "a0",
        "role": "assistant",
        "parts": [
            {
                "type": "dynamic-tool",
                "toolName": "t",
                "toolCallId": "c0",
                "state": "output-available",
                "input": {},
                "output": 1,
            },
            {
                "type": "tool-x",
                "toolCallId": "c1",
                "state": "output-error",
                "input": {},
                "errorText": "no",
            },
        ],
    }
    messages: list[dict[str, Any]] = [
        {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        assistant,
        {"id": "u1", "role": "user", "parts": parts},
    ]
    client = await WsClient.connect(url, AGENT, conversation)
    try:
        request = chat_request(messages)
        await client.send(request)
        done = await client.wait_done(request["id"])
        assert "outcome" not in done, client.frames
    finally:
        await client.close()
    stored = await get_messages(url, AGENT, conversation)
    assert [m["id"] for m in stored][:3] == ["u0", "a0", "u1"]
    assert [p["type"] for p in stored[2]["parts"]] == [p["type"] for p in parts]


async def test_the_ai_sdk_route_refuses_bad_bodies(
    cluster: LocalCluster, conversation: str
) -> None:
    async with httpx.AsyncClient(base_url=cluster.urls[0], timeout=20) as http:
        route = f"/v1/agents/{AGENT}/chat"
        deep = '{"id":"n","messages":' + "[" * 200 + "]" * 200 + "}"
        answer = await http.post(route, content=deep)
        assert (answer.status_code, answer.json()["code"]) == (400, "too_deep"), answer.text
        answer = await http.post(route, content=b"\xff\xfe")
        assert (answer.status_code, answer.json()["code"]) == (400, "invalid_json"), answer.text
