"""Tests for durachat.messages.accumulator
(docs/protocol.md#what-the-server-does-to-a-replys-chunks)."""

from __future__ import annotations

import re

from durachat.messages import StreamAccumulator
from durachat.messages.accumulator import DEFAULT_ERROR_TEXT, chunk_error_text, merged_metadata
from durachat.types import UIChunk, UIMessage


def user(message_id: str, text: str = "hi") -> UIMessage:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def assistant(message_id: str, text: str = "ok", **extra: object) -> UIMessage:
    return {
        "id": message_id,
        "role": "assistant",
        "parts": [{"type": "text", "text": text, "state": "done"}],
    } | dict(extra)


def test_start_adopts_message_id_and_merges_metadata() -> None:
    acc = StreamAccumulator("local")
    acc.apply({"type": "start", "messageId": "srv", "messageMetadata": {"model": "m"}})
    assert acc.message_id == "srv"
    assert acc.metadata == {"model": "m"}


def test_start_without_message_id_keeps_id() -> None:
    acc = StreamAccumulator("local")
    acc.apply({"type": "start"})
    assert acc.message_id == "local"
    assert acc.metadata is None


def test_continuation_start_keeps_id() -> None:
    acc = StreamAccumulator("a1", continuation=True)
    acc.apply({"type": "start", "messageId": "other"})
    assert acc.message_id == "a1"


def test_finish_and_message_metadata_merge() -> None:
    acc = StreamAccumulator("a")
    acc.apply({"type": "start", "messageMetadata": {"a": 1, "b": 1}})
    acc.apply({"type": "message-metadata", "messageMetadata": {"b": 2}})
    acc.apply({"type": "finish", "finishReason": "stop", "messageMetadata": {"c": 3}})
    acc.apply({"type": "finish", "messageMetadata": "not an object"})
    assert acc.metadata == {"a": 1, "b": 2, "c": 3}


def test_finish_step_and_unknown_chunks_change_nothing() -> None:
    acc = StreamAccumulator("a")
    acc.apply({"type": "finish-step"})
    acc.apply({"type": "custom", "kind": "x.y"})
    acc.apply({"type": "abort"})
    assert acc.to_message() == {"id": "a", "role": "assistant", "parts": []}


def test_error_records_text() -> None:
    acc = StreamAccumulator("a")
    before = acc.error_text
    acc.apply({"type": "error", "errorText": "boom"})
    assert before is None
    assert acc.error_text == "boom"
    acc.apply({"type": "error"})
    assert acc.error_text == DEFAULT_ERROR_TEXT


def test_builds_parts_with_block_ids() -> None:
    acc = StreamAccumulator("a")
    chunks: list[UIChunk] = [
        {"type": "start-step"},
        {"type": "text-start", "id": "x"},
        {"type": "text-start", "id": "y"},
        {"type": "text-delta", "id": "x", "delta": "X"},
        {"type": "text-delta", "id": "y", "delta": "Y"},
        {"type": "data-note", "data": 1, "transient": True},
    ]
    for chunk in chunks:
        acc.apply(chunk)
    assert acc.parts == [
        {"type": "step-start"},
        {"type": "text", "text": "X", "state": "streaming"},
        {"type": "text", "text": "Y", "state": "streaming"},
    ]


def test_to_message_is_a_snapshot() -> None:
    acc = StreamAccumulator("a")
    acc.apply({"type": "text-delta", "id": "t", "delta": "one"})
    acc.apply({"type": "message-metadata", "messageMetadata": {"k": [1]}})
    snapshot = acc.to_message()
    acc.apply({"type": "text-delta", "id": "t", "delta": "two"})
    acc.apply({"type": "message-metadata", "messageMetadata": {"k": [2]}})
    assert snapshot == {
        "id": "a",
        "role": "assistant",
        "parts": [{"type": "text", "text": "one", "state": "streaming"}],
        "metadata": {"k": [1]},
    }


def test_default_id_is_fresh_assistant_id() -> None:
    assert re.fullmatch(r"assistant_\d+_[0-9a-z]{9}", StreamAccumulator().message_id)


def test_seed_parts_and_metadata_are_copied() -> None:
    seed = assistant("a1", "before", metadata={"m": {"n": 1}})
    seed["parts"][0]["state"] = "streaming"
    acc = StreamAccumulator(continuation=True, seed=seed)
    assert acc.message_id == "a1"
    assert acc.continuation is True
    acc.apply({"type": "text-delta", "id": "t", "delta": " after"})
    acc.apply({"type": "message-metadata", "messageMetadata": {"x": 1}})
    assert acc.to_message() == {
        "id": "a1",
        "role": "assistant",
        "parts": [{"type": "text", "text": "before after", "state": "streaming"}],
        "metadata": {"m": {"n": 1}, "x": 1},
    }
    # The seed itself is untouched.
    assert seed["parts"][0]["text"] == "before"
    assert seed["metadata"] == {"m": {"n": 1}}


def test_explicit_id_wins_over_seed_id() -> None:
    acc = StreamAccumulator("mine", seed=assistant("seeded"))
    assert acc.message_id == "mine"


def test_seed_tool_part_updated_by_continuation() -> None:
    seed: UIMessage = {
        "id": "a1",
        "role": "assistant",
        "parts": [
            {"type": "tool-t", "toolCallId": "c", "toolName": "t", "state": "approval-responded"}
        ],
    }
    acc = StreamAccumulator(continuation=True, seed=seed)
    acc.apply({"type": "tool-output-available", "toolCallId": "c", "output": "ok"})
    assert acc.parts[0]["state"] == "output-available"
    assert seed["parts"][0]["state"] == "approval-responded"


def test_merge_into_replaces_by_id() -> None:
    messages = [user("u1"), assistant("a1", "old"), user("u2")]
    acc = StreamAccumulator("a1")
    acc.apply({"type": "text-delta", "id": "t", "delta": "new"})
    merged = acc.merge_into(messages)
    assert merged is not messages
    assert [m["id"] for m in merged] == ["u1", "a1", "u2"]
    assert merged[1]["parts"] == [{"type": "text", "text": "new", "state": "streaming"}]
    assert messages[1]["parts"][0]["text"] == "old"


def test_merge_into_appends_new_message() -> None:
    messages = [user("u1"), assistant("a1")]
    acc = StreamAccumulator("a2")
    merged = acc.merge_into(messages)
    assert [m["id"] for m in merged] == ["u1", "a1", "a2"]
    assert len(messages) == 2


def test_merge_into_continuation_falls_back_to_last_assistant() -> None:
    messages = [user("u1"), assistant("a1"), user("u2"), assistant("a2"), user("u3")]
    acc = StreamAccumulator("unknown", continuation=True)
    acc.apply({"type": "text-delta", "id": "t", "delta": "more"})
    merged = acc.merge_into(messages)
    assert [m["id"] for m in merged] == ["u1", "a1", "u2", "a2", "u3"]
    assert merged[3]["parts"] == [{"type": "text", "text": "more", "state": "streaming"}]


def test_merge_into_continuation_prefers_id_match() -> None:
    messages = [assistant("a1"), assistant("a2")]
    acc = StreamAccumulator("a1", continuation=True)
    acc.apply({"type": "text-delta", "id": "t", "delta": "x"})
    merged = acc.merge_into(messages)
    assert merged[0]["parts"][0]["text"] == "x"
    assert merged[1] == assistant("a2")


def test_merge_into_continuation_without_assistant_appends() -> None:
    acc = StreamAccumulator("a9", continuation=True)
    merged = acc.merge_into([user("u1")])
    assert [m["id"] for m in merged] == ["u1", "a9"]


def test_merged_metadata_helper() -> None:
    current = {"a": 1}
    assert merged_metadata(current, None) is current
    assert merged_metadata(None, None) is None
    assert merged_metadata(None, {"b": 2}) == {"b": 2}
    result = merged_metadata(current, {"a": 2})
    assert result == {"a": 2}
    assert current == {"a": 1}


def test_chunk_error_text_helper() -> None:
    assert chunk_error_text({"type": "error", "errorText": "x"}) == "x"
    assert chunk_error_text({"type": "error", "errorText": 5}) == DEFAULT_ERROR_TEXT
