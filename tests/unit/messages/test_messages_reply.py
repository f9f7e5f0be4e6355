"""Tests for durachat.messages.reply
(docs/protocol.md#what-the-server-does-to-a-replys-chunks)."""

from __future__ import annotations

import copy

import pytest

from durachat.messages import ReplyAssembler
from durachat.types import UIChunk, UIMessage, UIPart


def new_turn(message_id: str = "assistant_1_abcdefghi") -> ReplyAssembler:
    return ReplyAssembler({"id": message_id, "role": "assistant", "parts": []}, continuation=False)


def continuation(parts: list[UIPart], message_id: str = "a1") -> ReplyAssembler:
    message: UIMessage = {"id": message_id, "role": "assistant", "parts": copy.deepcopy(parts)}
    return ReplyAssembler(message, continuation=True)


def run(assembler: ReplyAssembler, *chunks: UIChunk) -> list[UIChunk]:
    sent = []
    for chunk in chunks:
        out = assembler.process(chunk)
        if out is not None:
            sent.append(out)
    return sent


# --- start ------------------------------------------------------------------------------------


def test_new_turn_start_gets_server_id_stamped() -> None:
    assembler = new_turn("assistant_1_x")
    chunk = {"type": "start", "messageMetadata": {"m": 1}}
    out = assembler.process(chunk)
    assert out == {"type": "start", "messageMetadata": {"m": 1}, "messageId": "assistant_1_x"}
    assert chunk == {"type": "start", "messageMetadata": {"m": 1}}  # input untouched
    assert assembler.message["metadata"] == {"m": 1}
    assert assembler.message["id"] == "assistant_1_x"


@pytest.mark.parametrize("bad_id", [None, "", 42])
def test_new_turn_start_with_unusable_id_gets_server_id(bad_id: object) -> None:
    assembler = new_turn("srv")
    out = assembler.process({"type": "start", "messageId": bad_id})
    assert out == {"type": "start", "messageId": "srv"}
    assert assembler.message["id"] == "srv"


def test_new_turn_start_adopts_provider_message_id() -> None:
    assembler = new_turn("srv")
    chunk = {"type": "start", "messageId": "provider-id"}
    assert assembler.process(chunk) is chunk
    assert assembler.message["id"] == "provider-id"


def test_continuation_start_has_message_id_removed() -> None:
    assembler = continuation([], "a1")
    out = assembler.process({"type": "start", "messageId": "x", "messageMetadata": {"k": 1}})
    assert out == {"type": "start", "messageMetadata": {"k": 1}}
    assert assembler.message["id"] == "a1"
    assert assembler.message["metadata"] == {"k": 1}


def test_continuation_start_without_message_id_is_unchanged() -> None:
    assembler = continuation([])
    chunk = {"type": "start"}
    assert assembler.process(chunk) is chunk


# --- finish and metadata ----------------------------------------------------------------------


def test_finish_with_reason_is_rewritten_keeping_metadata() -> None:
    assembler = new_turn()
    out = assembler.process(
        {"type": "finish", "finishReason": "stop", "messageMetadata": {"usage": 3}}
    )
    assert out == {"type": "finish", "messageMetadata": {"usage": 3, "finishReason": "stop"}}
    # The server copy merges the chunk's own metadata, as the reference does.
    assert assembler.message["metadata"] == {"usage": 3}


def test_finish_with_reason_and_no_metadata() -> None:
    out = new_turn().process({"type": "finish", "finishReason": "tool-calls"})
    assert out == {"type": "finish", "messageMetadata": {"finishReason": "tool-calls"}}


def test_finish_without_reason_is_unchanged() -> None:
    assembler = new_turn()
    chunk = {"type": "finish", "messageMetadata": {"a": 1}}
    assert assembler.process(chunk) is chunk
    assert assembler.message["metadata"] == {"a": 1}


def test_message_metadata_merges_into_existing() -> None:
    message: UIMessage = {"id": "a1", "role": "assistant", "parts": [], "metadata": {"x": 1}}
    assembler = ReplyAssembler(message, continuation=True)
    chunk = {"type": "message-metadata", "messageMetadata": {"y": 2}}
    assert assembler.process(chunk) is chunk
    assert message["metadata"] == {"x": 1, "y": 2}


def test_message_without_parts_key_gets_one() -> None:
    assembler = ReplyAssembler({"id": "a", "role": "assistant"}, continuation=False)
    assembler.process({"type": "text-delta", "id": "t", "delta": "x"})
    assert assembler.message["parts"] == [{"type": "text", "text": "x", "state": "streaming"}]


# --- parts ------------------------------------------------------------------------------------


def test_new_turn_builds_server_copy_and_forwards_chunks() -> None:
    assembler = new_turn("srv")
    chunks = [
        {"type": "start"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Hi"},
        {"type": "text-end", "id": "t"},
        {"type": "finish-step"},
    ]
    sent = run(assembler, *chunks)
    assert sent[1:] == chunks[1:]
    assert assembler.has_parts
    assert assembler.message == {
        "id": "srv",
        "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "Hi", "state": "done"}],
    }


def test_has_parts_false_initially() -> None:
    assembler = new_turn()
    assembler.process({"type": "start"})
    assert assembler.has_parts is False


def test_transient_data_is_sent_but_not_stored() -> None:
    assembler = new_turn()
    chunk = {"type": "data-progress", "data": 50, "transient": True}
    assert assembler.process(chunk) is chunk
    assert assembler.message["parts"] == []


@pytest.mark.parametrize(
    "chunk",
    [
        {"type": "custom", "kind": "x.y"},
        {"type": "reasoning-file", "url": "u", "mediaType": "image/png"},
        {"type": "tool-approval-response", "approvalId": "a", "approved": True},
        {"type": "abort"},
        {"type": "brand-new-type", "x": 1},
    ],
)
def test_unknown_chunks_are_sent_unchanged_and_not_reflected(chunk: UIChunk) -> None:
    assembler = new_turn()
    assert assembler.process(chunk) is chunk
    assert assembler.message == {"id": "assistant_1_abcdefghi", "role": "assistant", "parts": []}


def test_reset_step_is_sent_and_applied() -> None:
    assembler = new_turn()
    sent = run(
        assembler,
        {"type": "start-step"},
        {"type": "text-delta", "id": "t", "delta": "draft"},
        {"type": "reset-step"},
    )
    assert sent[-1] == {"type": "reset-step"}
    assert assembler.message["parts"] == [{"type": "step-start"}]


# --- replay -----------------------------------------------------------------------------------


def test_replayed_tool_chunks_are_dropped() -> None:
    settled: UIPart = {
        "type": "tool-search",
        "toolCallId": "c1",
        "toolName": "search",
        "state": "output-available",
        "input": {"q": 1},
        "output": "result",
    }
    assembler = continuation([settled])
    sent = run(
        assembler,
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "search"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "search", "input": {}},
        {"type": "tool-approval-request", "toolCallId": "c1", "approvalId": "a"},
        {"type": "tool-output-denied", "toolCallId": "c1"},
    )
    assert sent == []
    assert assembler.message["parts"] == [settled]
    assert assembler.approval_requested is False


def test_replayed_output_is_forwarded() -> None:
    part: UIPart = {
        "type": "tool-t",
        "toolCallId": "c1",
        "toolName": "t",
        "state": "output-available",
    }
    assembler = continuation([part | {"output": 1}])
    chunk = {"type": "tool-output-available", "toolCallId": "c1", "output": 1}
    assert assembler.process(chunk) is chunk


# --- approval ---------------------------------------------------------------------------------


def test_approval_flag_set_when_approval_applied() -> None:
    assembler = new_turn()
    run(
        assembler,
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "pay", "input": {}},
    )
    before = assembler.approval_requested
    chunk = {"type": "tool-approval-request", "toolCallId": "c1", "approvalId": "ap"}
    assert assembler.process(chunk) is chunk
    assert before is False
    assert assembler.approval_requested is True
    assert assembler.message["parts"][0]["state"] == "approval-requested"
    assert assembler.message["parts"][0]["approval"] == {"id": "ap"}


def test_approval_for_unknown_call_does_not_set_flag() -> None:
    assembler = new_turn()
    assembler.process({"type": "tool-approval-request", "toolCallId": "zz", "approvalId": "a"})
    assert assembler.approval_requested is False


# --- error ------------------------------------------------------------------------------------


def test_error_chunk_is_dropped_and_recorded() -> None:
    assembler = new_turn()
    run(assembler, {"type": "text-delta", "id": "t", "delta": "partial"})
    before = assembler.error_text
    assert assembler.process({"type": "error", "errorText": "rate limited"}) is None
    assert before is None
    assert assembler.error_text == "rate limited"
    # The turn is over: later chunks are neither sent nor applied.
    assert assembler.process({"type": "text-delta", "id": "t", "delta": "more"}) is None
    assert assembler.process({"type": "finish"}) is None
    assert assembler.message["parts"] == [{"type": "text", "text": "partial", "state": "streaming"}]


def test_error_chunk_without_text() -> None:
    assembler = new_turn()
    assert assembler.process({"type": "error"}) is None
    assert assembler.error_text == "An error occurred."


# --- continuation merge rules -----------------------------------------------------------------


def test_continuation_first_text_start_suppressed_when_last_text_streaming() -> None:
    assembler = continuation(
        [{"type": "step-start"}, {"type": "text", "text": "Hel", "state": "streaming"}]
    )
    sent = run(
        assembler,
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "lo"},
        {"type": "text-end", "id": "t"},
    )
    assert sent == [
        {"type": "text-delta", "id": "t", "delta": "lo"},
        {"type": "text-end", "id": "t"},
    ]
    assert assembler.message["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Hello", "state": "done"},
    ]


def test_continuation_only_first_text_start_is_considered() -> None:
    assembler = continuation([{"type": "text", "text": "a", "state": "streaming"}])
    sent = run(
        assembler,
        {"type": "text-start", "id": "1"},
        {"type": "text-start", "id": "2"},
        {"type": "text-delta", "id": "2", "delta": "b"},
        {"type": "text-delta", "id": "1", "delta": "c"},
    )
    assert [c["type"] for c in sent] == ["text-start", "text-delta", "text-delta"]
    assert assembler.message["parts"] == [
        {"type": "text", "text": "ac", "state": "streaming"},
        {"type": "text", "text": "b", "state": "streaming"},
    ]


@pytest.mark.parametrize("state", ["done", None])
def test_continuation_text_start_applied_when_last_text_not_streaming(state: str | None) -> None:
    part: dict[str, object] = {"type": "text", "text": "old"}
    if state is not None:
        part["state"] = state
    assembler = continuation([part])
    chunk = {"type": "text-start", "id": "t"}
    assert assembler.process(chunk) is chunk
    assert assembler.message["parts"][-1] == {"type": "text", "text": "", "state": "streaming"}
    assert len(assembler.message["parts"]) == 2


def test_continuation_text_start_applied_without_text_parts() -> None:
    assembler = continuation(
        [{"type": "tool-t", "toolCallId": "c", "toolName": "t", "state": "output-available"}]
    )
    assert assembler.process({"type": "text-start", "id": "t"}) is not None
    assert assembler.message["parts"][-1]["type"] == "text"


def test_new_turn_text_start_never_suppressed() -> None:
    assembler = ReplyAssembler(
        {
            "id": "a",
            "role": "assistant",
            "parts": [{"type": "text", "text": "", "state": "streaming"}],
        },
        continuation=False,
    )
    assert assembler.process({"type": "text-start", "id": "t"}) is not None
    assert len(assembler.message["parts"]) == 2


def test_continuation_reasoning_start_forwarded_but_not_applied() -> None:
    assembler = continuation([{"type": "reasoning", "text": "step 1", "state": "streaming"}])
    chunk = {"type": "reasoning-start", "id": "r"}
    assert assembler.process(chunk) is chunk
    run(
        assembler,
        {"type": "reasoning-delta", "id": "r", "delta": ", step 2"},
        {"type": "reasoning-end", "id": "r"},
    )
    assert assembler.message["parts"] == [
        {"type": "reasoning", "text": "step 1, step 2", "state": "done"}
    ]


def test_continuation_reasoning_start_not_applied_when_text_streaming() -> None:
    assembler = continuation([{"type": "text", "text": "x", "state": "streaming"}])
    assert assembler.process({"type": "reasoning-start", "id": "r"}) is not None
    assert assembler.message["parts"] == [{"type": "text", "text": "x", "state": "streaming"}]
    assembler.process({"type": "reasoning-delta", "id": "r", "delta": "think"})
    assert assembler.message["parts"][-1] == {
        "type": "reasoning",
        "text": "think",
        "state": "streaming",
    }


def test_continuation_reasoning_start_applied_after_done_blocks() -> None:
    assembler = continuation(
        [
            {"type": "reasoning", "text": "old", "state": "done"},
            {"type": "text", "text": "x", "state": "done"},
        ]
    )
    assembler.process({"type": "reasoning-start", "id": "r"})
    assembler.process({"type": "reasoning-delta", "id": "r", "delta": "new"})
    assert assembler.message["parts"][0]["text"] == "old"
    assert assembler.message["parts"][-1] == {
        "type": "reasoning",
        "text": "new",
        "state": "streaming",
    }


def test_continuation_tool_output_updates_cloned_part() -> None:
    part: UIPart = {
        "type": "tool-pay",
        "toolCallId": "c1",
        "toolName": "pay",
        "state": "approval-responded",
        "input": {},
        "approval": {"id": "ap", "approved": True},
    }
    assembler = continuation([{"type": "step-start"}, part])
    sent = run(
        assembler,
        {"type": "start"},
        {"type": "tool-output-available", "toolCallId": "c1", "output": "paid"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t"},
        {"type": "text-delta", "id": "t", "delta": "Done"},
        {"type": "text-end", "id": "t"},
        {"type": "finish", "finishReason": "stop"},
    )
    assert sent[0] == {"type": "start"}
    assert sent[-1] == {"type": "finish", "messageMetadata": {"finishReason": "stop"}}
    assert assembler.message["parts"] == [
        {"type": "step-start"},
        part | {"state": "output-available", "output": "paid"},
        {"type": "step-start"},
        {"type": "text", "text": "Done", "state": "done"},
    ]
    assert assembler.continuation is True
