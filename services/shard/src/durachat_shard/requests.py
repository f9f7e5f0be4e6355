"""Parsing and validating the client frames a shard handles."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from durachat import limits
from durachat.messages import auto_transform_messages
from durachat.protocol.schema import InvalidInputError, check_messages
from durachat.tools import Tool
from durachat.types import JSONDict, UIMessage


class FrameError(ValueError):
    """A client frame that can't be handled; `code` is stable, `message` is for humans."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class ChatRequest:
    """A decoded `cf_agent_use_chat_request`."""

    request_id: str
    messages: list[UIMessage]
    trigger: str
    body: JSONDict | None
    client_tools: list[JSONDict] | None
    sent_ids: list[str] | None = None
    """The sends this request carries, for a request rebuilt without its messages (a recovered
    turn, from its record); None: read them from `messages`."""

    @property
    def user_message_ids(self) -> list[str]:
        """Ids of the trailing user messages: the sends this request carries."""
        if self.sent_ids is not None:
            return list(self.sent_ids)
        ids: list[str] = []
        for message in reversed(self.messages):
            if message.get("role") != "user":
                break
            ids.append(str(message["id"]))
        ids.reverse()
        return ids


def check_limits(frame: JSONDict) -> None:
    """Refuse a frame nested deeper than `durachat.limits.MAX_JSON_DEPTH`: stored, such data
    would break every later read of the conversation (docs/protocol.md#errors)."""
    try:
        limits.check_value(frame)
    except limits.JSONLimitError as exc:
        raise _limit_error(exc) from exc


def _limit_error(exc: limits.JSONLimitError, what: str = "the frame's") -> FrameError:
    if exc.kind == "depth":
        return FrameError("too_deep", f"{what} {exc}")
    return FrameError("frame_too_large", f"{what} {exc}")


def _check_messages(messages: list[Any]) -> None:
    """Each message within `MAX_MESSAGE_DEPTH`, as the store keeps it: a message stored as
    sent can be sent back in any frame."""
    for message in messages:
        try:
            limits.check_value(message, max_depth=limits.MAX_MESSAGE_DEPTH)
        except limits.JSONLimitError as exc:
            raise _limit_error(exc, "a message's") from exc


def _decode_messages(raw: list[Any], *, allow_empty: bool) -> list[UIMessage]:
    """A client's messages, checked against the `UIMessage` shape once, as they arrive
    (docs/security.md#bad-input): messages in the current shape as sent (a part that is not
    an object is refused, not dropped), messages in the AI SDK v4 shape once converted."""
    _check_messages(raw)
    messages = auto_transform_messages(raw)
    if len(messages) != len(raw):
        raise FrameError("invalid_messages", "every message needs an id, a role and parts")
    sent = [
        original if isinstance(original, dict) and isinstance(original.get("parts"), list) else m
        for original, m in zip(raw, messages, strict=True)
    ]
    try:
        check_messages(sent, allow_empty=allow_empty)
    except InvalidInputError as exc:
        raise FrameError(exc.code, exc.message) from None
    return messages


def parse_chat_request(frame: JSONDict) -> ChatRequest:
    """Decode a chat request frame; raises `FrameError` on anything malformed."""
    request_id = frame.get("id")
    if not isinstance(request_id, str) or not request_id:
        raise FrameError("invalid_request_id", "a chat request needs a non-empty string id")
    init = frame.get("init")
    if not isinstance(init, dict):
        raise FrameError("invalid_request", "a chat request needs an `init` object")
    raw_body = init.get("body")
    if not isinstance(raw_body, str) or not raw_body:
        raise FrameError("invalid_request", "`init.body` must be a JSON string")
    try:
        body: Any = limits.loads(raw_body)
    except limits.JSONLimitError as exc:
        raise _limit_error(exc) from exc
    except json.JSONDecodeError as exc:
        raise FrameError("invalid_json", f"`init.body` is not valid JSON: {exc.msg}") from exc
    if not isinstance(body, dict):
        raise FrameError("invalid_request", "`init.body` must encode a JSON object")
    raw_messages = body.pop("messages", None)
    if not isinstance(raw_messages, list):
        raise FrameError("invalid_messages", "the request body needs a `messages` array")
    messages = _decode_messages(raw_messages, allow_empty=False)
    trigger = body.pop("trigger", None)
    trigger = "regenerate-message" if trigger == "regenerate-message" else "submit-message"
    client_tools = body.pop("clientTools", None)
    if not isinstance(client_tools, list) or not client_tools:
        client_tools = None
    return ChatRequest(
        request_id=request_id,
        messages=messages,
        trigger=trigger,
        body=body or None,
        client_tools=client_tools,
    )


def parse_messages(frame: JSONDict) -> list[UIMessage]:
    """Decode a client `cf_agent_chat_messages` frame."""
    raw = frame.get("messages")
    if not isinstance(raw, list):
        raise FrameError("invalid_messages", "`messages` must be an array")
    return _decode_messages(raw, allow_empty=True)


def client_tool_names(agent_tools: Iterable[Tool], schemas: list[JSONDict] | None) -> set[str]:
    """Names of the tools the client resolves: the agent's client tools and the request's
    dynamic ones (`schemas`, its `clientTools`)."""
    names = {t.name for t in agent_tools if t.is_client}
    return names | {str(t.get("name")) for t in schemas or [] if isinstance(t, dict)}
