"""Tool execution events and the UI message stream chunks they become
(docs/protocol.md#how-chunks-become-parts).

`run_tool` yields `ToolEvent`s; `ToolEvent.to_chunk()` is exactly the chunk to stream, and
applying it with `durachat.messages.apply_chunk_to_parts` moves the tool part to its new state.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from durachat.types import UIChunk

__all__ = ["ToolEvent", "ToolEventKind", "approval_request_chunk", "new_approval_id"]


class ToolEventKind(StrEnum):
    """What a `ToolEvent` reports."""

    PRELIMINARY = "preliminary"
    """An intermediate result of a streaming tool; more follow."""
    OUTPUT = "output"
    """The final result."""
    ERROR = "error"
    """The call failed (invalid input, exception, unserialisable output); final."""


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """One step of a tool call's execution.

    Attributes:
        tool_call_id: The call this event belongs to.
        kind: Preliminary result, final result, or error.
        output: The JSON output (PRELIMINARY and OUTPUT).
        error_text: The message shown for an ERROR.
        exception: The exception behind an ERROR, for logging; never serialised.
    """

    tool_call_id: str
    kind: ToolEventKind
    output: Any = None
    error_text: str | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @classmethod
    def failure(
        cls, tool_call_id: str, error_text: str, exception: BaseException | None = None
    ) -> ToolEvent:
        """Make an ERROR event."""
        return cls(tool_call_id, ToolEventKind.ERROR, error_text=error_text, exception=exception)

    @property
    def final(self) -> bool:
        """True for the last event of a call (OUTPUT or ERROR)."""
        return self.kind is not ToolEventKind.PRELIMINARY

    def to_chunk(self) -> UIChunk:
        """Return the UI message stream chunk for this event.

        Returns:
            `{"type": "tool-output-available", "toolCallId", "output", "preliminary": true}`,
            `{"type": "tool-output-available", "toolCallId", "output"}` or
            `{"type": "tool-output-error", "toolCallId", "errorText"}`.
        """
        if self.kind is ToolEventKind.ERROR:
            return {
                "type": "tool-output-error",
                "toolCallId": self.tool_call_id,
                "errorText": self.error_text or "Tool execution failed",
            }
        chunk: UIChunk = {
            "type": "tool-output-available",
            "toolCallId": self.tool_call_id,
            "output": self.output,
        }
        if self.kind is ToolEventKind.PRELIMINARY:
            chunk["preliminary"] = True
        return chunk


def new_approval_id() -> str:
    """Allocate an approval id (`approval_` and 16 hex characters)."""
    return f"approval_{secrets.token_hex(8)}"


def approval_request_chunk(tool_call_id: str, approval_id: str | None = None) -> UIChunk:
    """Return the chunk asking the user to approve a tool call.

    The client answers with `cf_agent_tool_approval`; `apply_tool_approval` applies the answer.

    Args:
        tool_call_id: The call waiting for approval.
        approval_id: The id the client answers with; a new one when omitted.

    Returns:
        `{"type": "tool-approval-request", "approvalId", "toolCallId"}`.
    """
    return {
        "type": "tool-approval-request",
        "approvalId": approval_id or new_approval_id(),
        "toolCallId": tool_call_id,
    }
