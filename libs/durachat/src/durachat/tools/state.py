"""Tool part state transitions driven by the client (docs/protocol.md#client--server-frames).

Pure functions: each takes a tool part and returns the updated part as a new dict, or None when
the update does not apply, in which case nothing is to be written or broadcast. The part comes
from `durachat.messages.find_tool_part`; the caller replaces it in its message (or
`part.update(new)` for a message being streamed), persists, and broadcasts
`cf_agent_message_updated`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from durachat.messages.builder import tool_part_name
from durachat.types import JSONDict, UIPart

__all__ = [
    "DEFAULT_TOOL_ERROR_TEXT",
    "apply_tool_approval",
    "apply_tool_result",
    "approved_tool_parts",
    "tool_part_name",
]

DEFAULT_TOOL_ERROR_TEXT: Final = "Tool execution denied by user"
"""The reference's `errorText` for an `output-error` result that brings none."""

_RESULT_STATES: Final = frozenset({"input-available", "approval-requested", "approval-responded"})
_APPROVAL_STATES: Final = frozenset({"input-available", "approval-requested"})


def apply_tool_result(
    part: UIPart,
    *,
    output: object = None,
    state: str | None = None,
    error_text: str | None = None,
) -> UIPart | None:
    """Apply a client's tool result (`cf_agent_tool_result`) to a tool part.

    Only a part waiting for its result (`input-available`, `approval-requested`,
    `approval-responded`) changes. The first result wins: a part that already has one
    (`output-available`, `output-error`, `output-denied`) is left as is, so a repeated or
    conflicting result is a no-op. A part in another state (`input-streaming`) cannot take a
    result yet; to tell the cases apart, check `part["state"] in TERMINAL_TOOL_STATES`.

    Args:
        part: The tool part; not modified.
        output: The tool's output (for a result that is not an error).
        state: The frame's `state`: `"output-error"` records an error, anything else an output.
        error_text: The error message for `"output-error"`; `DEFAULT_TOOL_ERROR_TEXT` if None.

    Returns:
        A new part `{..., "state": "output-available", "output": output, "preliminary": False}`
        or `{..., "state": "output-error", "errorText": ...}`; None when nothing changes.
    """
    if part.get("state") not in _RESULT_STATES:
        return None
    if state == "output-error":
        text = error_text if error_text is not None else DEFAULT_TOOL_ERROR_TEXT
        return {**part, "state": "output-error", "errorText": text}
    return {**part, "state": "output-available", "output": output, "preliminary": False}


def apply_tool_approval(
    part: UIPart, approved: bool, *, reason: str | None = None
) -> UIPart | None:
    """Apply the user's answer to an approval request (`cf_agent_tool_approval`).

    Only a part in `input-available` or `approval-requested` changes, so answering twice is a
    no-op.

    Args:
        part: The tool part; not modified.
        approved: The user's decision.
        reason: Optional reason, stored as `approval.reason`.

    Returns:
        A new part in `approval-responded` (approved) or `output-denied` (denied), whose
        `approval` keeps the existing fields and has `id` (the existing id, else the
        `toolCallId`) and `approved`; None when nothing changes.
    """
    if part.get("state") not in _APPROVAL_STATES:
        return None
    existing = part.get("approval")
    approval: JSONDict = dict(existing) if isinstance(existing, dict) else {}
    if not isinstance(approval.get("id"), str):
        # Clients answer by approval id; a transcript without one gets the call id.
        approval["id"] = part.get("toolCallId")
    approval["approved"] = approved
    if reason is not None:
        approval["reason"] = reason
    return {
        **part,
        "state": "approval-responded" if approved else "output-denied",
        "approval": approval,
    }


def approved_tool_parts(parts: Iterable[object]) -> list[UIPart]:
    """Return the tool parts the user approved that have not run yet.

    These are the calls a continuation executes (`run_tool` with the part's `input`) before it
    calls the model again.

    Args:
        parts: An assistant message's parts.

    Returns:
        The parts in `approval-responded` with `approval.approved` true, in order.
    """
    approved: list[UIPart] = []
    for part in parts:
        if not isinstance(part, dict) or part.get("state") != "approval-responded":
            continue
        approval = part.get("approval")
        if isinstance(approval, dict) and approval.get("approved") is True:
            approved.append(part)
    return approved
