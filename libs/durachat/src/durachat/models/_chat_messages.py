"""Conversion of UI messages to OpenAI chat-completions messages (the format litellm takes)."""

from __future__ import annotations

import json
from typing import Any, Final

from durachat.types import JSONDict, UIMessage, UIPart

__all__ = ["to_chat_messages"]

_RESULT_STATES: Final = frozenset({"output-available", "output-error", "output-denied"})
_CALL_STATES: Final = _RESULT_STATES | {
    "input-available",
    "approval-requested",
    "approval-responded",
}
_DENIED: Final = "Tool execution denied."


def to_chat_messages(messages: list[UIMessage], *, system: str | None = None) -> list[JSONDict]:
    """Convert UI messages to OpenAI chat-completions messages.

    * `system` (if given) becomes a leading system message.
    * User and system messages: their text parts joined with newlines. A user message with image
      `file` parts gets a content list (text and `image_url` parts in part order) instead.
    * Assistant messages: text parts are concatenated (as the AI SDK's OpenAI provider does).
      Tool parts (`tool-<name>`, `dynamic-tool`) that have complete input become `tool_calls`;
      those with a result (`output-available`, `output-error`, `output-denied`, or an approval
      that was refused) add a `role: "tool"` message after the assistant message. An assistant
      message is split into separate assistant turns where text follows tool calls (normally at
      a `step-start` part), so each step's results precede the next step's text.
    * Not sent: reasoning, data, source and assistant file parts, tool calls still streaming
      their input, provider-executed tool calls, and messages left without content.

    Args:
        messages: The conversation, oldest first.
        system: System prompt to put first.

    Returns:
        New message dicts; the input is not modified.
    """
    out: list[JSONDict] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        role = message.get("role")
        parts: list[UIPart] = message.get("parts") or []
        if role == "assistant":
            _add_assistant(parts, out)
        elif role == "user":
            content = _user_content(parts)
            if content:
                out.append({"role": "user", "content": content})
        elif role == "system":
            text = "\n".join(_texts(parts))
            if text:
                out.append({"role": "system", "content": text})
    return out


def _texts(parts: list[UIPart]) -> list[str]:
    return [
        part["text"]
        for part in parts
        if part.get("type") == "text" and isinstance(part.get("text"), str) and part["text"]
    ]


def _user_content(parts: list[UIPart]) -> str | list[JSONDict]:
    if not any(_is_image(part) for part in parts):
        return "\n".join(_texts(parts))
    content: list[JSONDict] = []
    for part in parts:
        if part.get("type") == "text" and part.get("text"):
            content.append({"type": "text", "text": part["text"]})
        elif _is_image(part):
            content.append({"type": "image_url", "image_url": {"url": part["url"]}})
    return content


def _is_image(part: UIPart) -> bool:
    media_type = part.get("mediaType")
    return (
        part.get("type") == "file"
        and isinstance(media_type, str)
        and media_type.startswith("image/")
        and isinstance(part.get("url"), str)
    )


def _add_assistant(parts: list[UIPart], out: list[JSONDict]) -> None:
    texts: list[str] = []
    calls: list[JSONDict] = []
    results: list[JSONDict] = []
    for part in parts:
        kind = part.get("type")
        if kind in ("text", "step-start"):
            if calls:
                _add_step(texts, calls, results, out)
                texts, calls, results = [], [], []
            if kind == "text" and part.get("text"):
                texts.append(part["text"])
        elif isinstance(kind, str) and (kind == "dynamic-tool" or kind.startswith("tool-")):
            _add_tool(part, kind, calls, results)
    _add_step(texts, calls, results, out)


def _add_step(
    texts: list[str], calls: list[JSONDict], results: list[JSONDict], out: list[JSONDict]
) -> None:
    if not texts and not calls:
        return
    message: JSONDict = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        message["tool_calls"] = calls
    out.append(message)
    out.extend(results)


def _add_tool(part: UIPart, kind: str, calls: list[JSONDict], results: list[JSONDict]) -> None:
    state = part.get("state")
    call_id = part.get("toolCallId")
    name = part.get("toolName") if kind == "dynamic-tool" else kind.removeprefix("tool-")
    if (
        state not in _CALL_STATES
        or part.get("providerExecuted")
        or not isinstance(call_id, str)
        or not isinstance(name, str)
        or not name
    ):
        return
    arguments = json.dumps(_normalize_input(part.get("input")), ensure_ascii=False)
    calls.append(
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    )
    result = _result_text(part, state)
    if result is not None:
        results.append({"role": "tool", "tool_call_id": call_id, "content": result})


def _normalize_input(value: Any) -> JSONDict:
    # The same rule as the reference message builder's normalizeToolInput.
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {}


def _result_text(part: UIPart, state: str) -> str | None:
    if state == "output-available":
        output = part.get("output")
        return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    if state == "output-error":
        error = part.get("errorText")
        return error if isinstance(error, str) and error else "Tool execution failed."
    approval = part.get("approval")
    approval = approval if isinstance(approval, dict) else {}
    if state == "output-denied" or (
        state == "approval-responded" and approval.get("approved") is False
    ):
        reason = approval.get("reason")
        return f"{_DENIED} Reason: {reason}" if isinstance(reason, str) and reason else _DENIED
    return None
