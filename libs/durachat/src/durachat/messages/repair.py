"""Repairing interrupted tool calls before a turn (docs/agents.md#storage).

A stream cut off mid-turn can leave a tool part that will never get its result: its server
`execute()` died with the process. Providers reject a transcript with a tool call and no result,
so before every turn such parts are settled as errors. Parts still waiting for something that
can genuinely arrive later (an approval, a client tool's result) are left waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Final

from durachat.messages.builder import TERMINAL_TOOL_STATES, normalize_tool_input, tool_part_name
from durachat.types import UIMessage, UIPart

INTERRUPTED_TOOL_ERROR: Final = "The tool call was interrupted before a result was recorded."
"""`errorText` of a tool part settled by `repair_transcript`."""

_APPROVAL_STATES: Final = frozenset({"approval-requested", "approval-responded"})


def repair_transcript(
    messages: list[UIMessage],
    *,
    client_tool_names: AbstractSet[str] = frozenset(),
    repair_part: Callable[[UIPart], UIPart] | None = None,
) -> tuple[list[UIMessage], list[int]]:
    """Settle tool calls that were interrupted before their result was recorded.

    A tool part (`tool-<name>` or `dynamic-tool`, with a `toolCallId`) is unsettled when it has
    no `output` / `result` field and its state is not `output-available`, `output-error` or
    `output-denied`. Every unsettled part is repaired, except the ones still awaiting an
    interaction that can arrive later, which are kept:

    * `approval-requested` (the user may still answer) and `approval-responded` (an approved
      call waiting for its continuation to run it);
    * `input-available` parts of a tool in `client_tool_names` (the client may still send the
      result).

    A repaired part gets `state: "output-error"` and `errorText: INTERRUPTED_TOOL_ERROR`, or
    whatever `repair_part` returns. In every tool part, repaired or not, `input` is normalised
    to an object (`normalize_tool_input`; missing or unparseable becomes `{}`).

    Repairing is idempotent as long as `repair_part` returns settled parts (or non-tool parts):
    a second pass changes nothing.

    Args:
        messages: The transcript; not modified.
        client_tool_names: Names of the tools the client resolves (no server `execute`).
        repair_part: Builds the replacement for an interrupted part. It gets a new dict (the
            part with its input normalised) that it may modify or return; a result equal to
            the original part counts as no change.

    Returns:
        The new transcript, where unchanged messages are the same objects and changed ones are
        new dicts with a new `parts` list, and the ascending indices of the changed messages.
    """
    repaired: list[UIMessage] = []
    changed: list[int] = []
    for index, message in enumerate(messages):
        result = _repair_message(message, client_tool_names, repair_part)
        if result is not message:
            changed.append(index)
        repaired.append(result)
    return repaired, changed


def _repair_message(
    message: UIMessage,
    client_tool_names: AbstractSet[str],
    repair_part: Callable[[UIPart], UIPart] | None,
) -> UIMessage:
    parts = message.get("parts")
    if not isinstance(parts, list):
        return message
    repaired = [_repair_part(part, client_tool_names, repair_part) for part in parts]
    if all(new is old for new, old in zip(repaired, parts, strict=True)):
        return message
    return {**message, "parts": repaired}


def _repair_part(
    part: object,
    client_tool_names: AbstractSet[str],
    repair_part: Callable[[UIPart], UIPart] | None,
) -> object:
    if not isinstance(part, dict) or not _is_tool_part(part):
        return part
    tool_input = normalize_tool_input(part.get("input"))
    normalized = part if part.get("input") is tool_input else {**part, "input": tool_input}
    if _is_settled(part) or _awaits_interaction(part, client_tool_names):
        return normalized
    if repair_part is None:
        return {**normalized, "state": "output-error", "errorText": INTERRUPTED_TOOL_ERROR}
    replacement = repair_part(dict(normalized))
    return part if replacement == part else replacement


def _is_tool_part(part: UIPart) -> bool:
    part_type = part.get("type")
    call_id = part.get("toolCallId")
    return (
        isinstance(part_type, str)
        and (part_type.startswith("tool-") or part_type == "dynamic-tool")
        and isinstance(call_id, str)
        and bool(call_id)
    )


def _is_settled(part: UIPart) -> bool:
    return "output" in part or "result" in part or part.get("state") in TERMINAL_TOOL_STATES


def _awaits_interaction(part: UIPart, client_tool_names: AbstractSet[str]) -> bool:
    state = part.get("state")
    if state in _APPROVAL_STATES:
        return True
    return state == "input-available" and tool_part_name(part) in client_tool_names
