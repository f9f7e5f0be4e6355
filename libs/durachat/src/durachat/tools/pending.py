"""Is a conversation waiting on its client? What continuations (docs/agents.md#continuations),
`Agent.has_pending_interaction` and recovery (docs/recovery.md#budgets) ask."""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Final

from durachat.messages.builder import TERMINAL_TOOL_STATES
from durachat.tools.state import tool_part_name

__all__ = ["parallel_batch_incomplete", "pending_client_interaction", "pending_interaction"]

_WAITING_STATES: Final = frozenset({"input-available", "approval-requested"})
_SETTLED_STATES: Final = TERMINAL_TOOL_STATES | {"approval-responded"}


def pending_interaction(parts: Iterable[object]) -> bool:
    """Tell whether any part waits for a tool result or an approval.

    The reference's `hasPendingInteraction` is this over the streaming message and every
    assistant message.

    Args:
        parts: A message's parts.

    Returns:
        True if a part is `input-available` or `approval-requested`.
    """
    return any(isinstance(part, dict) and part.get("state") in _WAITING_STATES for part in parts)


def pending_client_interaction(parts: Iterable[object], client_tool_names: Container[str]) -> bool:
    """Tell whether a part waits for something only the client can still provide.

    Narrower than `pending_interaction`, for recovery: an `input-available` call of a server
    tool is not waiting on anyone (its execution died with the turn), so it does not count.

    Args:
        parts: A message's parts.
        client_tool_names: Names of the tools the client resolves (the last request's
            `clientTools`; see also `ToolSet.client_tool_names`).

    Returns:
        True if a part is `approval-requested`, or `input-available` for a client tool.
    """
    for part in parts:
        if not isinstance(part, dict):
            continue
        state = part.get("state")
        if state == "approval-requested":
            return True
        if state == "input-available" and tool_part_name(part) in client_tool_names:
            return True
    return False


def parallel_batch_incomplete(parts: Iterable[object]) -> bool:
    """Tell whether a parallel batch of tool calls is only partly answered.

    Auto-continuation waits while this holds for the latest assistant message, so the model
    sees every sibling's result at once (reference issue #1649).

    Args:
        parts: The latest assistant message's parts.

    Returns:
        True if at least one tool part is settled (`output-available`, `output-error`,
        `output-denied` or `approval-responded`) and at least one part is still
        `input-available` or `approval-requested`.
    """
    waiting = settled = False
    for part in parts:
        if not isinstance(part, dict):
            continue
        state = part.get("state")
        if state in _WAITING_STATES:
            waiting = True
        elif state in _SETTLED_STATES and tool_part_name(part) is not None:
            settled = True
        if waiting and settled:
            return True
    return False
