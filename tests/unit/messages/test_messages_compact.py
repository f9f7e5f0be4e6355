"""Tests for durachat.messages.compact (docs/agents.md#storage)."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from durachat.messages import ROW_MAX_BYTES, enforce_row_size_limit, truncate_tool_output
from durachat.types import UIMessage, UIPart


def jlen(value: object) -> int:
    """Characters of `value`'s JSON as stored (compact, raw non-ASCII)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def row_bytes(message: UIMessage) -> int:
    return len(json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode())


def text(value: str) -> UIPart:
    return {"type": "text", "text": value, "state": "done"}


def tool_output(call_id: str, output: object, state: str = "output-available") -> UIPart:
    return {
        "type": "tool-fetch",
        "toolCallId": call_id,
        "state": state,
        "input": {"url": "u"},
        "output": output,
    }


def message(role: str, *parts: UIPart, **extra: object) -> UIMessage:
    return {"id": "m1", "role": role, "parts": list(parts)} | dict(extra)


def preview(original: str) -> str:
    return (
        f"[Text truncated for storage ({len(original)} chars). "
        f"First 500 chars: {original[:500]}...]"
    )


# --- truncate_tool_output: what fits --------------------------------------------------------


@pytest.mark.parametrize(
    "output", [None, 3, True, "short", [1, 2], {"a": {"b": [1, "x"]}}, "x" * 998]
)
def test_output_that_fits_is_returned_as_is(output: object) -> None:
    assert truncate_tool_output(output, 1000) is output


def test_size_boundary_is_the_json_length() -> None:
    exact = {"data": "x" * (1000 - jlen({"data": ""}))}
    assert jlen(exact) == 1000
    assert truncate_tool_output(exact, 1000) is exact
    over = {"data": exact["data"] + "x"}
    result = truncate_tool_output(over, 1000)
    assert result is not over
    assert jlen(result) <= 1000


def test_default_budget_is_1000_chars() -> None:
    assert truncate_tool_output("x" * 990) == "x" * 990
    assert jlen(truncate_tool_output("x" * 5000)) <= 1000


# --- truncate_tool_output: strings, arrays, objects ------------------------------------------


def test_long_string_keeps_its_start_and_names_its_original_length() -> None:
    original = "abcdefghij" * 500
    result = truncate_tool_output(original, 200)
    assert isinstance(result, str)
    assert result.endswith("... [truncated 5000 chars]")
    head = result.removesuffix("... [truncated 5000 chars]")
    assert head and original.startswith(head)
    assert jlen(result) <= 200


def test_string_budget_counts_json_escapes() -> None:
    original = 'line "quoted"\n\t\\' * 400
    result = truncate_tool_output(original, 300)
    assert isinstance(result, str)
    assert jlen(result) <= 300
    assert jlen(result) >= 250  # escapes are accounted for, not over-cut


def test_array_keeps_leading_items_and_says_how_many_were_dropped() -> None:
    original = [{"row": i, "value": f"v{i}"} for i in range(500)]
    result = truncate_tool_output(original, 1000)
    assert isinstance(result, list)
    *kept, marker = result
    assert 0 < len(kept) < 500
    assert kept == original[: len(kept)]
    assert marker == f"[{500 - len(kept)} of 500 items omitted]"
    assert jlen(result) <= 1000


def test_array_items_are_shrunk_before_they_are_dropped() -> None:
    original = ["a" * 3000, "b" * 3000]
    result = truncate_tool_output(original, 1000)
    assert isinstance(result, list)
    assert len(result) == 2
    assert result[0].startswith("aaa") and result[0].endswith("... [truncated 3000 chars]")
    assert result[1].startswith("bbb") and result[1].endswith("... [truncated 3000 chars]")
    assert jlen(result) <= 1000


def test_object_keeps_every_key_when_its_values_can_shrink() -> None:
    original = {
        "status": 200,
        "ok": True,
        "error": None,
        "body": "x" * 10_000,
        "headers": {"content-type": "text/html", "server": "s" * 2000},
    }
    result = truncate_tool_output(original, 1000)
    assert isinstance(result, dict)
    assert list(result) == list(original)
    assert result["status"] == 200 and result["ok"] is True and result["error"] is None
    assert result["body"].endswith("... [truncated 10000 chars]")
    assert result["headers"]["content-type"] == "text/html"
    assert result["headers"]["server"].endswith("... [truncated 2000 chars]")
    assert "__truncated" not in result
    assert jlen(result) <= 1000


def test_object_spreads_the_cut_over_its_strings_before_dropping_keys() -> None:
    original = {"a": "w" * 100, "b": "x" * 100, "c": "y" * 100, "d": "z" * 100}
    result = truncate_tool_output(original, 250)
    assert isinstance(result, dict)
    assert list(result) == ["a", "b", "c", "d"]
    heads = [value.removesuffix("... [truncated 100 chars]") for value in result.values()]
    assert all(original[key].startswith(head) for key, head in zip(result, heads, strict=True))
    assert len({len(head) for head in heads}) == 1 and len(heads[0]) >= 20
    assert jlen(result) <= 250


def test_longest_strings_are_cut_to_a_common_length_and_short_ones_kept() -> None:
    original = {"id": "r-17", "title": "t" * 400, "body": "b" * 900, "n": 5}
    result = truncate_tool_output(original, 300)
    assert isinstance(result, dict)
    assert result["id"] == "r-17" and result["n"] == 5
    assert len(result["title"]) == len(result["body"])
    assert 297 <= jlen(result) <= 300  # the budget is used, not wasted


def test_object_with_too_many_keys_keeps_leading_keys_and_is_flagged() -> None:
    original = {f"key{i}": f"value number {i}" for i in range(300)}
    result = truncate_tool_output(original, 500)
    assert isinstance(result, dict)
    assert result["__truncated"] is True
    assert result["__truncatedChars"] == jlen(original)
    kept = [key for key in result if not key.startswith("__")]
    assert 0 < len(kept) < 300
    assert kept == list(original)[: len(kept)]
    assert all(result[key] == original[key] for key in kept)
    assert jlen(result) <= 500


def test_object_that_cannot_keep_any_key_collapses_to_the_flags() -> None:
    original = {"k" * 200: "v", "j" * 200: "w"}
    result = truncate_tool_output(original, 100)
    assert result == {"__truncated": True, "__truncatedChars": jlen(original)}


def test_unchanged_nested_values_are_shared_and_input_is_not_modified() -> None:
    original = {"meta": {"page": 1, "tags": ["a", "b"]}, "body": "x" * 5000}
    snapshot = copy.deepcopy(original)
    result = truncate_tool_output(original, 1000)
    assert original == snapshot
    assert isinstance(result, dict)
    assert result["meta"] is original["meta"]


# --- truncate_tool_output: depth cap ----------------------------------------------------------


def nested(levels: int, leaf: object) -> object:
    value = leaf
    for _ in range(levels):
        value = {"child": value}
    return value


def test_containers_nested_8_deep_become_marker_strings() -> None:
    original = nested(12, ["x" * 3000])
    result = truncate_tool_output(original, 2000)
    node: Any = result
    for _ in range(8):
        assert isinstance(node, dict)
        node = node["child"]
    assert isinstance(node, str)
    assert node == f"[nested output omitted: {jlen(nested(4, ['x' * 3000]))} chars]"
    assert jlen(result) <= 2000


def test_containers_at_depth_7_are_kept() -> None:
    original = nested(7, ["x" * 3000])
    result = truncate_tool_output(original, 1000)
    node: Any = result
    for _ in range(7):
        node = node["child"]
    assert isinstance(node, list)
    assert node[0].endswith("... [truncated 3000 chars]")


def test_deep_output_that_fits_is_not_depth_capped() -> None:
    original = nested(20, 1)
    assert truncate_tool_output(original, 1000) is original


# --- truncate_tool_output: budget property ----------------------------------------------------


def random_json(rng: random.Random, depth: int, nodes: list[int]) -> object:
    nodes[0] -= 1
    roll = rng.random()
    if depth > 10 or roll < 0.35 or nodes[0] <= 0:
        return rng.choice(
            [
                "s" * rng.randint(0, 3000),
                'é"\n😀' * rng.randint(0, 400),
                rng.randint(-(10**6), 10**6),
                None,
                False,
                "short",
            ]
        )
    size = rng.randint(0, 25)
    if roll < 0.7:
        return [random_json(rng, depth + 1, nodes) for _ in range(size)]
    return {f"k{i}\t": random_json(rng, depth + 1, nodes) for i in range(size)}


@pytest.mark.parametrize("seed", range(40))
def test_result_never_exceeds_the_budget(seed: int) -> None:
    rng = random.Random(seed)
    original = random_json(rng, 0, [300])
    snapshot = copy.deepcopy(original)
    for max_chars in (80, 150, 400, 1000, 4000):
        result = truncate_tool_output(original, max_chars)
        assert jlen(result) <= max_chars
        assert type(result) is type(original)
    assert original == snapshot


# --- enforce_row_size_limit: size boundaries --------------------------------------------------


def test_default_limit_is_1_8_megabytes() -> None:
    assert ROW_MAX_BYTES == 1_800_000


def test_message_under_the_limit_is_returned_as_is() -> None:
    original = message("assistant", text("x" * 5000), tool_output("c1", "y" * 5000))
    assert enforce_row_size_limit(original) is original


def test_message_exactly_at_the_limit_is_kept_and_one_byte_over_is_compacted() -> None:
    original = message("user", text("x" * 5000))
    size = row_bytes(original)
    assert enforce_row_size_limit(original, size) is original
    result = enforce_row_size_limit(original, size - 1)
    assert result["parts"][0]["text"] == preview("x" * 5000)
    assert result["metadata"] == {"compactedTextParts": [0]}


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_size_is_counted_in_utf8_bytes_of_raw_characters(char: str) -> None:
    original = message("user", text(char * 3000))
    size = row_bytes(original)
    assert size > jlen(original)  # multi-byte characters count more than once
    # Not `\uXXXX` escaped: at exactly the raw UTF-8 size the message fits.
    assert enforce_row_size_limit(original, size) is original
    # Under a limit its character count would meet, it is still too big.
    limit = size - 1
    assert jlen(original) <= limit
    assert enforce_row_size_limit(original, limit)["parts"][0]["text"].startswith(
        "[Text truncated for storage (3000 chars)"
    )


def test_lone_surrogates_are_counted_not_rejected() -> None:
    original = message("user", text("\ud83d" * 2000))  # what decoding a cut `\ud83d` yields
    size = len(json.dumps(original, separators=(",", ":")).replace("\\ud83d", "xxx"))
    assert enforce_row_size_limit(original, size) is original
    assert enforce_row_size_limit(original, size - 1)["metadata"] == {"compactedTextParts": [0]}


def test_message_below_the_limit_is_encoded_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    original = message("assistant", *(text("x" * 2000) for _ in range(50)))
    encoded: list[object] = []
    real_dumps = json.dumps

    def counting_dumps(value: object, **kwargs: Any) -> str:
        encoded.append(value)
        return real_dumps(value, **kwargs)

    monkeypatch.setattr(json, "dumps", counting_dumps)
    assert enforce_row_size_limit(original) is original
    assert encoded == [original]


# --- enforce_row_size_limit: assistant tool outputs first -------------------------------------


def test_tool_outputs_are_compacted_first_and_recorded() -> None:
    big = {"rows": [{"i": i, "v": "x" * 100} for i in range(2000)]}
    original = message(
        "assistant",
        text("t" * 5000),
        tool_output("c1", big),
        tool_output("c2", "small"),
        tool_output("c3", "y" * 50_000),
        metadata={"model": "m"},
    )
    snapshot = copy.deepcopy(original)
    result = enforce_row_size_limit(original, 100_000)

    assert original == snapshot
    assert result is not original
    assert result["parts"][0] == original["parts"][0]  # text left alone: tools sufficed
    assert result["parts"][1]["output"] == truncate_tool_output(big, 1000)
    assert result["parts"][1]["input"] == {"url": "u"}
    assert result["parts"][2] is original["parts"][2]
    assert result["parts"][3]["output"] == truncate_tool_output("y" * 50_000, 1000)
    assert result["metadata"] == {"model": "m", "compactedToolOutputs": ["c1", "c3"]}
    assert row_bytes(result) <= 100_000


def test_only_output_available_parts_over_1000_chars_are_compacted() -> None:
    at_limit = "z" * 998  # 1000 chars of JSON
    original = message(
        "assistant",
        tool_output("c1", at_limit),
        {"type": "tool-fetch", "toolCallId": "c2", "state": "input-available", "input": "i" * 9000},
        {
            "type": "tool-fetch",
            "toolCallId": "c3",
            "state": "output-error",
            "input": {},
            "errorText": "e" * 9000,
        },
        tool_output("c4", "o" * 9000),
    )
    result = enforce_row_size_limit(original, 15_000)
    assert result["parts"][:3] == original["parts"][:3]
    assert result["parts"][0]["output"] is at_limit
    assert result["metadata"]["compactedToolOutputs"] == ["c4"]


def test_recorded_tool_ids_keep_existing_entries_without_duplicates() -> None:
    original = message(
        "assistant",
        tool_output("c1", "a" * 9000),
        tool_output("c2", "b" * 9000),
        metadata={"compactedToolOutputs": ["c0", "c1"]},
    )
    result = enforce_row_size_limit(original, 10_000)
    assert result["metadata"]["compactedToolOutputs"] == ["c0", "c1", "c2"]
    assert original["metadata"] == {"compactedToolOutputs": ["c0", "c1"]}


# --- enforce_row_size_limit: text parts -------------------------------------------------------


@pytest.mark.parametrize(
    ("metadata", "recorded"),
    [
        (None, [0, 3]),
        ({"model": "m"}, [0, 3]),
        ({"compactedTextParts": [12]}, [12, 0, 3]),
        ({"compactedTextParts": [0]}, [0, 3]),
        ({"compactedTextParts": []}, [0, 3]),
    ],
)
def test_text_parts_are_truncated_first_part_first_until_the_message_fits(
    metadata: dict[str, object] | None, recorded: list[int]
) -> None:
    texts = ["a" * 4000, "b" * 900, "ç" * 4000, "d" * 4000]
    original = message(
        "assistant",
        text(texts[0]),
        text(texts[1]),
        {"type": "step-start"},
        text(texts[2]),
        text(texts[3]),
    )
    if metadata is not None:
        original["metadata"] = metadata
    snapshot = copy.deepcopy(original)
    # Fits once two of the long parts are cut, not after one.
    after_two = copy.deepcopy(original)
    after_two["parts"][0]["text"] = preview(texts[0])
    after_two["parts"][3]["text"] = preview(texts[2])
    after_two["metadata"] = (metadata or {}) | {"compactedTextParts": recorded}
    limit = row_bytes(after_two)

    result = enforce_row_size_limit(original, limit)
    assert result == after_two
    assert result["parts"][1] is original["parts"][1]  # at most 1000 chars: never cut
    assert result["parts"][4] is original["parts"][4]  # fits before reaching it
    assert row_bytes(result) <= limit
    # One byte less and the next long part goes too.
    tighter = enforce_row_size_limit(original, limit - 1)
    assert tighter["parts"][4]["text"] == preview(texts[3])
    assert tighter["metadata"]["compactedTextParts"] == [*recorded, 4]
    assert original == snapshot


def test_text_truncation_follows_tool_compaction_and_records_both() -> None:
    original = message(
        "assistant",
        text("a" * 30_000),
        tool_output("c1", "o" * 30_000),
        text("b" * 30_000),
    )
    result = enforce_row_size_limit(original, 3000)
    assert result["metadata"] == {"compactedToolOutputs": ["c1"], "compactedTextParts": [0, 2]}
    assert result["parts"][0]["text"] == preview("a" * 30_000)
    assert result["parts"][2]["text"] == preview("b" * 30_000)
    assert row_bytes(result) <= 3000


def test_recorded_text_indices_keep_existing_entries() -> None:
    original = message(
        "user", text("short"), text("x" * 5000), metadata={"compactedTextParts": [0, 1]}
    )
    result = enforce_row_size_limit(original, 2000)
    assert result["metadata"] == {"compactedTextParts": [0, 1]}
    assert result["parts"][1]["text"] == preview("x" * 5000)


def test_message_that_cannot_fit_is_compacted_as_far_as_possible() -> None:
    original = message("assistant", text("x" * 1000), text("y" * 5000), metadata={"m": "z" * 9000})
    result = enforce_row_size_limit(original, 5000)
    assert result["parts"][0] is original["parts"][0]
    assert result["parts"][1]["text"] == preview("y" * 5000)
    assert result["metadata"] == {"m": "z" * 9000, "compactedTextParts": [1]}
    assert row_bytes(result) > 5000


def test_nothing_to_compact_returns_the_message_itself() -> None:
    original = message("assistant", text("x" * 1000), metadata={"m": "z" * 9000})
    assert enforce_row_size_limit(original, 5000) is original


@pytest.mark.parametrize("role", ["user", "system"])
def test_non_assistant_messages_only_get_text_truncation(role: str) -> None:
    original = message(role, tool_output("c1", "o" * 9000), text("x" * 9000))
    result = enforce_row_size_limit(original, 5000)
    assert result["parts"][0] is original["parts"][0]
    assert result["parts"][1]["text"] == preview("x" * 9000)
    assert result["metadata"] == {"compactedTextParts": [1]}


def test_compacted_message_is_stable_under_a_second_pass() -> None:
    original = message("assistant", text("a" * 9000), tool_output("c1", "o" * 9000))
    once = enforce_row_size_limit(original, 4000)
    assert enforce_row_size_limit(once, 4000) is once


def test_realistic_oversized_tool_result_fits_the_default_row() -> None:
    rows = [{"id": i, "title": f"Result {i}", "body": "lorem ipsum " * 20} for i in range(10_000)]
    original = message("assistant", text("Here are the results."), tool_output("c1", rows))
    assert row_bytes(original) > ROW_MAX_BYTES
    result = enforce_row_size_limit(original)
    assert row_bytes(result) <= ROW_MAX_BYTES
    assert result["metadata"] == {"compactedToolOutputs": ["c1"]}
    output = result["parts"][1]["output"]
    assert isinstance(output, list)
    assert output[0]["id"] == 0 and output[0]["title"] == "Result 0"
    assert output[0]["body"].endswith("... [truncated 240 chars]")
    assert output[-1].endswith("of 10000 items omitted]")
