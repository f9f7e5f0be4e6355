"""JSON shapes shared across durachat.

UI messages and UI message chunks follow the AI SDK's UI message stream. They are kept as plain
JSON objects (``dict``) end to end: they are stored, logged and forwarded as JSON, and the many
part and chunk variants are interpreted only where a rule needs a field.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JSONDict: TypeAlias = dict[str, Any]
"""A JSON object."""

UIMessage: TypeAlias = JSONDict
"""`{"id", "role": "user"|"assistant"|"system", "parts": [...], "metadata"?}`."""

UIPart: TypeAlias = JSONDict
"""One part of a `UIMessage` (`text`, `reasoning`, `tool-<name>`, `data-<name>`, ...)."""

UIChunk: TypeAlias = JSONDict
"""One chunk of the UI message stream (`start`, `text-delta`, `finish`, ...)."""
