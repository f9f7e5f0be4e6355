"""Rebuilding an interrupted stream from its log entries, and splicing a recovered one onto it."""

from __future__ import annotations

import json
from collections.abc import Mapping

from durachat.messages import ReplyAssembler
from durachat_infra.eventlog import Kind, LogEntry
from durachat_shard.recovery import Splice, rebuild_stream


def _chunk(entry_id: str, request: str, seq: int, chunk: Mapping[str, object]) -> LogEntry:
    frame = {"body": json.dumps(chunk), "done": False, "id": request, "seq": seq}
    return LogEntry(entry_id, Kind.CHUNK, json.dumps(frame), "*", request)


def _start(entry_id: str, request: str, **extra: object) -> LogEntry:
    control = {"op": "start", "req": request, "cont": False, **extra}
    return LogEntry(entry_id, Kind.CONTROL, json.dumps(control), "*", request)


SENT = [
    {"type": "start", "messageId": "m1"},
    {"type": "start-step"},
    {"type": "text-start", "id": "t1"},
    {"type": "text-delta", "id": "t1", "delta": "s00 "},
    {"type": "text-delta", "id": "t1", "delta": "s01 "},
]


def _log(request: str = "r1") -> list[LogEntry]:
    entries = [_start("1-0", request)]
    entries += [_chunk(f"2-{i}", request, i, c) for i, c in enumerate(SENT)]
    # Another request's entries and an error frame are ignored.
    entries.append(_chunk("3-0", "other", 0, {"type": "text-delta", "id": "x", "delta": "no"}))
    error = {"body": "boom", "done": False, "error": True, "id": request}
    entries.append(LogEntry("3-1", Kind.CHUNK, json.dumps(error), "*", request))
    return entries


def test_rebuild_collects_the_requests_latest_stream() -> None:
    rebuilt = rebuild_stream(_log(), "r1")
    assert rebuilt.stream_id == "1-0"
    assert rebuilt.chunks == SENT
    assert rebuilt.next_seq == len(SENT)
    assert not rebuilt.ended
    assert rebuilt.progress == 3  # text-start and two deltas


def test_a_retried_request_starts_over() -> None:
    entries = [*_log(), _start("4-0", "r1")]
    rebuilt = rebuild_stream(entries, "r1")
    assert rebuilt.stream_id == "4-0" and rebuilt.chunks == [] and rebuilt.next_seq == 0


def test_a_terminal_entry_marks_the_stream_ended() -> None:
    done = LogEntry("5-0", Kind.TERMINAL, "{}", "*", "r1")
    assert rebuild_stream([*_log(), done], "r1").ended


def test_a_continuation_stream_names_its_base_message() -> None:
    rebuilt = rebuild_stream([_start("1-0", "r1", cont=True, base="a1", baseParts=2)], "r1")
    assert rebuilt.continuation and rebuilt.base_id == "a1" and rebuilt.base_parts == 2


def test_the_recovered_stream_continues_the_open_text_block() -> None:
    splice = Splice(SENT)
    recovered = [
        {"type": "start", "messageId": "other"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t9"},
        {"type": "text-delta", "id": "t9", "delta": "s02 "},
        {"type": "text-end", "id": "t9"},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t10"},
    ]
    out = [c for c in (splice(c) for c in recovered) if c is not None]
    assert out == [
        {"type": "text-delta", "id": "t1", "delta": "s02 "},
        {"type": "text-end", "id": "t1"},
        {"type": "finish-step"},
        {"type": "start-step"},
        {"type": "text-start", "id": "t10"},
    ]


def test_the_partial_and_its_continuation_make_one_message() -> None:
    assembler = ReplyAssembler({"id": "x", "role": "assistant", "parts": []}, continuation=False)
    for chunk in SENT:
        assembler.process(chunk)
    splice = Splice(SENT)
    for chunk in [
        {"type": "start"},
        {"type": "text-start", "id": "n"},
        {"type": "text-delta", "id": "n", "delta": "s02 "},
        {"type": "text-end", "id": "n"},
    ]:
        spliced = splice(chunk)
        if spliced is not None:
            assembler.process(spliced)
    message = assembler.message
    assert message["id"] == "m1"
    texts = [p for p in message["parts"] if p["type"] == "text"]
    assert texts == [{"type": "text", "text": "s00 s01 s02 ", "state": "done"}]
