"""Decoding stored JSON so that no stored document can break a read.

Rows written before the shard bounded client JSON (`durachat.limits`) may hold documents nested
hundreds of levels deep. `json.loads` of such a text fails with `RecursionError` as soon as the
caller's stack is a little deep, and every later copy or encoding of it fails the same way, so
a single row made a whole conversation unreadable
(docs/operations.md#stored-data-that-cannot-be-read).

`decode_stored` parses a document within the bound as usual; a deeper one is parsed in a fresh
thread (whose stack starts empty), cut back within the bound with `durachat.limits.prune`, and
reported as a `Problem`. A text that cannot be parsed at all gives `None` and a problem.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Final

from durachat import limits

log = logging.getLogger(__name__)

STORED_MAX_DEPTH: Final = limits.MAX_JSON_DEPTH
"""Deepest nesting a stored document is handed out with."""

MESSAGE_MAX_DEPTH: Final = limits.MAX_MESSAGE_DEPTH
"""Deepest nesting a stored message is handed out with: a client can send it back as it got
it."""


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a stored document was not handed out as stored."""

    reason: str
    depth: int
    dropped: int

    def __str__(self) -> str:
        if self.dropped:
            return f"{self.reason} (nested {self.depth} deep, {self.dropped} containers dropped)"
        return self.reason


def too_deep(text: str, max_depth: int = STORED_MAX_DEPTH) -> int | None:
    """The nesting depth of a JSON text if it is over `max_depth`, else None."""
    # Counting brackets is C speed; the exact scan only runs on texts with many of them.
    if text.count("[") + text.count("{") <= max_depth:
        return None
    depth = limits.text_depth(text)
    return depth if depth > max_depth else None


def decode_stored(text: str, max_depth: int = STORED_MAX_DEPTH) -> tuple[Any, Problem | None]:
    """A stored JSON document and, if it was not handed out as stored (nested deeper than
    `max_depth`, or not readable), why."""
    depth = too_deep(text, max_depth)
    if depth is None:
        try:
            return json.loads(text), None
        except (ValueError, RecursionError) as exc:
            return None, Problem(f"not readable JSON: {type(exc).__name__}", 0, 0)
    parsed = _parse_on_fresh_stack(text)
    if isinstance(parsed, BaseException):
        return None, Problem(f"not readable JSON: {type(parsed).__name__}", depth, 0)
    pruned, dropped = limits.prune(parsed, max_depth=max_depth)
    return pruned, Problem("too deeply nested", depth, dropped)


def decode_column(text: str) -> Any:
    """`decode_stored` for a column whose rows are not reported one by one: a problem is only
    logged."""
    value, problem = decode_stored(text)
    if problem is not None:
        log.warning("a stored JSON document could not be read as stored: %s", problem)
    return value


def _parse_on_fresh_stack(text: str) -> Any:
    """`json.loads` in a new thread, whose recursion budget is whole: a document our own
    encoder wrote (it has the same budget) always parses there. Returns the exception on
    failure."""
    result: list[Any] = []

    def parse() -> None:
        try:
            result.append(json.loads(text))
        except (ValueError, RecursionError) as exc:
            result.append(exc)

    thread = threading.Thread(target=parse, name="durachat-deep-json", daemon=True)
    thread.start()
    thread.join()
    return result[0] if result else RuntimeError("the parser thread died")


def stored_message(text: str, message_id: str, role: str) -> tuple[dict[str, Any], Problem | None]:
    """A stored message body and, if it was not handed out as stored, why. A body that is not
    a readable object becomes an empty message of the row's id and role."""
    value, problem = decode_stored(text, MESSAGE_MAX_DEPTH)
    if isinstance(value, dict):
        return value, problem
    problem = problem or Problem("not a JSON object", 0, 0)
    return {"id": message_id, "role": role, "parts": []}, problem
