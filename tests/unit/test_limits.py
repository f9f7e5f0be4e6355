"""durachat.limits: depth and size bounds on client JSON, without recursion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durachat import limits
from durachat.limits import JSONLimitError


def nested(depth: int, leaf: Any = 1) -> Any:
    """`depth` levels of objects around `leaf`, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def deep_text(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_depths_of_values_and_texts() -> None:
    for value, depth in [(1, 0), ("x", 0), ([], 1), ({}, 1), ([[1], {"a": [2]}], 3)]:
        assert limits.json_depth(value) == depth
        assert limits.text_depth(json.dumps(value)) == depth
    assert limits.json_depth(nested(5000)) == 5000
    assert limits.text_depth(deep_text(5000)) == 5000


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": '[[[[{{{{ \\" ]]]', "b": ["]"]})
    assert limits.text_depth(text) == 2
    limits.check_text(text, max_depth=2)


def test_a_document_too_deep_to_parse_is_refused_before_parsing() -> None:
    text = deep_text(100_000)  # json.loads would raise RecursionError
    with pytest.raises(JSONLimitError) as caught:
        limits.loads(text)
    assert caught.value.kind == "depth"
    assert caught.value.found == 100_000
    assert "64" in str(caught.value)
    with pytest.raises(JSONLimitError):
        limits.check_text(text.encode())


def test_the_bounds_are_inclusive() -> None:
    assert limits.loads(deep_text(limits.MAX_JSON_DEPTH)) == nested(limits.MAX_JSON_DEPTH)
    limits.check_value(nested(limits.MAX_JSON_DEPTH))
    with pytest.raises(JSONLimitError):
        limits.check_value(nested(limits.MAX_JSON_DEPTH + 1))
    with pytest.raises(JSONLimitError) as caught:
        limits.check_text("[" + "1," * 100 + "1]", max_bytes=100)
    assert caught.value.kind == "size"


def test_not_json_is_a_decode_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        limits.loads("{nope")


def test_prune_drops_what_is_too_deep_and_keeps_the_rest() -> None:
    part = {"type": "text", "text": "hi", "providerMetadata": nested(960)}
    message = {"id": "m1", "role": "user", "parts": [part, {"type": "text", "text": "b"}]}
    pruned, dropped = limits.prune(message, max_depth=8)
    assert dropped == 1
    assert pruned["parts"][0]["text"] == "hi"
    assert pruned["parts"][1] == {"type": "text", "text": "b"}
    assert limits.json_depth(pruned["parts"][0]["providerMetadata"]) == 8 - 3
    assert message["parts"][0] is part and limits.json_depth(part) == 961  # not modified
    shallow = {"a": [1, 2, {"b": None}]}
    assert limits.prune(shallow) == (shallow, 0)
    assert limits.prune([[[1]], 2, [3]], max_depth=2) == ([[], 2, [3]], 1)
