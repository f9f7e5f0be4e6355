"""Tests for durachat.messages.sanitize (docs/agents.md#storage)."""

from __future__ import annotations

import copy

import pytest

from durachat.messages import PROVIDER_TOOL_MAX_STRING_LENGTH, sanitize_message
from durachat.types import UIMessage, UIPart


def message_with(*parts: UIPart) -> UIMessage:
    return {"id": "a1", "role": "assistant", "parts": list(parts), "metadata": {"k": 1}}


# --- rule 1: OpenAI ephemeral ids -------------------------------------------------------------


@pytest.mark.parametrize("key", ["providerMetadata", "callProviderMetadata"])
def test_openai_item_ids_removed_and_empty_containers_dropped(key: str) -> None:
    part = {
        "type": "text",
        "text": "x",
        key: {"openai": {"itemId": "msg_1", "reasoningEncryptedContent": "enc"}},
    }
    result = sanitize_message(message_with(part))
    assert result["parts"] == [{"type": "text", "text": "x"}]


def test_openai_other_fields_and_other_providers_kept() -> None:
    part = {
        "type": "text",
        "text": "x",
        "providerMetadata": {"openai": {"itemId": "i", "keep": 1}, "anthropic": {"a": 2}},
    }
    result = sanitize_message(message_with(part))
    assert result["parts"][0]["providerMetadata"] == {
        "openai": {"keep": 1},
        "anthropic": {"a": 2},
    }


def test_empty_openai_dropped_but_other_provider_kept() -> None:
    part = {"type": "text", "text": "x", "providerMetadata": {"openai": {"itemId": "i"}, "g": {}}}
    assert sanitize_message(message_with(part))["parts"][0]["providerMetadata"] == {"g": {}}


def test_metadata_without_openai_untouched() -> None:
    part = {"type": "text", "text": "x", "providerMetadata": {"anthropic": {"itemId": "keep"}}}
    assert sanitize_message(message_with(part))["parts"] == [part]


# --- rule 2: empty reasoning ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n", None])
def test_empty_reasoning_removed(text: str | None) -> None:
    part: UIPart = {"type": "reasoning", "state": "done"}
    if text is not None:
        part["text"] = text
    result = sanitize_message(message_with(part, {"type": "text", "text": "answer"}))
    assert result["parts"] == [{"type": "text", "text": "answer"}]


def test_empty_reasoning_with_provider_metadata_kept() -> None:
    part = {"type": "reasoning", "text": "", "providerMetadata": {"anthropic": {"redacted": "d"}}}
    assert sanitize_message(message_with(part))["parts"] == [part]


def test_empty_reasoning_whose_metadata_was_only_openai_ids_removed() -> None:
    part = {
        "type": "reasoning",
        "text": "",
        "providerMetadata": {"openai": {"itemId": "rs_1", "reasoningEncryptedContent": "e"}},
    }
    assert sanitize_message(message_with(part))["parts"] == []


def test_empty_reasoning_with_empty_metadata_removed() -> None:
    part = {"type": "reasoning", "text": " ", "providerMetadata": {}}
    assert sanitize_message(message_with(part))["parts"] == []


def test_non_empty_reasoning_kept() -> None:
    part = {"type": "reasoning", "text": "thinking"}
    assert sanitize_message(message_with(part))["parts"] == [part]


# --- rule 3: provider-executed payloads -------------------------------------------------------


def provider_tool(name: str, **fields: object) -> UIPart:
    return {
        "type": f"tool-{name}",
        "toolCallId": "c1",
        "toolName": name,
        "state": "output-available",
        "providerExecuted": True,
    } | dict(fields)


def test_provider_executed_strings_truncated() -> None:
    long = "x" * 10_000
    part = provider_tool(
        "code_execution",
        input={"code": long, "short": "ok"},
        output={"stdout": [long, 1, None], "n": 3},
    )
    result = sanitize_message(message_with(part))["parts"][0]
    marker = "… [truncated, original length: 10000]"
    expected = "x" * (PROVIDER_TOOL_MAX_STRING_LENGTH - len(marker)) + marker
    assert result["input"] == {"code": expected, "short": "ok"}
    assert result["output"] == {"stdout": [expected, 1, None], "n": 3}
    assert len(expected) == PROVIDER_TOOL_MAX_STRING_LENGTH
    # The input message is not modified.
    assert part["input"]["code"] == long


def test_truncation_boundary() -> None:
    exact = "y" * PROVIDER_TOOL_MAX_STRING_LENGTH
    over = "y" * (PROVIDER_TOOL_MAX_STRING_LENGTH + 1)
    result = sanitize_message(message_with(provider_tool("bash", output=[exact, over])))
    out = result["parts"][0]["output"]
    assert out[0] == exact
    assert out[1].endswith("… [truncated, original length: 501]")
    assert len(out[1]) == PROVIDER_TOOL_MAX_STRING_LENGTH


def test_truncation_is_idempotent() -> None:
    message = message_with(
        provider_tool("bash", input="z" * 2000, output={"a": "w" * 600, "b": ["v" * 501]})
    )
    once = sanitize_message(message)
    twice = sanitize_message(once)
    assert twice == once
    assert once["parts"][0]["input"].endswith("original length: 2000]")


def test_top_level_string_output_truncated() -> None:
    result = sanitize_message(message_with(provider_tool("bash", output="q" * 900)))
    assert len(result["parts"][0]["output"]) == PROVIDER_TOOL_MAX_STRING_LENGTH


@pytest.mark.parametrize("name", ["web_search", "web_fetch"])
def test_web_tools_exempt(name: str) -> None:
    part = provider_tool(name, output={"content": "c" * 5000})
    assert sanitize_message(message_with(part))["parts"] == [part]


def test_web_tool_name_from_part_type() -> None:
    part = provider_tool("web_search", output="c" * 5000)
    del part["toolName"]
    assert sanitize_message(message_with(part))["parts"] == [part]


def test_encrypted_keys_preserved_verbatim() -> None:
    secret = "s" * 5000
    part = provider_tool(
        "code_execution",
        output={
            "encrypted_content": secret,
            "encryptedIndex": {"nested": [secret]},
            "plain": secret,
        },
    )
    out = sanitize_message(message_with(part))["parts"][0]["output"]
    assert out["encrypted_content"] == secret
    assert out["encryptedIndex"] == {"nested": [secret]}
    assert len(out["plain"]) == PROVIDER_TOOL_MAX_STRING_LENGTH


def test_not_provider_executed_untouched() -> None:
    part = provider_tool("bash", output="o" * 5000, providerExecuted=False)
    assert sanitize_message(message_with(part))["parts"] == [part]


def test_missing_input_not_added() -> None:
    part = provider_tool("bash")
    assert sanitize_message(message_with(part))["parts"] == [part]


# --- general ----------------------------------------------------------------------------------


def test_returns_new_message_and_keeps_other_fields() -> None:
    message = message_with({"type": "text", "text": "x"})
    original = copy.deepcopy(message)
    result = sanitize_message(message)
    assert result is not message
    assert result == original
    assert result["parts"][0] is not message["parts"][0]
    result["parts"][0]["text"] = "changed"
    assert message == original


def test_full_sanitize_is_idempotent() -> None:
    message = message_with(
        {"type": "reasoning", "text": "", "providerMetadata": {"openai": {"itemId": "r"}}},
        {"type": "text", "text": "a", "providerMetadata": {"openai": {"itemId": "m", "x": 1}}},
        provider_tool("bash", callProviderMetadata={"openai": {"itemId": "t"}}, output="p" * 800),
    )
    once = sanitize_message(message)
    assert sanitize_message(once) == once
    assert [p["type"] for p in once["parts"]] == ["text", "tool-bash"]
    assert "callProviderMetadata" not in once["parts"][1]
