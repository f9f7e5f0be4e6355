"""The frames a simulated user sends, and the URL it connects to (docs/protocol.md).

Only the plain agents chat protocol is used here, so the users work against any server that
speaks it; nothing in this module needs Locust or gevent.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from durachat.messages import new_request_id
from durachat.protocol import MessageType
from durachat.types import JSONDict, UIMessage

WORDS: Final = (
    *("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"),
    *("juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"),
    *("sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"),
)
"""Prompt words: none of them is a directive of the demo agent (`slow`, `sure`, `error`...)."""


def prompt(words: int, seed: int) -> str:
    """A user message of `words` plain words, varied by `seed`."""
    return " ".join(WORDS[(seed + i) % len(WORDS)] for i in range(max(words, 1)))


def user_message(text: str, message_id: str | None = None) -> UIMessage:
    """A user UIMessage with one text part."""
    return {
        "id": message_id or f"user_{secrets.token_hex(8)}",
        "role": "user",
        "parts": [{"type": "text", "text": text}],
    }


def chat_request(
    messages: Sequence[UIMessage],
    *,
    trigger: str = "submit-message",
    request_id: str | None = None,
    extra: JSONDict | None = None,
) -> JSONDict:
    """A `cf_agent_use_chat_request` carrying the whole transcript, as `useAgentChat` sends it.

    Args:
        messages: The transcript the request carries (the new user message last).
        trigger: `submit-message` or `regenerate-message`.
        request_id: The request's id (a fresh one by default).
        extra: More fields for the request body.
    """
    body: dict[str, Any] = {"messages": list(messages), "trigger": trigger, **(extra or {})}
    return {
        "type": MessageType.USE_CHAT_REQUEST.value,
        "id": request_id or new_request_id(),
        "init": {"method": "POST", "body": json.dumps(body)},
    }


def resume_ack(request_id: str) -> JSONDict:
    """Accept a stream the server offered (`cf_agent_stream_resuming`): it replays it."""
    return {"type": MessageType.STREAM_RESUME_ACK.value, "id": request_id}


def resume_request() -> JSONDict:
    """Ask whether a stream can be resumed."""
    return {"type": MessageType.STREAM_RESUME_REQUEST.value}


def tool_result(tool_call_id: str, tool_name: str | None, output: Any) -> JSONDict:
    """Answer a client tool call and let the server continue."""
    frame: JSONDict = {
        "type": MessageType.TOOL_RESULT.value,
        "toolCallId": tool_call_id,
        "output": output,
        "autoContinue": True,
    }
    if tool_name is not None:
        frame["toolName"] = tool_name
    return frame


def tool_approval(tool_call_id: str, approved: bool) -> JSONDict:
    """Answer an approval request and let the server continue."""
    return {
        "type": MessageType.TOOL_APPROVAL.value,
        "toolCallId": tool_call_id,
        "approved": approved,
        "autoContinue": True,
    }


def new_connection_id() -> str:
    """A connection id (`_pk`), kept across reconnects as PartySocket does."""
    return str(uuid.uuid4())


def socket_url(
    host: str, agent: str, name: str, *, connection_id: str, token: str | None = None
) -> str:
    """The WebSocket URL of a conversation on `host` (an http(s) or ws(s) base URL, which may
    carry a path prefix): `/agents/{agent}/{name}?_pk=…[&token=…]`."""
    parts = urlsplit(host if "://" in host else f"http://{host}")
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = f"{parts.path.rstrip('/')}/agents/{quote(agent, safe='')}/{quote(name, safe='')}"
    query: dict[str, str] = {"_pk": connection_id}
    if token is not None:
        query["token"] = token
    return urlunsplit((scheme, parts.netloc, path, urlencode(query), ""))


def http_url(host: str, path: str) -> str:
    """`path` on the HTTP base URL `host` (ws(s) schemes map back to http(s))."""
    parts = urlsplit(host if "://" in host else f"http://{host}")
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, f"{parts.path.rstrip('/')}{path}", "", ""))
