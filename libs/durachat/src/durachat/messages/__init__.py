"""Pure message logic: build, reconcile, sanitise, compact, repair and normalise UI messages.

Nothing here does I/O. Messages, parts and chunks are plain JSON dicts
(see `durachat.types`).
"""

from durachat.messages.accumulator import StreamAccumulator
from durachat.messages.builder import (
    TERMINAL_TOOL_STATES,
    OpenBlocks,
    apply_chunk_to_parts,
    find_tool_part,
    is_replay_chunk,
    normalize_tool_input,
)
from durachat.messages.compact import ROW_MAX_BYTES, enforce_row_size_limit, truncate_tool_output
from durachat.messages.ids import new_assistant_id, new_request_id
from durachat.messages.reconcile import reconcile_messages, resolve_tool_merge_id, tool_call_ids
from durachat.messages.repair import INTERRUPTED_TOOL_ERROR, repair_transcript
from durachat.messages.reply import ReplyAssembler
from durachat.messages.sanitize import PROVIDER_TOOL_MAX_STRING_LENGTH, sanitize_message
from durachat.messages.transform import VALID_ROLES, auto_transform_messages, is_valid_message

__all__ = [
    "INTERRUPTED_TOOL_ERROR",
    "PROVIDER_TOOL_MAX_STRING_LENGTH",
    "ROW_MAX_BYTES",
    "TERMINAL_TOOL_STATES",
    "VALID_ROLES",
    "OpenBlocks",
    "ReplyAssembler",
    "StreamAccumulator",
    "apply_chunk_to_parts",
    "auto_transform_messages",
    "enforce_row_size_limit",
    "find_tool_part",
    "is_replay_chunk",
    "is_valid_message",
    "new_assistant_id",
    "new_request_id",
    "normalize_tool_input",
    "reconcile_messages",
    "repair_transcript",
    "resolve_tool_merge_id",
    "sanitize_message",
    "tool_call_ids",
    "truncate_tool_output",
]
