"""Validating and normalising messages from clients and storage
(docs/protocol.md#messages-from-clients)."""

from __future__ import annotations

import json
from typing import Final

from durachat.messages.builder import normalize_tool_input
from durachat.types import JSONDict, UIMessage, UIPart

VALID_ROLES: Final = frozenset({"user", "assistant", "system"})
"""Roles a stored UIMessage may have."""

_V4_TOOL_STATES: Final = {
    "partial-call": "input-streaming",
    "call": "input-available",
    "result": "output-available",
    "error": "output-error",
}
_V4_KEYS: Final = ("content", "toolInvocations", "reasoning")


def is_valid_message(obj: object) -> bool:
    """Tell whether `obj` has the structure of a UIMessage.

    Args:
        obj: Anything decoded from JSON.

    Returns:
        True if it is a dict with a non-empty string `id`, a `role` of `user`, `assistant` or
        `system`, and a list `parts` (possibly empty).
    """
    if not isinstance(obj, dict):
        return False
    message_id = obj.get("id")
    return (
        isinstance(message_id, str)
        and bool(message_id)
        and obj.get("role") in VALID_ROLES
        and isinstance(obj.get("parts"), list)
    )


def auto_transform_messages(messages: list[object]) -> list[UIMessage]:
    """Bring messages of any supported shape to the current UIMessage shape.

    * Current (AI SDK v5+) messages, recognised by a `parts` list: every tool part's `input`
      becomes an object (see `normalize_tool_input`; absent means `{}`) and non-object parts
      are dropped. A message that needs neither is returned as is.
    * Legacy AI SDK v4 messages (`content`, `toolInvocations`, `reasoning`) are converted:
      `reasoning` becomes a reasoning part, each tool invocation a `tool-<name>` part
      (`partial-call` → `input-streaming`, `call` → `input-available`,
      `result` → `output-available`, `error` → `output-error`, `args` → `input`,
      `result` → `output`), string `content` a text part, `{text}` items of an array `content`
      text parts. Role `data` becomes `system`, a missing role `user`, a missing id
      `msg-<index>`.
    * Entries that are not objects, have neither shape, or are still invalid afterwards (see
      `is_valid_message`) are dropped.

    Args:
        messages: Decoded JSON values, e.g. a request's `messages` or stored rows.

    Returns:
        A new list of valid messages, in input order.
    """
    result: list[UIMessage] = []
    for index, raw in enumerate(messages):
        if not isinstance(raw, dict):
            continue
        if isinstance(raw.get("parts"), list):
            message = _normalize_current(raw)
        elif any(key in raw for key in _V4_KEYS):
            message = _from_v4(raw, index)
        else:
            continue
        if is_valid_message(message):
            result.append(message)
    return result


def _is_tool_part(part: UIPart) -> bool:
    part_type = part.get("type")
    return isinstance(part_type, str) and (
        part_type.startswith("tool-") or part_type == "dynamic-tool"
    )


def _normalize_current(message: JSONDict) -> UIMessage:
    parts: list[object] = message["parts"]
    changed = False
    normalized: list[UIPart] = []
    for part in parts:
        if not isinstance(part, dict):
            changed = True
            continue
        if _is_tool_part(part) and not isinstance(part.get("input"), dict):
            normalized.append({**part, "input": normalize_tool_input(part.get("input"))})
            changed = True
        else:
            normalized.append(part)
    return {**message, "parts": normalized} if changed else message


def _from_v4(message: JSONDict, index: int) -> UIMessage:
    parts: list[UIPart] = []
    reasoning = message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.append({"type": "reasoning", "text": reasoning})
    invocations = message.get("toolInvocations")
    for invocation in invocations if isinstance(invocations, list) else []:
        if isinstance(invocation, dict) and "toolName" in invocation:
            parts.append(_v4_tool_part(invocation))
    parts.extend(_v4_content_parts(message.get("content"), has_parts=bool(parts)))

    message_id = message.get("id")
    role = message.get("role")
    return {
        "id": message_id if isinstance(message_id, str) and message_id else f"msg-{index}",
        "role": "system" if role == "data" else (role or "user"),
        "parts": parts,
    }


def _v4_tool_part(invocation: JSONDict) -> UIPart:
    v4_state = invocation.get("state")
    state = _V4_TOOL_STATES.get(v4_state if isinstance(v4_state, str) else "", "input-available")
    part: UIPart = {
        "type": f"tool-{invocation['toolName']}",
        "toolCallId": invocation.get("toolCallId"),
        "state": state,
        "input": normalize_tool_input(invocation.get("args")),
    }
    if state == "output-available":
        part["output"] = invocation.get("result")
    elif state == "output-error":
        error_text = invocation.get("errorText")
        part["errorText"] = error_text if isinstance(error_text, str) else ""
    return part


def _v4_content_parts(content: object, *, has_parts: bool) -> list[UIPart]:
    if isinstance(content, str):
        # v4 kept an assistant's answer text in `content` next to its tool calls; keep it.
        return [{"type": "text", "text": content}] if content or not has_parts else []
    if isinstance(content, list):
        items = [item for item in content if isinstance(item, dict) and "text" in item]
        return [
            {
                "type": item["type"] if isinstance(item.get("type"), str) else "text",
                "text": item["text"] if isinstance(item["text"], str) else "",
            }
            for item in items
        ]
    if content is None or has_parts:
        return []
    return [{"type": "text", "text": json.dumps(content)}]
