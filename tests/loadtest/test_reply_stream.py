"""ReplyStream: timing a reply's chunks and checking each arrived exactly once, live and
across a resume (docs/protocol.md#resume-handshake)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from durachat.loadtest.stream import ReplyStream, chunk_stamp


class Recorded:
    """An Observer that keeps what it was told."""

    def __init__(self) -> None:
        self.chunks = 0
        self.first: list[float] = []
        self.gaps: list[float] = []
        self.deliveries: list[float] = []
        self.resume: list[float] = []

    def chunk(self) -> None:
        self.chunks += 1

    def first_chunk(self, ms: float) -> None:
        self.first.append(ms)

    def chunk_gap(self, ms: float) -> None:
        self.gaps.append(ms)

    def delivery(self, ms: float) -> None:
        self.deliveries.append(ms)

    def resume_gap(self, ms: float) -> None:
        self.resume.append(ms)


def chunk(seq: int | None, body: Mapping[str, Any], **extra: object) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "type": "cf_agent_use_chat_response",
        "id": "r1",
        "body": json.dumps(body),
        "done": False,
        **extra,
    }
    if seq is not None:
        frame["seq"] = seq
    return frame


REPLY: list[dict[str, Any]] = [
    {"type": "start", "messageId": "assistant_1"},
    {"type": "start-step"},
    {"type": "text-start", "id": "t"},
    {"type": "text-delta", "id": "t", "delta": "one "},
    {"type": "text-delta", "id": "t", "delta": "two "},
    {"type": "text-delta", "id": "t", "delta": "three"},
    {"type": "text-end", "id": "t"},
    {"type": "finish-step"},
    {"type": "finish"},
]
DONE: dict[str, Any] = {"type": "cf_agent_use_chat_response", "id": "r1", "body": "", "done": True}


def new_stream() -> tuple[ReplyStream, Recorded]:
    observer = Recorded()
    return ReplyStream("r1", 10.0, observer), observer


def test_a_reply_in_order_is_timed_and_complete() -> None:
    stream, observer = new_stream()
    for index, body in enumerate(REPLY):
        stream.on_frame(chunk(index, body), 10.1 + index * 0.02, 0)
    stream.on_frame(DONE, 11.0, 0)

    assert stream.done and stream.failure() is None
    assert stream.text() == "one two three"
    assert stream.message()["id"] == "assistant_1"
    assert observer.chunks == len(REPLY)
    # The first chunk is the first one that is not structural (text-start, at 10.14).
    assert [round(ms) for ms in observer.first] == [140]
    assert len(observer.gaps) == len(REPLY) - 3
    assert all(round(ms) == 20 for ms in observer.gaps)


def test_a_live_chunk_seen_twice_is_a_duplicate() -> None:
    stream, observer = new_stream()
    stream.on_frame(chunk(0, REPLY[0]), 10.1, 0)
    stream.on_frame(chunk(1, REPLY[1]), 10.2, 0)
    stream.on_frame(chunk(1, REPLY[1]), 10.3, 0)
    stream.on_frame(DONE, 10.4, 0)

    assert stream.failure() == "duplicate_chunk"
    assert observer.chunks == 2


def test_a_missing_chunk_is_a_gap_and_leaves_the_reply_incomplete() -> None:
    stream, _ = new_stream()
    stream.on_frame(chunk(0, REPLY[0]), 10.1, 0)
    stream.on_frame(chunk(2, REPLY[2]), 10.2, 0)
    stream.on_frame(DONE, 10.4, 0)

    assert stream.problems == ["seq_gap", "missing_chunks"]


def test_a_resume_replays_known_chunks_and_delivers_the_rest_once() -> None:
    stream, observer = new_stream()
    for index in range(4):
        stream.on_frame(chunk(index, REPLY[index]), 10.1 + index * 0.01, 0)
    stream.dropped(10.5)
    stream.replay_started()
    for index in range(6):
        stream.on_frame(chunk(index, REPLY[index], replay=True), 11.0, 0)
    stream.on_frame({**DONE, "done": False, "replay": True, "replayComplete": True}, 11.1, 0)
    for index in range(6, len(REPLY)):
        stream.on_frame(chunk(index, REPLY[index]), 11.2, 0)
    stream.on_frame(DONE, 11.3, 0)

    assert stream.failure() is None, stream.problems
    assert stream.text() == "one two three"
    assert observer.chunks == len(REPLY)
    assert [round(ms) for ms in observer.resume] == [500]
    assert stream.replay_ended_at == 11.1 and stream.replayed == 6


def test_a_replay_that_differs_from_what_arrived_is_reported() -> None:
    stream, _ = new_stream()
    stream.on_frame(chunk(0, REPLY[0]), 10.1, 0)
    stream.dropped(10.2)
    stream.replay_started()
    stream.on_frame(chunk(0, {"type": "start", "messageId": "other"}, replay=True), 10.3, 0)
    stream.on_frame(DONE, 10.4, 0)

    assert stream.failure() == "replay_mismatch"


def test_a_live_chunk_the_replay_already_covered_is_a_duplicate() -> None:
    stream, _ = new_stream()
    stream.on_frame(chunk(0, REPLY[0]), 10.1, 0)
    stream.dropped(10.2)
    stream.replay_started()
    stream.on_frame(chunk(0, REPLY[0], replay=True), 10.3, 0)
    stream.on_frame(chunk(1, REPLY[1], replay=True), 10.3, 0)
    stream.on_frame({**DONE, "done": False, "replay": True, "replayComplete": True}, 10.3, 0)
    stream.on_frame(chunk(1, REPLY[1]), 10.4, 0)

    assert stream.problems == ["duplicate_chunk"]


def test_without_seq_a_replay_is_matched_by_position() -> None:
    stream, observer = new_stream()
    for index in range(3):
        stream.on_frame(chunk(None, REPLY[index]), 10.1, 0)
    stream.dropped(10.2)
    stream.replay_started()
    for index in range(5):
        stream.on_frame(chunk(None, REPLY[index], replay=True), 10.3, 0)
    stream.on_frame({**DONE, "replay": True}, 10.4, 0)

    assert stream.done and stream.failure() is None
    assert observer.chunks == 5
    assert stream.text() == "one two "


def test_error_frames_and_outcomes_fail_the_reply() -> None:
    stream, _ = new_stream()
    stream.on_frame({**DONE, "done": False, "error": True, "body": "The model failed."}, 10.1, 0)
    stream.on_frame({**DONE, "outcome": "error"}, 10.2, 0)
    assert stream.failure() == "error_frame"

    aborted, _ = new_stream()
    aborted.on_frame({**DONE, "outcome": "aborted"}, 10.2, 0)
    assert aborted.failure() == "outcome_aborted"


def test_stamped_chunks_give_their_delivery_latency_unless_replayed() -> None:
    stream, observer = new_stream()
    stamped = {**REPLY[3], "providerMetadata": {"loadtest": {"t": 1_000_000_000}}}
    stream.on_frame(chunk(0, stamped), 10.1, 1_004_000_000)
    stream.dropped(10.2)
    stream.replay_started()
    stream.on_frame(chunk(0, stamped, replay=True), 10.3, 1_900_000_000)
    bench = {**REPLY[4], "providerMetadata": {"bench": {"t": 2_000_000_000}}}
    stream.on_frame(chunk(1, bench, replay=True), 10.3, 2_000_500_000)

    assert observer.deliveries == [4.0]
    assert chunk_stamp(bench) == 2_000_000_000
    assert chunk_stamp(REPLY[3]) is None


def test_tool_calls_that_wait_for_the_client_are_listed() -> None:
    stream, _ = new_stream()
    bodies: list[dict[str, Any]] = [
        {"type": "start"},
        {
            "type": "tool-input-available",
            "toolCallId": "c1",
            "toolName": "getLocation",
            "input": {},
        },
        {
            "type": "tool-input-available",
            "toolCallId": "c2",
            "toolName": "processPayment",
            "input": {"amount": 5, "recipient": "alice"},
        },
        {"type": "tool-approval-request", "toolCallId": "c2", "approvalId": "a2"},
        {"type": "finish"},
    ]
    for index, body in enumerate(bodies):
        stream.on_frame(chunk(index, body), 10.1, 0)
    stream.on_frame(DONE, 10.2, 0)

    calls = {(c.tool_call_id, c.tool_name, c.needs_approval) for c in stream.pending_calls()}
    assert calls == {("c1", "getLocation", False), ("c2", "processPayment", True)}
