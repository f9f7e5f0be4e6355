"""Keeping a stored message within the database's row size (docs/agents.md#storage).

A message is stored as one JSON row. A message over the limit would fail to save, so before it
is written its largest, least valuable content is shrunk: first big tool outputs (keeping their
shape), then long text parts. Everything here measures the JSON text the store writes: compact
separators and raw (not `\\u`-escaped) non-ASCII characters. Sizes in characters count code
points; row sizes count UTF-8 bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from durachat.types import JSONDict, UIMessage

ROW_MAX_BYTES: Final = 1_800_000
"""Largest stored message, in UTF-8 bytes of its JSON text."""

_TOOL_OUTPUT_MAX_CHARS: Final = 1000
_TEXT_MAX_CHARS: Final = 1000
_TEXT_PREVIEW_CHARS: Final = 500
_MAX_DEPTH: Final = 8
"""Containers nested this deep inside a truncated output are replaced by a marker string."""
_MAX_SHARES: Final = 10
"""A container's budget is split between at most this many of its children."""
_MIN_CHILD_CHARS: Final = 80
"""Smallest budget a child is given, so every kept child stays readable."""
_TRUNCATED_FLAG: Final = "__truncated"
_TRUNCATED_CHARS: Final = "__truncatedChars"
_COMPACTED_TOOL_OUTPUTS: Final = "compactedToolOutputs"
_COMPACTED_TEXT_PARTS: Final = "compactedTextParts"


def truncate_tool_output(output: object, max_chars: int = _TOOL_OUTPUT_MAX_CHARS) -> object:
    """Shrink a tool output to about `max_chars` characters of JSON, keeping its shape.

    An output whose JSON fits is returned as is (the same object). Otherwise:

    * a string longer than its share is cut and ends with `... [truncated N chars]`, N being
      the string's original length;
    * an array keeps its leading items (each shrunk to its share) and, if any are dropped, ends
      with a marker string `[D of N items omitted]`;
    * an object keeps all its keys when its values can be shrunk to fit; otherwise it keeps its
      leading keys and gains `__truncated: true, __truncatedChars: N`, N being the original
      object's JSON length (with no key left, only those two fields remain);
    * an array or object nested 8 levels deep becomes a marker string
      `[nested output omitted: N chars]`;
    * numbers, booleans and null are kept.

    A container's budget is shared among its first 10 children: those smaller than an equal
    share keep their size and the larger ones split the rest equally (at least 80 characters
    each); later children get whatever room is left.

    The result's JSON is at most `max_chars` characters once `max_chars` leaves room for the
    markers (about 60 characters); below that the markers win.

    Args:
        output: A JSON value; not modified. Unchanged nested values are shared with the result.
        max_chars: The target size of the result's JSON text, in characters.

    Returns:
        `output` itself if it fits, otherwise a new, smaller value of the same kind.
    """
    length = _json_len(output)
    if length <= max_chars:
        return output
    return _truncate(output, max_chars, 0, length)[0]


def enforce_row_size_limit(message: UIMessage, max_bytes: int = ROW_MAX_BYTES) -> UIMessage:
    """Compact a message whose JSON is too big to be stored as one row.

    A message whose JSON is at most `max_bytes` UTF-8 bytes is returned as is (it is encoded
    once to find out). Otherwise:

    1. For an assistant message, every `output-available` part whose `output` JSON is over 1000
       characters gets `truncate_tool_output(output, 1000)`; the parts' `toolCallId`s are
       appended to `metadata.compactedToolOutputs` (existing entries kept, no duplicates).
    2. If the message is still too big (and for any other role, straight away), text parts
       longer than 1000 characters are replaced, first part first, by
       `[Text truncated for storage (N chars). First 500 chars: <first 500>...]` until the
       message fits; their indices are appended to `metadata.compactedTextParts` (existing
       entries kept, no duplicates).

    The result may still be too big when nothing else can be shrunk; the caller decides what
    to do then.

    Args:
        message: The message; not modified.
        max_bytes: The row limit in UTF-8 bytes of the message's JSON text.

    Returns:
        `message` itself if it fits or nothing could be compacted, otherwise a new message
        (new `parts` list, new dicts for changed parts and for `metadata`).
    """
    if _fits(message, max_bytes):
        return message
    parts = message.get("parts")
    if not isinstance(parts, list):
        return message
    result = message
    if message.get("role") == "assistant":
        result = _compact_tool_outputs(message, parts)
        if result is not message and _fits(result, max_bytes):
            return result
    return _truncate_text_parts(result, max_bytes)


# --- row size ---------------------------------------------------------------------------------


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _json_len(value: object) -> int:
    return len(_dumps(value))


def _utf8_size(text: str) -> int:
    if text.isascii():
        return len(text)
    # Lone surrogates (possible after decoding `\ud800`) count 3 bytes, as a replacement would.
    return len(text.encode("utf-8", "surrogatepass"))


def _fits(message: UIMessage, max_bytes: int) -> bool:
    text = _dumps(message)
    # A code point is at most 4 UTF-8 bytes: a short text needs no byte count.
    return len(text) * 4 <= max_bytes or _utf8_size(text) <= max_bytes


def _recorded(message: UIMessage, key: str) -> list[object]:
    """Return a copy of the list `metadata[key]` (empty if there is none)."""
    metadata = message.get("metadata")
    existing = metadata.get(key) if isinstance(metadata, dict) else None
    return list(existing) if isinstance(existing, list) else []


def _with_recorded(message: UIMessage, key: str, values: Sequence[str | int]) -> UIMessage:
    """Return `message` with `values` appended to the list `metadata[key]`, without duplicates."""
    recorded = _recorded(message, key)
    seen = {_hashable(item) for item in recorded}
    for value in values:
        if _hashable(value) not in seen:
            seen.add(_hashable(value))
            recorded.append(value)
    metadata = message.get("metadata")
    updated: JSONDict = dict(metadata) if isinstance(metadata, dict) else {}
    updated[key] = recorded
    return {**message, "metadata": updated}


def _hashable(value: object) -> object:
    # Recorded entries are strings or ints; anything else (even `true` next to `1`) is distinct.
    return value if type(value) in (str, int) else ("other", id(value))


def _compact_tool_outputs(message: UIMessage, parts: list[object]) -> UIMessage:
    compacted: list[object] = list(parts)
    call_ids: list[str] = []
    changed = False
    for index, part in enumerate(parts):
        if not (
            isinstance(part, dict) and part.get("state") == "output-available" and "output" in part
        ):
            continue
        output = part["output"]
        shrunk = truncate_tool_output(output, _TOOL_OUTPUT_MAX_CHARS)
        if shrunk is output:
            continue
        compacted[index] = {**part, "output": shrunk}
        changed = True
        call_id = part.get("toolCallId")
        if isinstance(call_id, str):
            call_ids.append(call_id)
    if not changed:
        return message
    return _with_recorded({**message, "parts": compacted}, _COMPACTED_TOOL_OUTPUTS, call_ids)


def _truncate_text_parts(message: UIMessage, max_bytes: int) -> UIMessage:
    # The row size is tracked as the message without its parts plus each part's size, so a
    # truncation re-encodes only the part it replaces.
    parts: list[object] = list(message["parts"])
    part_sizes = [_utf8_size(_dumps(part)) for part in parts]
    shell = _with_recorded({**message, "parts": []}, _COMPACTED_TEXT_PARTS, [])
    size = _utf8_size(_dumps(shell)) + sum(part_sizes) + max(0, len(parts) - 1)
    already = _recorded(message, _COMPACTED_TEXT_PARTS)
    recorded = {_hashable(item) for item in already}
    recorded_count = len(already)
    indices: list[int] = []
    for index, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text":
            continue
        text = part.get("text")
        if not isinstance(text, str) or len(text) <= _TEXT_MAX_CHARS:
            continue
        preview = (
            f"[Text truncated for storage ({len(text)} chars). "
            f"First {_TEXT_PREVIEW_CHARS} chars: {text[:_TEXT_PREVIEW_CHARS]}...]"
        )
        replacement = {**part, "text": preview}
        parts[index] = replacement
        new_size = _utf8_size(_dumps(replacement))
        size += new_size - part_sizes[index]
        indices.append(index)
        if index not in recorded:  # the index joins `metadata.compactedTextParts`
            size += len(str(index)) + (1 if recorded_count else 0)
            recorded_count += 1
        if size <= max_bytes:
            break
    if not indices:
        return message
    return _with_recorded({**message, "parts": parts}, _COMPACTED_TEXT_PARTS, indices)


# --- tool output truncation -------------------------------------------------------------------


def _truncate(
    value: object, budget: int, depth: int, length: int | None = None
) -> tuple[object, int]:
    """Return `value` shrunk to about `budget` characters of JSON, and the result's length.

    `length` is `value`'s JSON length when the caller already knows it.
    """
    if isinstance(value, str):
        return _truncate_string(value, budget, length)
    if isinstance(value, dict | list | tuple) and depth >= _MAX_DEPTH:
        marker = f"[nested output omitted: {_json_len(value) if length is None else length} chars]"
        return marker, _json_len(marker)
    if isinstance(value, dict):
        return _truncate_object(value, budget, depth, length)
    if isinstance(value, list | tuple):
        return _truncate_array(value, budget, depth)
    return value, _json_len(value)


def _truncate_string(value: str, budget: int, length: int | None = None) -> tuple[object, int]:
    if length is None:
        length = _json_len(value)
    if length <= budget:
        return value, length
    suffix = f"... [truncated {len(value)} chars]"
    keep = budget - 2 - len(suffix)  # 2 for the quotes; the suffix needs no escaping
    while keep > 0:
        candidate = value[:keep] + suffix
        size = _json_len(candidate)
        if size <= budget:
            return candidate, size
        # Escaped characters took more room than counted; every character dropped saves at
        # least one, so this fits on the next round.
        keep -= size - budget
    return suffix, len(suffix) + 2


def _shared_budgets(sizes: list[int], room: int) -> list[int]:
    """Split `room` between children of JSON lengths `sizes`: the smaller keep their size, the
    larger share the rest equally (at least `_MIN_CHILD_CHARS` each)."""
    cap = max(_MIN_CHILD_CHARS, _common_cap(sorted(sizes), room))
    return [min(size, cap) for size in sizes]


def _common_cap(sizes: list[int], room: int) -> int:
    """Return the largest cap such that `sizes` (ascending), each cut to it, fit in `room`."""
    for index, size in enumerate(sizes):
        left = len(sizes) - index
        if size * left > room:
            return max(0, room // left)
        room -= size
    return sizes[-1] if sizes else 0


def _truncate_array(items: Sequence[object], budget: int, depth: int) -> tuple[object, int]:
    count = len(items)
    shares = min(count, _MAX_SHARES)
    reserve = 1 + _json_len(_omitted_items(count, count)) if count > shares else 0
    planned = [_json_len(item) for item in items[:shares]]
    budgets = _shared_budgets(planned, budget - 2 - (shares - 1) - reserve)

    kept: list[object] = []
    sizes: list[int] = []
    size = 2
    changed = False
    for index, item in enumerate(items):
        comma = 1 if index else 0
        if index < shares:
            shrunk, item_size = _truncate(item, budgets[index], depth + 1, planned[index])
        else:
            room = max(_MIN_CHILD_CHARS, budget - size - comma - reserve)
            shrunk, item_size = _truncate(item, room, depth + 1)
        size += comma + item_size
        kept.append(shrunk)
        sizes.append(item_size)
        changed = changed or shrunk is not item
        if size > budget:
            break
    if len(kept) == count and size <= budget:
        if not changed and isinstance(items, list):
            return items, size
        return kept, size

    # Drop trailing items until the rest and the marker fit (or nothing is left).
    while True:
        marker = _omitted_items(count - len(kept), count)
        with_marker = size + (1 if kept else 0) + _json_len(marker)
        if with_marker <= budget or not kept:
            return [*kept, marker], with_marker
        kept.pop()
        size -= sizes.pop() + (1 if kept else 0)


def _omitted_items(dropped: int, count: int) -> str:
    return f"[{dropped} of {count} items omitted]"


def _truncate_object(
    value: JSONDict, budget: int, depth: int, length: int | None
) -> tuple[object, int]:
    entries = list(value.items())
    count = len(entries)
    shares = min(count, _MAX_SHARES)
    reserve = _json_len({_TRUNCATED_FLAG: True, _TRUNCATED_CHARS: 10**12}) - 1
    reserve = reserve if count > shares else 0
    key_sizes = [_key_len(key) + 1 for key, _ in entries[:shares]]  # `"key":`
    planned = [_json_len(item) for _, item in entries[:shares]]
    budgets = _shared_budgets(planned, budget - 2 - (shares - 1) - sum(key_sizes) - reserve)

    kept: JSONDict = {}
    sizes: list[int] = []
    size = 2
    changed = False
    for index, (key, item) in enumerate(entries):
        comma = 1 if index else 0
        if index < shares:
            key_size = key_sizes[index]
            shrunk, item_size = _truncate(item, budgets[index], depth + 1, planned[index])
        else:
            key_size = _key_len(key) + 1
            room = max(_MIN_CHILD_CHARS, budget - size - comma - key_size - reserve)
            shrunk, item_size = _truncate(item, room, depth + 1)
        size += comma + key_size + item_size
        kept[key] = shrunk
        sizes.append(key_size + item_size)
        changed = changed or shrunk is not item
        if size > budget and index + 1 >= shares:
            break
    if len(kept) == count:
        if size <= budget:
            return (kept if changed else value), size
        # Every key is there: cut the longest strings down to a common length before giving
        # up keys.
        strings = [position for position, (_, item) in enumerate(entries) if isinstance(item, str)]
        value_sizes = {position: _json_len(kept[entries[position][0]]) for position in strings}
        cap = _common_cap(sorted(value_sizes.values()), budget - size + sum(value_sizes.values()))
        for position in strings:
            key, item = entries[position]
            if value_sizes[position] <= cap:
                continue
            shrunk, item_size = _truncate_string(item, cap)
            if item_size < value_sizes[position]:
                kept[key] = shrunk
                size += item_size - value_sizes[position]
                sizes[position] += item_size - value_sizes[position]
        if size <= budget:
            return kept, size

    # Drop trailing keys until the rest and the truncation flags fit (or nothing is left).
    flags = {
        _TRUNCATED_FLAG: True,
        _TRUNCATED_CHARS: _json_len(value) if length is None else length,
    }
    flags_size = _json_len(flags) - 2
    while True:
        with_flags = size + (1 if kept else 0) + flags_size
        if with_flags <= budget or not kept:
            result = {**kept, **flags}
            return result, _json_len(result)
        kept.popitem()
        size -= sizes.pop() + (1 if kept else 0)


def _key_len(key: object) -> int:
    # JSON object keys are strings; non-string keys are written as their text.
    return _json_len(key if isinstance(key, str) else str(key))
