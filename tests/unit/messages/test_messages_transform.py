"""Tests for durachat.messages.transform (docs/protocol.md#messages-from-clients)."""

from __future__ import annotations

import pytest

from durachat.messages import auto_transform_messages, is_valid_message
from durachat.types import UIMessage

# --- is_valid_message -------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["user", "assistant", "system"])
def test_valid_messages(role: str) -> None:
    assert is_valid_message({"id": "m", "role": role, "parts": []})


@pytest.mark.parametrize(
    "obj",
    [
        None,
        "text",
        ["id"],
        {"role": "user", "parts": []},
        {"id": "", "role": "user", "parts": []},
        {"id": 5, "role": "user", "parts": []},
        {"id": "m", "role": "data", "parts": []},
        {"id": "m", "role": "tool", "parts": []},
        {"id": "m", "parts": []},
        {"id": "m", "role": "user"},
        {"id": "m", "role": "user", "parts": "text"},
        {"id": "m", "role": "user", "parts": {}},
    ],
)
def test_invalid_messages(obj: object) -> None:
    assert not is_valid_message(obj)


# --- current (v5+) messages -------------------------------------------------------------------


def test_healthy_message_returned_as_is() -> None:
    message = {
        "id": "a",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "x"},
            {"type": "tool-t", "toolCallId": "c", "state": "input-available", "input": {"q": 1}},
        ],
        "metadata": {"m": 1},
    }
    result = auto_transform_messages([message])
    assert result == [message]
    assert result[0] is message


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, {}), ("", {}), ("[1]", {}), ('{"q": 2}', {"q": 2}), ([1], {}), (7, {})],
)
def test_tool_input_normalised(raw: object, expected: dict[str, object]) -> None:
    message: UIMessage = {
        "id": "a",
        "role": "assistant",
        "parts": [{"type": "tool-t", "toolCallId": "c", "state": "input-available", "input": raw}],
    }
    [result] = auto_transform_messages([message])
    assert result["parts"][0]["input"] == expected
    assert message["parts"][0]["input"] == raw  # input untouched


def test_absent_tool_input_and_dynamic_tool_normalised() -> None:
    message = {
        "id": "a",
        "role": "assistant",
        "parts": [
            {"type": "tool-t", "toolCallId": "c", "state": "input-streaming"},
            {"type": "dynamic-tool", "toolName": "d", "toolCallId": "e", "input": "x"},
            {"type": "data-x", "data": 1},
        ],
    }
    [result] = auto_transform_messages([message])
    assert result["parts"][0]["input"] == {}
    assert result["parts"][1]["input"] == {}
    assert "input" not in result["parts"][2]


def test_non_object_parts_dropped() -> None:
    message = {"id": "u", "role": "user", "parts": ["junk", {"type": "text", "text": "ok"}, 3]}
    [result] = auto_transform_messages([message])
    assert result["parts"] == [{"type": "text", "text": "ok"}]


def test_invalid_rows_skipped_in_order() -> None:
    good1 = {"id": "1", "role": "user", "parts": [{"type": "text", "text": "a"}]}
    good2 = {"id": "2", "role": "assistant", "parts": []}
    rows: list[object] = [
        None,
        "string",
        42,
        good1,
        {"id": "", "role": "user", "parts": []},
        {"role": "user", "parts": []},
        {"id": "x", "role": "robot", "parts": []},
        {"id": "y", "role": "user", "something": "else"},
        good2,
    ]
    assert auto_transform_messages(rows) == [good1, good2]


# --- legacy v4 messages -----------------------------------------------------------------------


def test_v4_user_content_converted() -> None:
    assert auto_transform_messages([{"id": "u1", "role": "user", "content": "Hello"}]) == [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]}
    ]


def test_v4_assistant_with_reasoning_tools_and_text() -> None:
    legacy = {
        "id": "a1",
        "role": "assistant",
        "content": "It is sunny.",
        "reasoning": "Need weather.",
        "toolInvocations": [
            {
                "toolCallId": "c1",
                "toolName": "weather",
                "args": {"city": "Paris"},
                "result": {"sky": "sun"},
                "state": "result",
            },
            {"toolCallId": "c2", "toolName": "draft", "args": None, "state": "partial-call"},
            {"toolCallId": "c3", "toolName": "lookup", "args": '{"k": 1}', "state": "call"},
            {"toolCallId": "c4", "toolName": "bad", "args": {}, "state": "error"},
            {"toolCallId": "c5", "toolName": "odd", "args": {}, "state": "unknown"},
            {"no": "toolName"},
            "junk",
        ],
        "createdAt": "2024-01-01",
    }
    [result] = auto_transform_messages([legacy])
    assert result == {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "reasoning", "text": "Need weather."},
            {
                "type": "tool-weather",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"city": "Paris"},
                "output": {"sky": "sun"},
            },
            {"type": "tool-draft", "toolCallId": "c2", "state": "input-streaming", "input": {}},
            {
                "type": "tool-lookup",
                "toolCallId": "c3",
                "state": "input-available",
                "input": {"k": 1},
            },
            {
                "type": "tool-bad",
                "toolCallId": "c4",
                "state": "output-error",
                "input": {},
                "errorText": "",
            },
            {"type": "tool-odd", "toolCallId": "c5", "state": "input-available", "input": {}},
            {"type": "text", "text": "It is sunny."},
        ],
    }


def test_v4_tool_only_message_with_empty_content_has_no_empty_text() -> None:
    legacy = {
        "id": "a",
        "role": "assistant",
        "content": "",
        "toolInvocations": [{"toolCallId": "c", "toolName": "t", "args": {}, "state": "call"}],
    }
    [result] = auto_transform_messages([legacy])
    assert [p["type"] for p in result["parts"]] == ["tool-t"]


def test_v4_empty_content_alone_becomes_empty_text() -> None:
    [result] = auto_transform_messages([{"id": "a", "role": "assistant", "content": ""}])
    assert result["parts"] == [{"type": "text", "text": ""}]


def test_v4_data_role_becomes_system_and_missing_role_user() -> None:
    result = auto_transform_messages(
        [{"id": "d", "role": "data", "content": "ctx"}, {"id": "n", "content": "hi"}]
    )
    assert [m["role"] for m in result] == ["system", "user"]


def test_v4_missing_id_uses_index() -> None:
    result = auto_transform_messages([None, {"role": "user", "content": "hi"}])
    assert result[0]["id"] == "msg-1"


def test_v4_array_content_converted() -> None:
    legacy = {
        "id": "u",
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"text": "b"}, {"type": "image"}, "junk"],
    }
    [result] = auto_transform_messages([legacy])
    assert result["parts"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


def test_v4_object_content_serialised() -> None:
    [result] = auto_transform_messages([{"id": "u", "role": "user", "content": {"k": 1}}])
    assert result["parts"] == [{"type": "text", "text": '{"k": 1}'}]


def test_v4_invalid_role_dropped() -> None:
    assert auto_transform_messages([{"id": "t", "role": "tool", "content": "x"}]) == []


def test_mixed_v4_and_v5() -> None:
    v5 = {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "B"}]}
    result = auto_transform_messages([{"id": "u", "role": "user", "content": "A"}, v5])
    assert [m["id"] for m in result] == ["u", "a"]
    assert result[1] is v5
