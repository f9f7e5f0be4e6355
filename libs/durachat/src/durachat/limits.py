"""Bounds on the JSON a server accepts from clients, and a way to cut stored JSON back within
them.

Python's `json` module (and `copy.deepcopy`, pydantic, FastAPI's encoder) recurses once per
level of nesting, and the interpreter's recursion limit is shared with the caller's stack: a
document nested about a thousand levels parses at the top of a program and raises
`RecursionError` a few frames deeper. So a document that was accepted once may fail on every
later read. Everything here works without recursion, so a check never fails the way the
document would.

* `check_text(text)` / `loads(text)`: refuse a JSON text over `MAX_JSON_BYTES` or nested over
  `MAX_JSON_DEPTH`, before it is parsed;
* `check_value(value)`: the same depth bound on an already parsed value (`MAX_MESSAGE_DEPTH`
  for one chat message);
* `json_depth(value)`, `text_depth(text)`: how deep a value or a JSON text is nested;
* `prune(value)`: a copy without the containers nested past the bound, for data stored before
  the bound was enforced (docs/operations.md#stored-data-that-cannot-be-read).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of arrays and objects accepted in a client's JSON (a scalar is depth 0,
`[]` is 1). Chat messages need about 6 levels around the data of a tool call; 64 leaves room
for any honest tool input or output and stays far below Python's recursion limit."""

MAX_MESSAGE_DEPTH: Final = MAX_JSON_DEPTH - 8
"""Deepest nesting of one chat message. Messages travel inside frames (a chat request's body
is `{"messages": [message, ...]}`), so a message within this bound fits in a frame within
`MAX_JSON_DEPTH`, however it is sent back."""

MAX_JSON_BYTES: Final = 4 * 1024 * 1024
"""Largest JSON text accepted, in UTF-8 bytes (the gateway's default frame limit is smaller)."""

_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
"""String literals (skipped whole, brackets inside them do not count) and brackets."""


@dataclass(slots=True)
class JSONLimitError(ValueError):
    """A JSON document over one of the bounds; `kind` says which."""

    kind: Literal["depth", "size"]
    limit: int
    found: int

    def __str__(self) -> str:
        if self.kind == "depth":
            return f"JSON nested deeper than {self.limit} levels"
        return f"JSON larger than {self.limit} bytes ({self.found})"


def text_depth(text: str | bytes) -> int:
    """How deep the arrays and objects of a JSON text are nested (0 for a scalar).

    Only brackets outside string literals count; the text need not be valid JSON.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth = max(0, depth - 1)
    return deepest


def json_depth(value: Any) -> int:
    """How deep the lists and dicts of a parsed JSON value are nested (0 for a scalar)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def check_text(
    text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> None:
    """Raise `JSONLimitError` if a JSON text is over `max_bytes` (UTF-8) or nested deeper than
    `max_depth`."""
    if isinstance(text, bytes):
        size = len(text)
        opening = text.count(b"[") + text.count(b"{")
    else:
        size = len(text.encode("utf-8", errors="replace"))
        opening = text.count("[") + text.count("{")
    if size > max_bytes:
        raise JSONLimitError("size", max_bytes, size)
    # Cheap first: a text with fewer opening brackets than the bound cannot nest past it.
    if opening > max_depth:
        depth = text_depth(text)
        if depth > max_depth:
            raise JSONLimitError("depth", max_depth, depth)


def check_value(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise `JSONLimitError` if a parsed JSON value is nested deeper than `max_depth`."""
    depth = json_depth(value)
    if depth > max_depth:
        raise JSONLimitError("depth", max_depth, depth)


def loads(
    text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, max_bytes: int = MAX_JSON_BYTES
) -> Any:
    """`json.loads`, after `check_text`: raises `JSONLimitError` instead of parsing a document
    over the bounds, and `json.JSONDecodeError` for one that is not JSON."""
    check_text(text, max_depth=max_depth, max_bytes=max_bytes)
    return json.loads(text)


def prune(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> tuple[Any, int]:
    """A copy of `value` within `max_depth`, and how many containers were dropped for it.

    A container that would sit deeper than the bound is left out: an object loses that key, an
    array that item. Scalars and every container within the bound are kept as they are (a
    value already within the bound is returned as is, not copied).
    """
    if json_depth(value) <= max_depth:
        return value, 0
    dropped = 0
    root: dict[str, Any] = {}
    # (source, depth of source, where to put its copy: container and key)
    stack: list[tuple[Any, int, Any, Any]] = [(value, 1, root, "value")]
    while stack:
        source, depth, parent, slot = stack.pop()
        if not isinstance(source, dict | list | tuple):
            _place(parent, slot, source)
            continue
        if depth > max_depth:
            dropped += 1
            continue
        copy: Any = {} if isinstance(source, dict) else []
        _place(parent, slot, copy)
        items = source.items() if isinstance(source, dict) else enumerate(source)
        # Reversed onto the stack, so children are copied in their order (lists append).
        for key, child in reversed(list(items)):
            stack.append((child, depth + 1, copy, key))
    return root["value"], dropped


def _place(parent: Any, slot: Any, value: Any) -> None:
    if isinstance(parent, dict):
        parent[slot] = value
    else:
        parent.append(value)
