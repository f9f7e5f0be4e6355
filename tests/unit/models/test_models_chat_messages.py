"""UI messages to OpenAI chat-completions messages."""

from __future__ import annotations

import copy
import json
from typing import Any

from durachat.models import to_chat_messages


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value, "state": "done"}


def tool(name: str, call_id: str, state: str, **fields: Any) -> dict[str, Any]:
    return {"type": f"tool-{name}", "toolCallId": call_id, "state": state, **fields}


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def test_system_user_and_assistant_text() -> None:
    messages = [
        {"id": "s", "role": "system", "parts": [text("Be brief."), text("Be kind.")]},
        {"id": "u", "role": "user", "parts": [text("Hello"), text("there")]},
        {
            "id": "a",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "hmm", "state": "done"},
                text("Hi, "),
                text("friend."),
            ],
        },
    ]
    assert to_chat_messages(messages, system="You are a bot.") == [
        {"role": "system", "content": "You are a bot."},
        {"role": "system", "content": "Be brief.\nBe kind."},
        {"role": "user", "content": "Hello\nthere"},
        {"role": "assistant", "content": "Hi, friend."},
    ]


def test_data_reasoning_sources_and_empty_messages_are_dropped() -> None:
    messages: list[dict[str, Any]] = [
        {"id": "u", "role": "user", "parts": [{"type": "data-note", "data": {"x": 1}}]},
        {
            "id": "a",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "secret"},
                {"type": "data-weather", "id": "w", "data": {"t": 20}},
                {"type": "source-url", "sourceId": "s", "url": "https://example.com"},
            ],
        },
        {"id": "u2", "role": "user", "parts": [text("ok")]},
    ]
    assert to_chat_messages(messages) == [{"role": "user", "content": "ok"}]


def test_user_images_become_content_parts() -> None:
    messages = [
        {
            "id": "u",
            "role": "user",
            "parts": [
                text("What is this?"),
                {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAA"},
                {"type": "file", "mediaType": "application/pdf", "url": "https://x/y.pdf"},
            ],
        }
    ]
    assert to_chat_messages(messages) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
            ],
        }
    ]


def test_tool_calls_and_results_split_at_step_boundaries() -> None:
    messages = [
        {"id": "u", "role": "user", "parts": [text("Weather in Paris and Rome?")]},
        {
            "id": "a",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                text("Checking."),
                tool("weather", "c1", "output-available", input={"city": "Paris"}, output="sunny"),
                {
                    "type": "dynamic-tool",
                    "toolName": "lookup",
                    "toolCallId": "c2",
                    "state": "output-available",
                    "input": {"city": "Rome"},
                    "output": {"temp": 21},
                },
                {"type": "step-start"},
                text("Paris is sunny, "),
                text("Rome is 21."),
            ],
        },
    ]
    assert to_chat_messages(messages) == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                tool_call("c1", "weather", {"city": "Paris"}),
                tool_call("c2", "lookup", {"city": "Rome"}),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"temp": 21}'},
        {"role": "assistant", "content": "Paris is sunny, Rome is 21."},
    ]


def test_consecutive_tool_steps_become_separate_turns() -> None:
    messages = [
        {
            "id": "a",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                tool("search", "c1", "output-available", input={"q": "a"}, output="A"),
                {"type": "step-start"},
                tool("search", "c2", "output-error", input={"q": "b"}, errorText="quota"),
                {"type": "step-start"},
                text("Done."),
            ],
        }
    ]
    assert to_chat_messages(messages) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("c1", "search", {"q": "a"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("c2", "search", {"q": "b"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "quota"},
        {"role": "assistant", "content": "Done."},
    ]


def test_text_steps_without_tool_calls_stay_one_turn() -> None:
    messages = [
        {
            "id": "a",
            "role": "assistant",
            "parts": [{"type": "step-start"}, text("a"), {"type": "step-start"}, text("b")],
        }
    ]
    assert to_chat_messages(messages) == [{"role": "assistant", "content": "ab"}]


def test_text_after_tool_calls_splits_even_without_step_start() -> None:
    messages = [
        {
            "id": "a",
            "role": "assistant",
            "parts": [tool("f", "c1", "output-available", input={}, output="r"), text("after")],
        }
    ]
    assert to_chat_messages(messages) == [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "f", {})]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "after"},
    ]


def test_denials_pending_calls_and_incomplete_calls() -> None:
    approval_denied = {"id": "ap1", "approved": False, "reason": "not allowed"}
    messages = [
        {
            "id": "a",
            "role": "assistant",
            "parts": [
                tool("pay", "c1", "output-denied", input={"amount": 5}, approval=approval_denied),
                tool(
                    "pay", "c2", "approval-responded", input={"amount": 6}, approval=approval_denied
                ),
                tool(
                    "pay", "c3", "approval-requested", input={"amount": 7}, approval={"id": "ap3"}
                ),
                tool("pay", "c4", "input-available", input={"amount": 8}),
                tool("pay", "c5", "input-streaming", input={"amo": None}),
                tool(
                    "search", "c6", "output-available", input={}, output="x", providerExecuted=True
                ),
                tool("pay", "c7", "output-denied", input={"amount": 9}, approval={"id": "ap7"}),
                tool("pay", "c8", "output-error", errorText=""),
            ],
        }
    ]
    result = to_chat_messages(messages)
    assert result[0]["role"] == "assistant"
    assert [c["id"] for c in result[0]["tool_calls"]] == ["c1", "c2", "c3", "c4", "c7", "c8"]
    assert result[0]["tool_calls"][-1]["function"]["arguments"] == "{}"
    assert result[1:] == [
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "Tool execution denied. Reason: not allowed",
        },
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "Tool execution denied. Reason: not allowed",
        },
        {"role": "tool", "tool_call_id": "c7", "content": "Tool execution denied."},
        {"role": "tool", "tool_call_id": "c8", "content": "Tool execution failed."},
    ]


def test_tool_input_is_normalized_like_the_reference_builder() -> None:
    parts = [
        tool("f", "c1", "input-available", input='{"a": 1}'),
        tool("f", "c2", "input-available", input="[1]"),
        tool("f", "c3", "input-available", input=None),
        tool("f", "c4", "input-available", input={"ü": "é"}),
    ]
    result = to_chat_messages([{"id": "a", "role": "assistant", "parts": parts}])
    arguments = [c["function"]["arguments"] for c in result[0]["tool_calls"]]
    assert [json.loads(a) for a in arguments] == [{"a": 1}, {}, {}, {"ü": "é"}]
    assert "ü" in arguments[3]


def test_input_is_not_modified() -> None:
    messages = [
        {"id": "u", "role": "user", "parts": [text("hi")]},
        {
            "id": "a",
            "role": "assistant",
            "parts": [tool("f", "c1", "output-available", input={"a": 1}, output={"b": 2})],
        },
    ]
    before = copy.deepcopy(messages)
    to_chat_messages(messages)
    assert messages == before
