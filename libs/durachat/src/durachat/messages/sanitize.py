"""Persistence hygiene for messages (docs/agents.md#storage)."""

from __future__ import annotations

from typing import Final

from durachat.types import JSONDict, UIMessage, UIPart

PROVIDER_TOOL_MAX_STRING_LENGTH: Final = 500
"""Longest string kept verbatim in a provider-executed tool's input or output."""

_OPENAI_EPHEMERAL_KEYS: Final = ("itemId", "reasoningEncryptedContent")
_METADATA_KEYS: Final = ("providerMetadata", "callProviderMetadata")
_PRESERVED_PROVIDER_TOOLS: Final = frozenset({"web_search", "web_fetch"})
_OPAQUE_KEY_PREFIX: Final = "encrypted"


def sanitize_message(message: UIMessage) -> UIMessage:
    """Strip what must not be stored or sent back to a provider.

    1. OpenAI `itemId` / `reasoningEncryptedContent` are removed from every part's
       `providerMetadata` and `callProviderMetadata` (empty containers are dropped): they name
       server-side items that expire, and replaying them breaks later requests.
    2. Reasoning parts with no visible text are removed, unless they still carry provider
       metadata (e.g. a redacted-thinking payload).
    3. In provider-executed tool parts (except `web_search` / `web_fetch`, whose results are
       replayed to the provider), strings in `input` / `output` longer than 500 characters are
       cut to 500 characters including a marker; values under keys starting with `encrypted`
       stay verbatim. Already-cut strings fit, so this is idempotent.

    Args:
        message: The message; not modified.

    Returns:
        A new message with new (shallow-copied) part dicts; unchanged nested values are shared.
    """
    parts = message.get("parts")
    sanitized: list[object] = []
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            sanitized.append(part)
            continue
        cleaned = _strip_openai_metadata(part)
        if _is_empty_reasoning(cleaned):
            continue
        sanitized.append(_truncate_provider_tool_payloads(cleaned))
    return {**message, "parts": sanitized}


def _strip_openai_metadata(part: UIPart) -> UIPart:
    result = dict(part)
    for key in _METADATA_KEYS:
        metadata = result.get(key)
        if not isinstance(metadata, dict):
            continue
        openai = metadata.get("openai")
        if not isinstance(openai, dict):
            continue
        remaining_openai = {k: v for k, v in openai.items() if k not in _OPENAI_EPHEMERAL_KEYS}
        remaining: JSONDict = {k: v for k, v in metadata.items() if k != "openai"}
        if remaining_openai:
            remaining["openai"] = remaining_openai
        if remaining:
            result[key] = remaining
        else:
            del result[key]
    return result


def _is_empty_reasoning(part: UIPart) -> bool:
    if part.get("type") != "reasoning":
        return False
    text = part.get("text")
    if isinstance(text, str) and text.strip():
        return False
    metadata = part.get("providerMetadata")
    return not (isinstance(metadata, dict) and metadata)


def _truncate_provider_tool_payloads(part: UIPart) -> UIPart:
    if not part.get("providerExecuted") or _tool_name(part) in _PRESERVED_PROVIDER_TOOLS:
        return part
    for key in ("input", "output"):
        if key in part:
            part[key] = _truncate_strings(part[key], preserve=False)
    return part


def _tool_name(part: UIPart) -> str | None:
    name = part.get("toolName")
    if isinstance(name, str):
        return name
    part_type = part.get("type")
    if isinstance(part_type, str) and part_type.startswith("tool-"):
        return part_type.removeprefix("tool-")
    return None


def _truncate_strings(value: object, *, preserve: bool) -> object:
    if isinstance(value, str):
        if preserve or len(value) <= PROVIDER_TOOL_MAX_STRING_LENGTH:
            return value
        marker = f"… [truncated, original length: {len(value)}]"
        return value[: max(0, PROVIDER_TOOL_MAX_STRING_LENGTH - len(marker))] + marker
    if isinstance(value, list):
        return [_truncate_strings(item, preserve=preserve) for item in value]
    if isinstance(value, dict):
        return {
            key: _truncate_strings(
                item,
                preserve=preserve or (isinstance(key, str) and key.startswith(_OPAQUE_KEY_PREFIX)),
            )
            for key, item in value.items()
        }
    return value
