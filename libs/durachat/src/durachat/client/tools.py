"""Tool calls waiting for the client: what `ChatClient.pending_tool_calls` finds (client tools
and calls that need approval, see docs/agents.md#client-tools)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from durachat.messages.builder import tool_part_name
from durachat.tools import parallel_batch_incomplete
from durachat.types import UIMessage, UIPart

WaitingState: TypeAlias = Literal["input-available", "approval-requested"]
"""The states of a tool call that waits for the client."""

_WAITING: Final[tuple[WaitingState, ...]] = ("input-available", "approval-requested")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call of the transcript that waits for the client.

    Attributes:
        tool_call_id: The call's id (`toolCallId`), what `add_tool_output` and `approve_tool`
            take.
        tool_name: The tool's name.
        input: The call's input, as the model gave it.
        state: `"input-available"`: a client tool waiting for its result (`add_tool_output`,
            `add_tool_error`); `"approval-requested"`: a server tool waiting for the user's
            decision (`approve_tool`).
        message_id: The id of the assistant message holding the call.
        approval_id: The approval's id, for an approval request that has one.
    """

    tool_call_id: str
    tool_name: str
    input: Any
    state: WaitingState
    message_id: str
    approval_id: str | None = None

    @property
    def needs_approval(self) -> bool:
        """Whether the call waits for an approval rather than for a result."""
        return self.state == "approval-requested"


ToolCallHook: TypeAlias = Callable[[ToolCall], Awaitable[Any]]
"""Answers a client tool call (`ChatClient.connect(on_tool_call=...)`), like the AI SDK's
`onToolCall`: return the output (any JSON value) to send it; return None to leave the call
unanswered; raise to answer with an error (the exception's text)."""


def pending_tool_calls(messages: list[UIMessage]) -> list[ToolCall]:
    """Find the tool calls of a transcript that wait for the client.

    Args:
        messages: The transcript.

    Returns:
        Every tool part of an assistant message in `input-available` or `approval-requested`,
        oldest first.
    """
    calls: list[ToolCall] = []
    for message in messages:
        parts = message.get("parts")
        message_id = message.get("id")
        if message.get("role") != "assistant" or not isinstance(parts, list):
            continue
        for part in parts:
            call = _waiting_call(part, str(message_id))
            if call is not None:
                calls.append(call)
    return calls


def _waiting_call(part: object, message_id: str) -> ToolCall | None:
    if not isinstance(part, dict):
        return None
    name = tool_part_name(part)
    call_id = part.get("toolCallId")
    state = next((s for s in _WAITING if part.get("state") == s), None)
    if name is None or not isinstance(call_id, str) or state is None:
        return None
    approval = part.get("approval")
    approval_id = approval.get("id") if isinstance(approval, dict) else None
    return ToolCall(
        tool_call_id=call_id,
        tool_name=name,
        input=part.get("input"),
        state=state,
        message_id=message_id,
        approval_id=approval_id if isinstance(approval_id, str) else None,
    )


def find_tool_call(messages: list[UIMessage], tool_call_id: str) -> tuple[int, int] | None:
    """Locate a tool part by its call id, newest message first.

    Args:
        messages: The transcript.
        tool_call_id: The call's id.

    Returns:
        (message index, part index), or None if no assistant message has the call.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        parts = message.get("parts")
        if message.get("role") != "assistant" or not isinstance(parts, list):
            continue
        for part_index, part in enumerate(parts):
            if isinstance(part, dict) and part.get("toolCallId") == tool_call_id:
                return index, part_index
    return None


def replace_part(
    messages: list[UIMessage], where: tuple[int, int], part: UIPart
) -> list[UIMessage]:
    """Return a copy of the transcript with one part replaced; the messages are not mutated.

    Args:
        messages: The transcript.
        where: (message index, part index), as `find_tool_call` returns.
        part: The new part.

    Returns:
        A new list, with a new message at the message index.
    """
    index, part_index = where
    parts = list(messages[index]["parts"])
    parts[part_index] = part
    updated = list(messages)
    updated[index] = {**messages[index], "parts": parts}
    return updated


def will_continue(message: UIMessage) -> bool:
    """Tell whether the server continues after an answer that left `message` as it is now.

    The server holds the continuation back while a parallel batch of calls is only partly
    answered (docs/protocol.md#continuations).

    Args:
        message: The assistant message holding the answered call.

    Returns:
        False while another call of the message still waits for an answer.
    """
    parts = message.get("parts")
    return not parallel_batch_incomplete(parts if isinstance(parts, list) else [])
