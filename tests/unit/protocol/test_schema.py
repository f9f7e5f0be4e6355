"""The shapes accepted from clients (`durachat.protocol.schema`, docs/security.md#bad-input)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from durachat.protocol.schema import InvalidInputError, check_client_frame, check_messages


def user(*parts: Any, role: str = "user") -> dict[str, Any]:
    return {"id": "m1", "role": role, "parts": list(parts)}


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        ([user(1, None, "x")], "messages[0].parts[0]"),
        ([user({"text": "hi"})], "messages[0].parts[0]"),
        ([user({"type": "text", "text": 5})], "messages[0].parts[0].text"),
        ([user({"type": "bogus"})], "messages[0].parts[0]"),
        ([user({"type": "tool-x", "toolCallId": "c", "state": "bogus"})], "parts[0].state"),
        (
            [user({"type": "dynamic-tool", "toolCallId": "c", "state": "input-available"})],
            "toolName",
        ),
        ([user({"type": "file", "url": "u"})], "mediaType"),
        ([user({"type": "text", "text": "x"}, role="robot")], "messages[0].role"),
        ([{"role": "user", "parts": []}], "messages[0].id"),
        ([{"id": "", "role": "user", "parts": []}], "messages[0].id"),
        ([{"id": "m", "role": "user", "parts": "x"}], "messages[0].parts"),
        (["not a message"], "messages[0]"),
    ],
)
def test_malformed_messages_are_refused_with_where(messages: list[Any], where: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check_messages(messages)
    assert refused.value.code == "invalid_messages"
    assert where in refused.value.message


def test_no_messages_is_refused_for_a_request() -> None:
    check_messages([])
    with pytest.raises(InvalidInputError):
        check_messages([], allow_empty=False)


def test_every_part_type_the_ai_sdk_defines_passes() -> None:
    check_messages(
        [
            user(
                {"type": "text", "text": "hi", "state": "done", "providerMetadata": {"a": 1}},
                {"type": "reasoning", "text": "r"},
                {"type": "step-start"},
                {"type": "file", "mediaType": "image/png", "url": "data:,", "filename": "a"},
                {"type": "source-url", "sourceId": "s", "url": "https://x"},
                {"type": "source-document", "sourceId": "s", "mediaType": "m", "title": "t"},
                {"type": "data-anything", "data": [1, 2]},
                {
                    "type": "dynamic-tool",
                    "toolName": "t",
                    "toolCallId": "c",
                    "state": "output-denied",
                },
                {
                    "type": "tool-weather",
                    "toolCallId": "c2",
                    "state": "approval-responded",
                    "input": "{}",
                    "approval": {"id": "a", "approved": True},
                },
            ),
            user({"type": "text", "text": "stored"}, role="system"),
        ]
    )


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"type": "cf_agent_use_chat_request", "init": {"body": "{}"}}, "invalid_request_id"),
        ({"type": "cf_agent_use_chat_request", "id": "r", "init": {}}, "invalid_request"),
        ({"type": "cf_agent_use_chat_request", "id": "r", "init": {"body": ""}}, "invalid_request"),
        ({"type": "cf_agent_tool_result", "toolCallId": 1}, "invalid_frame"),
        ({"type": "cf_agent_tool_approval", "toolCallId": "c"}, "invalid_frame"),
        ({"type": "cf_agent_stream_resume_ack"}, "invalid_frame"),
        ({"type": "cf_agent_stream_resume_request", "probeId": 3}, "invalid_frame"),
        ({"type": "cf_agent_chat_messages"}, "invalid_messages"),
    ],
)
def test_malformed_frames_are_refused(frame: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        check_client_frame(frame)
    assert refused.value.code == code


def test_valid_and_unknown_frames_pass() -> None:
    check_client_frame(
        {"type": "cf_agent_use_chat_request", "id": "r", "init": {"method": "POST", "body": "{}"}}
    )
    check_client_frame({"type": "cf_agent_tool_approval", "toolCallId": "c", "approved": False})
    check_client_frame({"type": "cf_agent_chat_clear"})
    check_client_frame({"type": "something_else", "x": 1})


def test_checking_a_request_costs_little_next_to_parsing_it() -> None:
    import json

    messages = [
        user({"type": "step-start"}, {"type": "text", "text": "words " * 40, "state": "done"})
        for _ in range(50)
    ]
    text = json.dumps({"messages": messages})
    rounds = 200
    started = time.perf_counter()
    for _ in range(rounds):
        json.loads(text)
    parsing = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(rounds):
        check_messages(messages)
    checking = time.perf_counter() - started
    # About 1.2 µs a message: about the cost of parsing, and far below a millisecond
    # for a 50-message request (it runs once per request, never per chunk).
    assert checking / rounds < 0.002, checking / rounds
    assert checking < parsing * 10, (checking, parsing)
