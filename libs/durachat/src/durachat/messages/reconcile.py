"""Aligning a client's transcript with the server's before it is persisted
(docs/architecture.md#storage).

Clients send their whole transcript, which can lag behind the server (a tool result the server
applied, an assistant message the client built under its own id). Reconciliation keeps the
server's results and ids so that persisting the client's list neither regresses nor duplicates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Final

from durachat.messages.builder import TERMINAL_TOOL_STATES
from durachat.messages.sanitize import sanitize_message
from durachat.types import UIMessage, UIPart

_STALE_TOOL_STATES: Final = frozenset(
    {"input-available", "approval-requested", "approval-responded"}
)
_RESULT_FIELD: Final = {
    "output-available": "output",
    "output-error": "errorText",
    "output-denied": "approval",
}


def tool_call_ids(message: UIMessage) -> set[str]:
    """Return the `toolCallId` of every tool part of `message`."""
    parts = message.get("parts")
    return {
        part["toolCallId"]
        for part in (parts if isinstance(parts, list) else [])
        if isinstance(part, dict) and isinstance(part.get("toolCallId"), str) and part["toolCallId"]
    }


def reconcile_messages(
    incoming: list[UIMessage],
    server: Sequence[UIMessage],
    sanitize: Callable[[UIMessage], UIMessage] = sanitize_message,
) -> list[UIMessage]:
    """Reconcile a client's messages with the server's before persisting them.

    1. Tool-output merge: an incoming assistant tool part still waiting
       (`input-available`, `approval-requested`, `approval-responded`) whose call the server
       has settled (`output-available`, `output-error`, `output-denied`) takes the server's
       state and that state's result field (`output`, `errorText` or `approval`).
    2. Assistant ids, in two passes. First every incoming message claims the server message
       with its id. Then each unmatched incoming assistant message without tool parts adopts
       the id of the first unclaimed server assistant message without tool parts whose
       sanitized parts are identical. Each server message is claimed at most once, so two
       identical replies ("Sure", "Sure") map one-to-one and never merge.

    Args:
        incoming: The client's messages; not modified.
        server: The server's current transcript.
        sanitize: Applied to both sides before comparing contents, so ephemeral provider
            fields do not prevent a match.

    Returns:
        A new list; changed messages are new dicts, unchanged ones are the incoming objects.
    """
    merged = _merge_server_tool_outputs(incoming, server)
    return _reconcile_assistant_ids(merged, server, sanitize)


def resolve_tool_merge_id(message: UIMessage, server: Sequence[UIMessage]) -> str:
    """Return the id `message` must be stored under, judging by its tool calls.

    Tool call ids are unique within a conversation, so an assistant message sharing one with a
    server message under another id is that message, and takes its id.

    Args:
        message: The message about to be persisted.
        server: The server's current transcript.

    Returns:
        The id of the first server assistant message sharing a `toolCallId` with `message`,
        else `message`'s own id. Non-assistant messages always keep their own.
    """
    own_id = message.get("id")
    own = own_id if isinstance(own_id, str) else ""
    if message.get("role") != "assistant":
        return own
    owners: dict[str, str] = {}
    for candidate in server:
        candidate_id = candidate.get("id")
        if candidate.get("role") != "assistant" or not isinstance(candidate_id, str):
            continue
        for known_call_id in tool_call_ids(candidate):
            owners.setdefault(known_call_id, candidate_id)
    parts = message.get("parts")
    for part in parts if isinstance(parts, list) else []:
        call_id = part.get("toolCallId") if isinstance(part, dict) else None
        owner = owners.get(call_id) if isinstance(call_id, str) else None
        if owner is not None and owner != own:
            return owner
    return own


def _assistant_parts(message: UIMessage) -> list[UIPart]:
    parts = message.get("parts")
    if message.get("role") != "assistant" or not isinstance(parts, list):
        return []
    return [part for part in parts if isinstance(part, dict)]


def _merge_server_tool_outputs(
    incoming: list[UIMessage], server: Sequence[UIMessage]
) -> list[UIMessage]:
    settled: dict[str, UIPart] = {}
    for message in server:
        for part in _assistant_parts(message):
            if part.get("state") in TERMINAL_TOOL_STATES and isinstance(
                part.get("toolCallId"), str
            ):
                settled[part["toolCallId"]] = part
    if not settled:
        return list(incoming)

    result: list[UIMessage] = []
    for message in incoming:
        parts = message.get("parts")
        if message.get("role") != "assistant" or not isinstance(parts, list):
            result.append(message)
            continue
        new_parts = [_with_server_result(part, settled) for part in parts]
        changed = any(new is not old for new, old in zip(new_parts, parts, strict=True))
        result.append({**message, "parts": new_parts} if changed else message)
    return result


def _with_server_result(part: object, settled: dict[str, UIPart]) -> object:
    if not isinstance(part, dict) or part.get("state") not in _STALE_TOOL_STATES:
        return part
    call_id = part.get("toolCallId")
    server_part = settled.get(call_id) if isinstance(call_id, str) else None
    if server_part is None:
        return part
    state = server_part["state"]
    merged = {**part, "state": state}
    # Only the field that belongs to the server's state, so a stray field cannot pose as one.
    field = _RESULT_FIELD[state]
    if field in server_part:
        merged[field] = server_part[field]
    return merged


def _content_key(message: UIMessage, sanitize: Callable[[UIMessage], UIMessage]) -> str:
    parts = sanitize(message).get("parts")
    return json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)


def _is_plain_assistant(message: UIMessage) -> bool:
    return message.get("role") == "assistant" and not any(
        "toolCallId" in part for part in _assistant_parts(message)
    )


def _reconcile_assistant_ids(
    incoming: list[UIMessage],
    server: Sequence[UIMessage],
    sanitize: Callable[[UIMessage], UIMessage],
) -> list[UIMessage]:
    if not server:
        return incoming
    unclaimed_by_id: dict[object, list[int]] = {}
    for index, message in enumerate(server):
        unclaimed_by_id.setdefault(message.get("id"), []).append(index)

    claimed: set[int] = set()
    id_matched: set[int] = set()
    for position, message in enumerate(incoming):
        indices = unclaimed_by_id.get(message.get("id"))
        if indices:
            claimed.add(indices.pop(0))
            id_matched.add(position)

    server_keys: dict[int, str] = {}
    result: list[UIMessage] = []
    for position, message in enumerate(incoming):
        if position in id_matched or not _is_plain_assistant(message):
            result.append(message)
            continue
        key = _content_key(message, sanitize)
        match = None
        for index, candidate in enumerate(server):
            if index in claimed or not _is_plain_assistant(candidate):
                continue
            if index not in server_keys:
                server_keys[index] = _content_key(candidate, sanitize)
            if server_keys[index] == key:
                match = index
                break
        if match is None:
            result.append(message)
        else:
            claimed.add(match)
            result.append({**message, "id": server[match].get("id")})
    return result
