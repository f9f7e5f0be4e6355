"""Tests for durachat.messages.builder (docs/protocol.md#how-chunks-become-parts)."""

from __future__ import annotations

import json

import pytest

from durachat.messages import (
    OpenBlocks,
    apply_chunk_to_parts,
    find_tool_part,
    is_replay_chunk,
    normalize_tool_input,
)
from durachat.types import UIChunk, UIPart


def build(*chunks: UIChunk, blocks: OpenBlocks | None = None) -> list[UIPart]:
    parts: list[UIPart] = []
    for chunk in chunks:
        apply_chunk_to_parts(parts, chunk, blocks)
    return parts


def tool_part(state: str, call_id: str = "c1", **extra: object) -> UIPart:
    return {"type": "tool-search", "toolCallId": call_id, "toolName": "search", "state": state} | (
        dict(extra)
    )


# --- text -------------------------------------------------------------------------------------


def test_text_block_lifecycle() -> None:
    parts = build(
        {"type": "text-start", "id": "t1", "providerMetadata": {"x": {"y": 1}}},
        {"type": "text-delta", "id": "t1", "delta": "Hello, "},
        {"type": "text-delta", "id": "t1", "delta": "world"},
        {"type": "text-end", "id": "t1"},
    )
    assert parts == [{"type": "text", "text": "Hello, world", "state": "done"}]


def test_text_start_always_pushes_a_new_part() -> None:
    parts = build({"type": "text-start", "id": "a"}, {"type": "text-start", "id": "a"})
    assert parts == [{"type": "text", "text": "", "state": "streaming"}] * 2


def test_text_delta_without_start_creates_streaming_part() -> None:
    parts = build({"type": "text-delta", "id": "t1", "delta": "resumed"})
    assert parts == [{"type": "text", "text": "resumed", "state": "streaming"}]


def test_text_delta_without_blocks_goes_to_last_text_part_of_any_state() -> None:
    parts = build(
        {"type": "text-start", "id": "a"},
        {"type": "text-end", "id": "a"},
        {"type": "step-start"},
        {"type": "text-delta", "id": "b", "delta": "more"},
    )
    assert parts[0] == {"type": "text", "text": "more", "state": "done"}
    assert len(parts) == 2


def test_text_delta_with_missing_delta_appends_nothing() -> None:
    parts = build({"type": "text-start", "id": "a"}, {"type": "text-delta", "id": "a"})
    assert parts == [{"type": "text", "text": "", "state": "streaming"}]


def test_interleaved_text_blocks_without_index_follow_last_part() -> None:
    parts = build(
        {"type": "text-start", "id": "a"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "a", "delta": "A"},
        {"type": "text-delta", "id": "b", "delta": "B"},
    )
    assert [p["text"] for p in parts] == ["", "AB"]


def test_interleaved_text_blocks_with_index_follow_their_ids() -> None:
    blocks = OpenBlocks()
    parts = build(
        {"type": "text-start", "id": "a"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "a", "delta": "A"},
        {"type": "text-delta", "id": "b", "delta": "B"},
        {"type": "text-end", "id": "a"},
        {"type": "text-delta", "id": "b", "delta": "b"},
        blocks=blocks,
    )
    assert parts == [
        {"type": "text", "text": "A", "state": "done"},
        {"type": "text", "text": "Bb", "state": "streaming"},
    ]
    # Nothing about the ids leaks into the parts.
    assert all(set(p) == {"type", "text", "state"} for p in parts)


def test_index_unknown_id_falls_back_to_last_text_part() -> None:
    blocks = OpenBlocks()
    parts = build(
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "zzz", "delta": "x"},
        blocks=blocks,
    )
    assert parts == [{"type": "text", "text": "x", "state": "streaming"}]


def test_index_fallback_part_is_bound_to_its_id() -> None:
    blocks = OpenBlocks()
    parts = build(
        {"type": "text-delta", "id": "a", "delta": "1"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "a", "delta": "2"},
        blocks=blocks,
    )
    assert [p["text"] for p in parts] == ["12", ""]


def test_index_ignores_parts_removed_from_the_list() -> None:
    blocks = OpenBlocks()
    parts = build({"type": "text-start", "id": "a"}, blocks=blocks)
    parts.clear()
    apply_chunk_to_parts(parts, {"type": "text-delta", "id": "a", "delta": "x"}, blocks)
    assert parts == [{"type": "text", "text": "x", "state": "streaming"}]


def test_released_id_can_start_a_new_block() -> None:
    blocks = OpenBlocks()
    parts = build(
        {"type": "text-start", "id": "0"},
        {"type": "text-delta", "id": "0", "delta": "one"},
        {"type": "text-end", "id": "0"},
        {"type": "text-start", "id": "0"},
        {"type": "text-delta", "id": "0", "delta": "two"},
        blocks=blocks,
    )
    assert [p["text"] for p in parts] == ["one", "two"]


def test_text_end_without_parts_is_noop() -> None:
    parts: list[UIPart] = []
    assert apply_chunk_to_parts(parts, {"type": "text-end", "id": "a"}) is True
    assert parts == []


def test_text_end_leaves_stateless_text_part_alone() -> None:
    parts: list[UIPart] = [{"type": "text", "text": "loaded"}]
    apply_chunk_to_parts(parts, {"type": "text-end", "id": "a"})
    assert parts == [{"type": "text", "text": "loaded"}]


# --- reasoning --------------------------------------------------------------------------------


def test_reasoning_block_merges_provider_metadata() -> None:
    parts = build(
        {"type": "reasoning-start", "id": "r"},
        {"type": "reasoning-delta", "id": "r", "delta": "think", "providerMetadata": {"a": 1}},
        {"type": "reasoning-end", "id": "r", "providerMetadata": {"anthropic": {"sig": "s"}}},
    )
    assert parts == [
        {
            "type": "reasoning",
            "text": "think",
            "state": "done",
            "providerMetadata": {"a": 1, "anthropic": {"sig": "s"}},
        }
    ]


def test_reasoning_start_keeps_provider_metadata() -> None:
    parts = build({"type": "reasoning-start", "id": "r", "providerMetadata": {"p": {"r": "x"}}})
    assert parts == [
        {
            "type": "reasoning",
            "text": "",
            "state": "streaming",
            "providerMetadata": {"p": {"r": "x"}},
        }
    ]


def test_reasoning_delta_without_start_creates_part_with_metadata() -> None:
    parts = build(
        {"type": "reasoning-delta", "id": "r", "delta": "x", "providerMetadata": {"m": 1}}
    )
    assert parts == [
        {"type": "reasoning", "text": "x", "state": "streaming", "providerMetadata": {"m": 1}}
    ]


def test_reasoning_delta_fallback_without_metadata_has_no_key() -> None:
    parts = build({"type": "reasoning-delta", "id": "r", "delta": "x"})
    assert parts == [{"type": "reasoning", "text": "x", "state": "streaming"}]


def test_reasoning_and_text_do_not_mix() -> None:
    parts = build(
        {"type": "reasoning-start", "id": "r"},
        {"type": "text-start", "id": "t"},
        {"type": "reasoning-delta", "id": "r", "delta": "R"},
        {"type": "text-delta", "id": "t", "delta": "T"},
    )
    assert [(p["type"], p["text"]) for p in parts] == [("reasoning", "R"), ("text", "T")]


# --- files and sources ------------------------------------------------------------------------


def test_file_part_keeps_media_type_and_url_only() -> None:
    parts = build(
        {"type": "file", "url": "https://x/f.png", "mediaType": "image/png", "providerMetadata": {}}
    )
    assert parts == [{"type": "file", "mediaType": "image/png", "url": "https://x/f.png"}]


def test_source_url_part() -> None:
    chunk = {
        "type": "source-url",
        "sourceId": "s1",
        "url": "https://e.com",
        "title": "E",
        "providerMetadata": {"p": {}},
    }
    assert build(chunk) == [chunk]


def test_source_url_omits_absent_optional_fields() -> None:
    assert build({"type": "source-url", "sourceId": "s1", "url": "u"}) == [
        {"type": "source-url", "sourceId": "s1", "url": "u"}
    ]


def test_source_document_part() -> None:
    chunk = {
        "type": "source-document",
        "sourceId": "d1",
        "mediaType": "application/pdf",
        "title": "Doc",
        "filename": "d.pdf",
    }
    assert build(chunk) == [chunk]


# --- tools ------------------------------------------------------------------------------------


def test_tool_input_start_creates_streaming_part_without_input() -> None:
    parts = build(
        {
            "type": "tool-input-start",
            "toolCallId": "c1",
            "toolName": "search",
            "providerExecuted": True,
            "providerMetadata": {"p": 1},
            "title": "Search",
            "dynamic": True,
        }
    )
    assert parts == [
        {
            "type": "tool-search",
            "toolCallId": "c1",
            "toolName": "search",
            "state": "input-streaming",
            "providerExecuted": True,
            "callProviderMetadata": {"p": 1},
            "title": "Search",
        }
    ]


def test_tool_input_start_for_known_call_is_noop() -> None:
    parts = [tool_part("output-available", output=1)]
    chunk = {"type": "tool-input-start", "toolCallId": "c1", "toolName": "search"}
    assert apply_chunk_to_parts(parts, chunk) is True
    assert parts == [tool_part("output-available", output=1)]


def test_tool_input_delta_only_while_streaming() -> None:
    parts = [tool_part("input-streaming")]
    apply_chunk_to_parts(
        parts, {"type": "tool-input-delta", "toolCallId": "c1", "input": {"q": "pa"}}
    )
    assert parts[0]["input"] == {"q": "pa"}
    apply_chunk_to_parts(
        parts, {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "x"}
    )
    assert "input" not in parts[0]

    done = [tool_part("input-available", input={"q": "full"})]
    apply_chunk_to_parts(done, {"type": "tool-input-delta", "toolCallId": "c1", "input": {}})
    assert done[0]["input"] == {"q": "full"}


def test_tool_input_available_advances_streaming_part() -> None:
    parts = [tool_part("input-streaming")]
    apply_chunk_to_parts(
        parts,
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "search",
            "input": '{"q": "cats"}',
            "providerExecuted": False,
            "providerMetadata": {"m": 1},
            "title": "T",
        },
    )
    assert parts == [
        tool_part(
            "input-available",
            input={"q": "cats"},
            providerExecuted=False,
            callProviderMetadata={"m": 1},
            title="T",
        )
    ]


@pytest.mark.parametrize(
    "state", ["input-available", "approval-requested", "approval-responded", "output-available"]
)
def test_tool_input_available_never_regresses(state: str) -> None:
    parts = [tool_part(state, input={"q": "orig"})]
    apply_chunk_to_parts(
        parts,
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "search", "input": {}},
    )
    assert parts == [tool_part(state, input={"q": "orig"})]


def test_tool_input_available_without_part_creates_one() -> None:
    parts = build(
        {"type": "tool-input-available", "toolCallId": "c9", "toolName": "calc", "input": None}
    )
    assert parts == [
        {
            "type": "tool-calc",
            "toolCallId": "c9",
            "toolName": "calc",
            "state": "input-available",
            "input": {},
        }
    ]


def test_tool_input_error_on_open_part() -> None:
    parts = [tool_part("input-streaming")]
    apply_chunk_to_parts(
        parts,
        {
            "type": "tool-input-error",
            "toolCallId": "c1",
            "toolName": "search",
            "input": "not json",
            "errorText": "bad input",
            "providerExecuted": True,
        },
    )
    assert parts == [
        tool_part("output-error", errorText="bad input", input={}, providerExecuted=True)
    ]


@pytest.mark.parametrize("state", ["output-available", "output-error", "output-denied"])
def test_tool_input_error_keeps_terminal_part(state: str) -> None:
    parts = [tool_part(state)]
    apply_chunk_to_parts(
        parts, {"type": "tool-input-error", "toolCallId": "c1", "errorText": "late"}
    )
    assert parts == [tool_part(state)]


def test_tool_input_error_without_part_creates_error_part() -> None:
    parts = build(
        {
            "type": "tool-input-error",
            "toolCallId": "c2",
            "toolName": "calc",
            "input": [1],
            "errorText": "nope",
        }
    )
    assert parts == [
        {
            "type": "tool-calc",
            "toolCallId": "c2",
            "toolName": "calc",
            "state": "output-error",
            "input": {},
            "errorText": "nope",
        }
    ]


def test_tool_approval_request_sets_approval() -> None:
    parts = [tool_part("input-available", input={})]
    apply_chunk_to_parts(
        parts,
        {
            "type": "tool-approval-request",
            "toolCallId": "c1",
            "approvalId": "ap1",
            "signature": "sig",
            "isAutomatic": True,
            "approvalDescriptor": {"why": "x"},
        },
    )
    assert parts[0]["state"] == "approval-requested"
    assert parts[0]["approval"] == {
        "id": "ap1",
        "descriptor": {"why": "x"},
        "isAutomatic": True,
        "signature": "sig",
    }


def test_tool_approval_request_minimal_approval() -> None:
    parts = [tool_part("input-available", input={})]
    apply_chunk_to_parts(
        parts, {"type": "tool-approval-request", "toolCallId": "c1", "approvalId": "ap1"}
    )
    assert parts[0]["approval"] == {"id": "ap1"}


@pytest.mark.parametrize(
    "state", ["approval-responded", "output-available", "output-error", "output-denied"]
)
def test_tool_approval_request_guard(state: str) -> None:
    parts = [tool_part(state, approval={"id": "ap0", "approved": True})]
    apply_chunk_to_parts(
        parts, {"type": "tool-approval-request", "toolCallId": "c1", "approvalId": "ap1"}
    )
    assert parts == [tool_part(state, approval={"id": "ap0", "approved": True})]


def test_tool_approval_request_for_unknown_call_is_noop() -> None:
    parts: list[UIPart] = []
    chunk = {"type": "tool-approval-request", "toolCallId": "c1", "approvalId": "a"}
    assert apply_chunk_to_parts(parts, chunk) is True
    assert parts == []


@pytest.mark.parametrize("state", ["input-available", "approval-requested"])
def test_tool_output_denied_applies(state: str) -> None:
    parts = [tool_part(state)]
    apply_chunk_to_parts(parts, {"type": "tool-output-denied", "toolCallId": "c1"})
    assert parts[0]["state"] == "output-denied"


@pytest.mark.parametrize(
    "state", ["approval-responded", "output-available", "output-error", "output-denied"]
)
def test_tool_output_denied_guard(state: str) -> None:
    parts = [tool_part(state)]
    apply_chunk_to_parts(parts, {"type": "tool-output-denied", "toolCallId": "c1"})
    assert parts[0]["state"] == state


def test_tool_output_available_sets_output_and_preliminary() -> None:
    parts = [tool_part("input-available", input={})]
    apply_chunk_to_parts(
        parts,
        {"type": "tool-output-available", "toolCallId": "c1", "output": [1], "preliminary": True},
    )
    assert parts == [tool_part("output-available", input={}, output=[1], preliminary=True)]
    apply_chunk_to_parts(parts, {"type": "tool-output-available", "toolCallId": "c1", "output": 2})
    # No first-write-wins here: a later output replaces a preliminary one, and the final
    # result is no longer preliminary (as the AI SDK client shows it).
    assert parts[0]["output"] == 2
    assert "preliminary" not in parts[0]


def test_tool_output_available_without_part_is_handled_noop() -> None:
    parts: list[UIPart] = [{"type": "text", "text": "x"}]
    chunk = {"type": "tool-output-available", "toolCallId": "elsewhere", "output": 1}
    assert apply_chunk_to_parts(parts, chunk) is True
    assert parts == [{"type": "text", "text": "x"}]


def test_tool_output_error_sets_error() -> None:
    parts = [tool_part("input-available", input={})]
    apply_chunk_to_parts(parts, {"type": "tool-output-error", "toolCallId": "c1", "errorText": "e"})
    assert parts == [tool_part("output-error", input={}, errorText="e")]


def test_tool_chunks_match_dynamic_tool_parts_by_call_id() -> None:
    parts: list[UIPart] = [
        {"type": "dynamic-tool", "toolName": "x", "toolCallId": "d1", "state": "input-available"}
    ]
    apply_chunk_to_parts(parts, {"type": "tool-output-available", "toolCallId": "d1", "output": 1})
    assert parts[0]["state"] == "output-available"


def test_find_tool_part_ignores_empty_ids() -> None:
    parts = [tool_part("input-available", call_id="")]
    assert find_tool_part(parts, "") is None
    assert find_tool_part(parts, None) is None


# --- steps and data ---------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_type", ["start-step", "step-start"])
def test_step_start(chunk_type: str) -> None:
    assert build({"type": chunk_type}) == [{"type": "step-start"}]


def test_reset_step_drops_parts_of_current_step() -> None:
    blocks = OpenBlocks()
    parts = build(
        {"type": "start-step"},
        {"type": "text-start", "id": "a"},
        {"type": "text-delta", "id": "a", "delta": "kept"},
        {"type": "text-end", "id": "a"},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "b", "delta": "withdrawn"},
        {"type": "reset-step"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "b", "delta": "fresh"},
        {"type": "text-end", "id": "b"},
        blocks=blocks,
    )
    assert parts == [
        {"type": "step-start"},
        {"type": "text", "text": "kept", "state": "done"},
        {"type": "step-start"},
        {"type": "text", "text": "fresh", "state": "done"},
    ]


def test_reset_step_removes_only_after_last_step_start() -> None:
    parts = build(
        {"type": "start-step"},
        {"type": "text-delta", "id": "a", "delta": "kept"},
        {"type": "start-step"},
        {"type": "data-x", "data": 1},
        {"type": "tool-input-available", "toolCallId": "c", "toolName": "t", "input": {}},
    )
    assert apply_chunk_to_parts(parts, {"type": "reset-step"}) is True
    assert parts == [
        {"type": "step-start"},
        {"type": "text", "text": "kept", "state": "streaming"},
        {"type": "step-start"},
    ]


def test_reset_step_without_step_start_clears_everything() -> None:
    parts = build({"type": "text-delta", "id": "a", "delta": "x"})
    apply_chunk_to_parts(parts, {"type": "reset-step"})
    assert parts == []


def test_reset_step_forgets_open_blocks() -> None:
    blocks = OpenBlocks()
    parts = build(
        {"type": "start-step"},
        {"type": "text-start", "id": "a"},
        {"type": "reset-step"},
        {"type": "text-start", "id": "b"},
        {"type": "text-delta", "id": "a", "delta": "x"},
        blocks=blocks,
    )
    assert parts == [{"type": "step-start"}, {"type": "text", "text": "x", "state": "streaming"}]


def test_data_part_appended() -> None:
    assert build({"type": "data-weather", "id": "w", "data": {"t": 20}}) == [
        {"type": "data-weather", "id": "w", "data": {"t": 20}}
    ]
    assert build({"type": "data-weather", "data": 1}) == [{"type": "data-weather", "data": 1}]


def test_transient_data_part_not_added() -> None:
    parts: list[UIPart] = []
    chunk = {"type": "data-progress", "id": "p", "data": 1, "transient": True}
    assert apply_chunk_to_parts(parts, chunk) is True
    assert parts == []


def test_data_part_same_type_and_id_replaced_in_place() -> None:
    parts = build(
        {"type": "data-status", "id": "s", "data": "loading"},
        {"type": "text-delta", "id": "t", "delta": "x"},
        {"type": "data-status", "id": "s", "data": "done"},
    )
    assert parts == [
        {"type": "data-status", "id": "s", "data": "done"},
        {"type": "text", "text": "x", "state": "streaming"},
    ]


def test_data_parts_with_other_type_or_id_are_separate() -> None:
    parts = build(
        {"type": "data-status", "id": "s", "data": 1},
        {"type": "data-status", "id": "t", "data": 2},
        {"type": "data-other", "id": "s", "data": 3},
        {"type": "data-status", "data": 4},
        {"type": "data-status", "data": 5},
    )
    assert [p["data"] for p in parts] == [1, 2, 3, 4, 5]


# --- non-part chunks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "chunk",
    [
        {"type": "start", "messageId": "m"},
        {"type": "finish", "finishReason": "stop"},
        {"type": "finish-step"},
        {"type": "message-metadata", "messageMetadata": {"a": 1}},
        {"type": "error", "errorText": "boom"},
        {"type": "abort"},
        {"type": "custom", "kind": "x.y"},
        {"type": "reasoning-file", "url": "u", "mediaType": "image/png"},
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},
        {"type": "something-new"},
        {"no": "type"},
    ],
)
def test_non_part_chunks_return_false_and_change_nothing(chunk: UIChunk) -> None:
    parts: list[UIPart] = [tool_part("approval-requested", approval={"id": "a"})]
    assert apply_chunk_to_parts(parts, chunk) is False
    assert parts == [tool_part("approval-requested", approval={"id": "a"})]


# --- replay detection -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunk_type", "state", "expected"),
    [
        ("tool-input-start", "input-streaming", True),
        ("tool-input-start", "output-available", True),
        ("tool-input-delta", "input-streaming", False),
        ("tool-input-delta", "input-available", True),
        ("tool-input-available", "input-streaming", False),
        ("tool-input-available", "input-available", True),
        ("tool-input-available", "output-error", True),
        ("tool-output-denied", "approval-requested", False),
        ("tool-output-denied", "approval-responded", True),
        ("tool-output-denied", "output-denied", True),
        ("tool-approval-request", "input-available", False),
        ("tool-approval-request", "approval-requested", False),
        ("tool-approval-request", "approval-responded", True),
        ("tool-approval-request", "output-available", True),
        ("tool-output-available", "output-available", False),
        ("tool-output-error", "output-available", False),
    ],
)
def test_is_replay_chunk(chunk_type: str, state: str, expected: bool) -> None:
    parts = [tool_part(state)]
    assert is_replay_chunk(parts, {"type": chunk_type, "toolCallId": "c1"}) is expected


def test_is_replay_chunk_unknown_or_missing_call() -> None:
    parts = [tool_part("output-available")]
    assert is_replay_chunk(parts, {"type": "tool-input-start", "toolCallId": "other"}) is False
    assert is_replay_chunk(parts, {"type": "tool-input-start"}) is False
    assert is_replay_chunk(parts, {"type": "text-delta", "toolCallId": "c1"}) is False


# --- normalize_tool_input ---------------------------------------------------------------------


def test_normalize_tool_input_keeps_dict_identity() -> None:
    raw = {"a": 1}
    assert normalize_tool_input(raw) is raw


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('  {"a": [1]}', {"a": [1]}),
        ("{broken", {}),
        ("[1, 2]", {}),
        ('"text"', {}),
        ("", {}),
        (None, {}),
        ([{"a": 1}], {}),
        (3, {}),
        (True, {}),
    ],
)
def test_normalize_tool_input(raw: object, expected: dict[str, object]) -> None:
    assert normalize_tool_input(raw) == expected


def test_full_stream_builds_expected_message_parts() -> None:
    chunks: list[UIChunk] = [
        {"type": "start", "messageId": "m"},
        {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "weather"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"city"'},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "weather",
            "input": {"city": "Paris"},
        },
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"temp": 20}},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "20C"},
        {"type": "text-end", "id": "t"},
        {"type": "finish-step"},
        {"type": "finish", "finishReason": "stop"},
    ]
    parts = build(*chunks, blocks=OpenBlocks())
    assert json.loads(json.dumps(parts)) == [
        {"type": "step-start"},
        {
            "type": "tool-weather",
            "toolCallId": "c1",
            "toolName": "weather",
            "state": "output-available",
            "input": {"city": "Paris"},
            "output": {"temp": 20},
        },
        {"type": "step-start"},
        {"type": "text", "text": "20C", "state": "done"},
    ]
