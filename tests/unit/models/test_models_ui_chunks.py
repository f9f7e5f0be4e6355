"""Conversion of litellm stream chunks to UI chunks, fed with real litellm chunk objects."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from durachat.models._litellm import litellm
from durachat.models._ui_chunks import UIChunkConverter, _field
from durachat.types import UIChunk

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")


def chunk(finish_reason: str | None = None, **delta: Any) -> Any:
    # Plain dicts, as a provider sends them: litellm's constructor converts them.
    choices: list[Any] = [{"delta": delta, "finish_reason": finish_reason}]
    return litellm.types.utils.ModelResponseStream(choices=choices)


def call(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> Any:
    return {
        "index": index,
        "id": id,
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def convert(*chunks: Any) -> list[UIChunk]:
    converter = UIChunkConverter()
    out: list[UIChunk] = []
    for c in chunks:
        converter.feed(c, out)
    reason = converter.finish(out)
    return [*out, {"type": "finish", "finishReason": reason}]


def normalized(chunks: list[UIChunk]) -> list[UIChunk]:
    """Replace random part ids by `p0`, `p1`, ... in order of appearance."""
    names: dict[str, str] = {}
    return [
        {**c, "id": names.setdefault(c["id"], f"p{len(names)}")} if "id" in c else c for c in chunks
    ]


def test_reasoning_text_and_parallel_tool_calls() -> None:
    chunks = convert(
        chunk(role="assistant", content=""),
        chunk(reasoning_content="Think"),
        chunk(reasoning_content="ing"),
        chunk(content="Let me check."),
        chunk(tool_calls=[call(0, id="call_a", name="weather")]),
        chunk(tool_calls=[call(0, args='{"city"')]),
        chunk(tool_calls=[call(1, id="call_b", name="time", args="{")]),
        chunk(tool_calls=[call(0, args=': "Paris"}')]),
        chunk(tool_calls=[call(1, args='"tz": "CET"}')]),
        chunk(finish_reason="tool_calls"),
    )
    assert normalized(chunks) == [
        {"type": "reasoning-start", "id": "p0"},
        {"type": "reasoning-delta", "id": "p0", "delta": "Think"},
        {"type": "reasoning-delta", "id": "p0", "delta": "ing"},
        {"type": "reasoning-end", "id": "p0"},
        {"type": "text-start", "id": "p1"},
        {"type": "text-delta", "id": "p1", "delta": "Let me check."},
        {"type": "text-end", "id": "p1"},
        {"type": "tool-input-start", "toolCallId": "call_a", "toolName": "weather"},
        {"type": "tool-input-delta", "toolCallId": "call_a", "inputTextDelta": '{"city"'},
        {"type": "tool-input-start", "toolCallId": "call_b", "toolName": "time"},
        {"type": "tool-input-delta", "toolCallId": "call_b", "inputTextDelta": "{"},
        {"type": "tool-input-delta", "toolCallId": "call_a", "inputTextDelta": ': "Paris"}'},
        {"type": "tool-input-delta", "toolCallId": "call_b", "inputTextDelta": '"tz": "CET"}'},
        {
            "type": "tool-input-available",
            "toolCallId": "call_a",
            "toolName": "weather",
            "input": {"city": "Paris"},
        },
        {
            "type": "tool-input-available",
            "toolCallId": "call_b",
            "toolName": "time",
            "input": {"tz": "CET"},
        },
        {"type": "finish", "finishReason": "tool-calls"},
    ]


def test_text_after_reasoning_after_text_opens_new_blocks() -> None:
    chunks = normalized(
        convert(
            chunk(content="a"),
            chunk(reasoning_content="r"),
            chunk(content="b"),
            chunk(finish_reason="stop"),
        )
    )
    assert [(c["type"], c.get("id")) for c in chunks] == [
        ("text-start", "p0"),
        ("text-delta", "p0"),
        ("text-end", "p0"),
        ("reasoning-start", "p1"),
        ("reasoning-delta", "p1"),
        ("reasoning-end", "p1"),
        ("text-start", "p2"),
        ("text-delta", "p2"),
        ("text-end", "p2"),
        ("finish", None),
    ]


def test_thinking_blocks_carry_signatures_without_duplicating_text() -> None:
    chunks = normalized(
        convert(
            chunk(
                reasoning_content="deep",
                thinking_blocks=[{"type": "thinking", "thinking": "deep", "signature": None}],
            ),
            chunk(
                reasoning_content="",
                thinking_blocks=[{"type": "thinking", "thinking": "", "signature": "sig=="}],
            ),
            chunk(thinking_blocks=[{"type": "redacted_thinking", "data": "opaque"}]),
            chunk(content="done", finish_reason="stop"),
        )
    )
    assert chunks[:5] == [
        {"type": "reasoning-start", "id": "p0"},
        {"type": "reasoning-delta", "id": "p0", "delta": "deep"},
        {
            "type": "reasoning-delta",
            "id": "p0",
            "delta": "",
            "providerMetadata": {"litellm": {"signature": "sig=="}},
        },
        {
            "type": "reasoning-delta",
            "id": "p0",
            "delta": "",
            "providerMetadata": {"litellm": {"redactedData": "opaque"}},
        },
        {"type": "reasoning-end", "id": "p0"},
    ]


def test_thinking_blocks_alone_provide_the_text() -> None:
    chunks = convert(chunk(thinking_blocks=[{"type": "thinking", "thinking": "only here"}]))
    assert [c.get("delta") for c in chunks if c["type"] == "reasoning-delta"] == ["only here"]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("", {"type": "tool-input-available", "input": {}}),
        ('{"a": [1, 2]}', {"type": "tool-input-available", "input": {"a": [1, 2]}}),
        ('{"a": ', {"type": "tool-input-error", "input": '{"a": '}),
        ("[1, 2]", {"type": "tool-input-error", "input": "[1, 2]"}),
    ],
)
def test_tool_input_is_parsed_when_the_stream_ends(arguments: str, expected: UIChunk) -> None:
    chunks = convert(
        chunk(tool_calls=[call(0, id="c1", name="f", args=arguments)], finish_reason="tool_calls")
    )
    final = chunks[-2]
    assert {k: v for k, v in final.items() if k in expected} == expected
    assert final["toolCallId"] == "c1" and final["toolName"] == "f"
    if final["type"] == "tool-input-error":
        assert isinstance(final["errorText"], str) and final["errorText"]


def test_arguments_before_the_name_are_buffered() -> None:
    chunks = convert(
        chunk(tool_calls=[call(0, id="c1", args='{"x"')]),
        chunk(tool_calls=[call(0, name="f", args=": 1}")]),
    )
    assert chunks[:2] == [
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "f"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"x": 1}'},
    ]
    assert chunks[2]["input"] == {"x": 1}


def test_a_new_id_at_a_used_index_is_a_new_call() -> None:
    chunks = convert(
        chunk(tool_calls=[call(0, id="c1", name="f", args="{}")]),
        chunk(tool_calls=[call(0, id="c2", name="g", args='{"y": 2}')]),
    )
    available = [c for c in chunks if c["type"] == "tool-input-available"]
    assert [(c["toolCallId"], c["toolName"], c["input"]) for c in available] == [
        ("c1", "f", {}),
        ("c2", "g", {"y": 2}),
    ]


def test_a_call_without_id_gets_one() -> None:
    chunks = convert(chunk(tool_calls=[call(0, name="f", args="{}")]))
    assert chunks[0]["toolCallId"].startswith("call_")
    assert chunks[0]["toolCallId"] == chunks[1]["toolCallId"]


def test_text_block_closes_before_a_tool_call() -> None:
    chunks = convert(
        chunk(content="hi"),
        chunk(tool_calls=[call(0, id="c1", name="f", args="{}")]),
        chunk(content="more"),
    )
    types = [c["type"] for c in chunks]
    assert types == [
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-start",
        "tool-input-delta",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-available",
        "finish",
    ]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool-calls"),
        ("function_call", "tool-calls"),
        ("content_filter", "content-filter"),
        (None, "other"),
    ],
)
def test_finish_reasons(reason: str | None, expected: str) -> None:
    assert convert(chunk(content="x", finish_reason=reason))[-1]["finishReason"] == expected


def test_usage_only_and_empty_chunks_emit_nothing() -> None:
    empty = litellm.types.utils.ModelResponseStream(choices=[])
    assert convert(empty, chunk(content=""), chunk(role="assistant")) == [
        {"type": "finish", "finishReason": "other"}
    ]


def test_fast_field_access_matches_getattr() -> None:
    stream_chunk = chunk(
        finish_reason="stop",
        content="c",
        reasoning_content="r",
        thinking_blocks=[{"type": "thinking", "thinking": "r"}],
        tool_calls=[call(0, id="c1", name="f", args="{}")],
    )
    bare = chunk(content="only")
    for c in (stream_chunk, bare):
        choice = c.choices[0]
        assert _field(c, "choices") is c.choices
        for name in ("finish_reason", "delta"):
            assert _field(choice, name) == getattr(choice, name, None)
        for name in ("content", "reasoning_content", "thinking_blocks", "tool_calls", "nope"):
            assert _field(choice.delta, name) == getattr(choice.delta, name, None), name


def test_plain_objects_are_converted_too() -> None:
    delta = SimpleNamespace(content="hi", tool_calls=None)
    plain = SimpleNamespace(choices=[SimpleNamespace(delta=delta, finish_reason="stop")])
    chunks = normalized(convert(plain))
    assert chunks == [
        {"type": "text-start", "id": "p0"},
        {"type": "text-delta", "id": "p0", "delta": "hi"},
        {"type": "text-end", "id": "p0"},
        {"type": "finish", "finishReason": "stop"},
    ]
